"""The client for a parsed `qdrant...` output: a server's (qdrant-client) or Qdrant Edge's in
this process; both answer gpucli's calls (protocol.py)."""

from __future__ import annotations

from gpucli.output.sinks.qdrant.protocol import Client
from gpucli.output.sinks.qdrant.target import Target


def connect(target: Target, writes: bool = False) -> Client:
    """Open the output's collection: embedded storage (locked, LockedError when in use) or a
    server (nothing is sent until the first call). A run's sink (`writes`) gets the embedded
    collection in a process of its own (edge/process.py: Edge's binding holds the GIL); a search
    keeps it in this one."""
    if target.local and writes:
        from gpucli.output.sinks.qdrant.edge import EdgeProcess

        return EdgeProcess(target)
    if target.local:
        from gpucli.output.sinks.qdrant.edge import EdgeClient

        return EdgeClient(target)
    from gpucli.output.sinks.qdrant.server import ServerClient

    return ServerClient(target)
