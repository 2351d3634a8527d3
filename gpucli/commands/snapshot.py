"""`gpucli snapshot`: an embedded collection (a Qdrant Edge shard) packed as a Qdrant shard
snapshot, the file a server restores into a collection (issue 42): what a run on one machine
wrote can be served by a Qdrant server without embedding it again.

The storage is locked while it is packed (a run cannot write under it), the shard flushed and
closed first, and the file written beside its final name and renamed there when complete.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from gpucli.core.errors import UsageError, os_error
from gpucli.core.notes import note
from gpucli.output.sinks.qdrant import SPARSE_VECTOR, Connection, parse_target, vector_params


@dataclass(frozen=True)
class Snapshot:
    collection: str  # qdrant:PATH/COLLECTION
    file: str
    points: int
    bytes: int
    dims: int
    sparse: bool

    def restore_commands(self, url: str = "http://localhost:6333", name: str = "COLLECTION") -> list[str]:
        """A server's calls that make a matching collection (one shard) and restore the snapshot into it."""
        body: dict = {"vectors": {"size": self.dims, "distance": "Cosine"}, "shard_number": 1}
        if self.sparse:
            body["sparse_vectors"] = {SPARSE_VECTOR: {"modifier": "idf"}}
        return [f"curl -X PUT '{url}/collections/{name}' -H 'Content-Type: application/json' -d '{json.dumps(body)}'",
                f"curl -X POST '{url}/collections/{name}/shards/0/snapshots/upload?priority=snapshot' "
                f"-F 'snapshot=@{self.file}'"]


def snapshot(where: str, out_file: str) -> Snapshot:
    """Pack the embedded collection `where` (qdrant:PATH/COLLECTION) into `out_file`."""
    from gpucli.output.sinks.qdrant.snapshot import export_snapshot

    if not where.startswith("qdrant:") or where.startswith(("qdrant://", "qdrants://")):
        raise UsageError(f"{where}: gpucli snapshot packs an embedded collection (qdrant:PATH/COLLECTION); a Qdrant "
                         "server makes its own: POST /collections/COLLECTION/snapshots")
    target = parse_target(where)
    out = Path(out_file)
    if out.is_dir():
        raise UsageError(f"{out_file} is a directory: name the snapshot file (e.g. {target.collection}.snapshot)")
    conn = Connection(target)
    try:
        for moved in conn.notices:
            note(moved)
        client, name = conn.client, target.collection
        if not conn.call("checking the collection", lambda: client.collection_exists(name)):
            raise UsageError(f"{target.display}: no such collection")
        info = conn.call("reading the collection", lambda: client.get_collection(name))
        dims, _ = vector_params(info, target.display)
        sparse = SPARSE_VECTOR in (info.config.params.sparse_vectors or {})
        conn.call("closing the shard", lambda: client.release(name))  # flushed and closed; the lock stays held
        partial = out.with_name(f".{out.name}.partial")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            export_snapshot(client.shard_dir(name), partial)
            os.replace(partial, out)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise os_error(exc, str(out)) from None
        return Snapshot(target.display, str(out), info.points_count, out.stat().st_size, dims, sparse)
    finally:
        conn.close()


def render(result: Snapshot, json_out: bool) -> None:
    if json_out:
        print(json.dumps({**asdict(result), "restore": result.restore_commands()}), flush=True)
        return
    print(f"gpucli snapshot: {result.collection} ({result.points} points, {result.dims}-d"
          f"{', sparse bm25' if result.sparse else ''}) -> {result.file} ({result.bytes / 2**20:.1f} MiB)",
          file=sys.stderr)
    print("Restore it on a Qdrant server (one shard, the same vectors):", file=sys.stderr)
    for command in result.restore_commands():
        print(f"  {command}", file=sys.stderr)
