"""Deleting points: chunks a shorter new version of a file no longer has, every point of removed
(pruned) inputs, and everything (`--full`). Each delete waits for the acknowledgement and is
idempotent: run twice, it deletes nothing more.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpucli.core.keys import SEP, split_key
from gpucli.output.sinks.qdrant.points import point_ids
from gpucli.output.sinks.qdrant.protocol import Client, Selection

PROBE_IDS = 1024  # ids per stale-chunk probe
KEYS_PER_DELETE = 256  # keys per filter


def remove_stale(client: Client, counts: dict[str, int]) -> None:
    """Chunks of one file are always numbered 0..n-1 with no gaps (every write covers a file
    whole, in order), so a file has stale points exactly when chunk n exists: probe those ids
    (cheap everywhere), and filter-delete only for files that shrank."""
    for key in _shrunk(client, counts):
        path, record_id = split_key(key)  # a table's record: its path and id
        client.delete(Selection(paths=(path,), ids=(record_id,) if record_id is not None else (),
                                from_chunk=counts[key]))


def _shrunk(client: Client, counts: dict[str, int]) -> list[str]:
    """The keys whose chunk number `counts[key]` exists: an older, longer version left it."""
    keys = list(counts)
    probes = point_ids(keys, [counts[k] for k in keys])
    shrunk: list[str] = []
    for start in range(0, len(keys), PROBE_IDS):
        present = client.present(probes[start:start + PROBE_IDS])
        shrunk.extend(k for k, pid in zip(keys[start:start + PROBE_IDS], probes[start:start + PROBE_IDS])
                      if pid in present)
    return shrunk


def delete_inputs(client: Client, keys: list[str]) -> None:
    """Delete every point of these inputs: files by path, a table's records by path and id."""
    for selection in selections(keys):
        client.delete(selection)


def selections(keys: list[str], group: int = KEYS_PER_DELETE) -> Iterator[Selection]:
    """Selections of every point of these keys (gpucli/core/keys.py), a few hundred keys each:
    files by path, a table's records by path and id."""
    files = sorted(k for k in keys if SEP not in k)
    by_table: dict[str, list[str]] = {}
    for path, record_id in (split_key(k) for k in keys if SEP in k):
        by_table.setdefault(path, []).append(record_id or "")
    for start in range(0, len(files), group):
        yield Selection(paths=tuple(files[start:start + group]))
    for path, ids in sorted(by_table.items()):
        ids.sort()
        for start in range(0, len(ids), group):
            yield Selection(paths=(path,), ids=tuple(ids[start:start + group]))


def delete_everything(client: Client) -> None:
    """Empty the collection, keeping its configuration (HNSW, quantization, indexes)."""
    client.delete(Selection())
