"""Deleting points: chunks a shorter new version of a file no longer has, every point of removed
(pruned) inputs, and everything (`--full`). Each delete waits for the acknowledgement and is
idempotent: run twice, it deletes nothing more.
"""

from __future__ import annotations

from gpucli.output.sinks.qdrant.connection import Connection
from gpucli.output.sinks.qdrant.filters import qdrant_conditions, qdrant_filters
from gpucli.output.sinks.qdrant.points import point_id

PROBE_IDS = 1024  # ids per stale-chunk probe


def remove_stale(conn: Connection, counts: dict[str, int]) -> None:
    """Chunks of one file are always numbered 0..n-1 with no gaps (every write covers a file
    whole, in order), so a file has stale points exactly when chunk n exists: probe those ids
    (cheap everywhere), and filter-delete only for files that shrank."""
    from qdrant_client import models

    for path in _shrunk(conn, counts):
        selector = models.FilterSelector(filter=models.Filter(must=[
            *qdrant_conditions(path),  # path, and a table's record's id
            models.FieldCondition(key="chunk", range=models.Range(gte=counts[path])),
        ]))
        conn.call("deleting stale chunks",
                  lambda s=selector: conn.client.delete(conn.target.collection, points_selector=s, wait=True))


def _shrunk(conn: Connection, counts: dict[str, int]) -> list[str]:
    """The paths whose chunk number `counts[path]` exists: an older, longer version left it."""
    shrunk: list[str] = []
    probes = [(path, point_id(path, n)) for path, n in counts.items()]
    for start in range(0, len(probes), PROBE_IDS):
        group = probes[start:start + PROBE_IDS]
        found = conn.call("checking for stale chunks", lambda g=group: conn.client.retrieve(
            conn.target.collection, ids=[pid for _, pid in g], with_payload=False, with_vectors=False))
        present = {str(p.id) for p in found}
        shrunk.extend(path for path, pid in group if pid in present)
    return shrunk


def delete_inputs(conn: Connection, keys: list[str]) -> None:
    """Delete every point of these inputs: files by path, a table's records by path and id."""
    from qdrant_client import models

    for selected in qdrant_filters(keys):
        selector = models.FilterSelector(filter=selected)
        conn.call("deleting points of removed files",
                  lambda s=selector: conn.client.delete(conn.target.collection, points_selector=s, wait=True))


def delete_everything(conn: Connection) -> None:
    """Empty the collection, keeping its configuration (HNSW, quantization, indexes)."""
    from qdrant_client import models

    everything = models.FilterSelector(filter=models.Filter())
    conn.call("emptying the collection",
              lambda: conn.client.delete(conn.target.collection, points_selector=everything, wait=True))
