"""Sink registry: every module (or subpackage) of this package that defines a `Sink` subclass
with a `name` is a sink (gpucli/core/registry.py: the rule the tasks follow too); `--out` picks
the first whose `accepts` says yes."""

from __future__ import annotations

import sys
from functools import cache

from gpucli.core.errors import UsageError
from gpucli.core.registry import discover
from gpucli.output.sinks.base import Rewrite, Sink

__all__ = ["Rewrite", "Sink", "all_sinks", "open_sink"]


@cache
def all_sinks() -> list[type[Sink]]:
    return discover(sys.modules[__name__], Sink)


def open_sink(target: str, state_dir: str = "") -> Sink:
    """The sink for `--out target`. `state_dir` (--state-dir) goes to the sinks that keep their
    state apart from the output (`takes_state_dir`: a Qdrant server); the others keep it beside
    the output and ignore it."""
    _refuse_bucket(target)
    for cls in all_sinks():
        if cls.accepts(target):
            return cls(target, state_dir=state_dir) if getattr(cls, "takes_state_dir", False) else cls(target)
    names = ", ".join(f"{c.name} ({c.help})" for c in all_sinks())
    raise UsageError(f"--out {target!r}: no sink takes this output; use one of: {names}")


def _refuse_bucket(target: str) -> None:
    """Outputs stay local (or on a mounted path) for now: a part is made durable by a rename
    within a directory and the ledger is SQLite beside it, and an object store has neither
    (docs/buckets.md says how to put the output in a bucket afterwards)."""
    from gpucli.inputs.stores.url import PROTOCOLS, is_url

    if is_url(target) and target.split("://", 1)[0].lower() in PROTOCOLS:
        raise UsageError(f"--out {target.split('?', 1)[0]!r}: outputs are written locally (or to a mounted path): "
                         "parts are made durable by renaming them and object stores cannot rename; write to a local "
                         "path and copy it afterwards, e.g. aws s3 sync OUT.parquet s3://bucket/OUT.parquet")
