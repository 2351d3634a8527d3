"""`gpucli snapshot`: an embedded collection (a Qdrant Edge shard) packed as a Qdrant shard
snapshot, the file a server restores into a collection: what a run on one machine
wrote can be served by a Qdrant server without embedding it again.

The storage is locked while it is packed (a run cannot write under it), the shard flushed and
closed first, and the file written beside its final name and renamed there when complete. The
command prints the server's three calls that restore it: make a collection with the same
vectors (and gpucli's metadata, which `gpucli search` reads), upload the snapshot into its one
shard, and index `path` (a server keeps its payload indexes per collection, not in the shard).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpucli.core.durable import replace_durably
from gpucli.core.errors import UsageError, os_error
from gpucli.core.notes import note
from gpucli.output.sinks.qdrant import SPARSE_VECTOR, parse_target
from gpucli.output.sinks.qdrant.vector_types import storage

SERVER = "http://localhost:6333"


@dataclass(frozen=True)
class Snapshot:
    collection: str  # qdrant:PATH/COLLECTION
    file: str
    points: int
    bytes: int
    dims: int
    sparse: bool
    name: str = ""  # the collection's name: the server's collection in the restore calls
    vector_type: str = "float32"
    metadata: dict[str, str] = field(default_factory=dict)

    def restore_commands(self, url: str = SERVER) -> list[str]:
        """A server's calls that make a matching collection (one shard), restore the snapshot into
        it and index `path`, as gpucli made the embedded one."""
        where = f"{url}/collections/{self.name}"
        index = {"field_name": "path", "field_schema": "keyword"}
        return [f"curl -X PUT '{where}' -H 'Content-Type: application/json' -d '{_quoted(self.collection_body())}'",
                f"curl -X POST '{where}/shards/0/snapshots/upload?priority=snapshot' -F 'snapshot=@{self.file}'",
                f"curl -X PUT '{where}/index?wait=true' -H 'Content-Type: application/json' -d '{_quoted(index)}'"]

    def collection_body(self) -> dict[str, Any]:
        """The collection's configuration as a server's REST API takes it."""
        vectors: dict[str, Any] = {"size": self.dims, "distance": "Cosine"}
        kept = storage(self.vector_type)
        if kept.datatype:
            vectors["datatype"] = kept.datatype
        if kept.on_disk is not None:
            vectors["on_disk"] = kept.on_disk
        if kept.quantization == "int8":
            vectors["quantization_config"] = {"scalar": {"type": "int8", "quantile": kept.quantile}}
        elif kept.quantization == "binary":
            vectors["quantization_config"] = {"binary": {}}
        body: dict[str, Any] = {"vectors": vectors, "shard_number": 1}
        if self.sparse:
            body["sparse_vectors"] = {SPARSE_VECTOR: {"modifier": "idf"}}
        if self.metadata:
            body["metadata"] = self.metadata
        return body


def _quoted(body: dict[str, Any]) -> str:
    """JSON inside a shell's single quotes (a quote in a value closes and reopens them)."""
    return json.dumps(body, ensure_ascii=False).replace("'", "'\\''")


def snapshot(where: str, out_file: str) -> Snapshot:
    """Pack the embedded collection `where` (qdrant:PATH/COLLECTION) into `out_file`."""
    from gpucli.output.sinks.qdrant.edge import EdgeClient, export_snapshot

    if not where.startswith("qdrant:") or where.startswith(("qdrant://", "qdrants://")):
        raise UsageError(f"{where}: gpucli snapshot packs an embedded collection (qdrant:PATH/COLLECTION); a Qdrant "
                         "server makes its own: POST /collections/COLLECTION/snapshots")
    target = parse_target(where)
    out = Path(out_file)
    if out.is_dir():
        raise UsageError(f"{out_file} is a directory: name the snapshot file (e.g. {target.collection}.snapshot)")
    client = EdgeClient(target)
    try:
        for moved in client.notices:
            note(moved)
        if not client.exists():
            raise UsageError(f"{target.display}: no such collection")
        info = client.describe()
        dims = info.size(target.display)
        client.release()  # flushed and closed; the lock stays held
        partial = out.with_name(f".{out.name}.partial")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            export_snapshot(client.shard_dir, partial)
            replace_durably(partial, out)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise os_error(exc, str(out)) from None
        return Snapshot(target.display, str(out), info.points, out.stat().st_size, dims, SPARSE_VECTOR in info.sparse,
                        target.collection, info.vector_type, info.metadata)
    finally:
        client.close()


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
