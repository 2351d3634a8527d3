"""Qdrant filters that select the points of inputs by their keys (gpucli/core/keys.py): files by
`path`, a table's records by `path` and `id`; a few hundred keys per filter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpucli.core.keys import ID_COLUMN, SEP, split_key


def qdrant_filters(keys: list[str], group: int = 256) -> Iterator[Any]:
    """Filters that select every point of these keys: files by path, records by path and id."""
    from qdrant_client import models

    files = sorted(k for k in keys if SEP not in k)
    by_table: dict[str, list[str]] = {}
    for path, record_id in (split_key(k) for k in keys if SEP in k):
        by_table.setdefault(path, []).append(record_id)
    for start in range(0, len(files), group):
        yield models.Filter(must=[models.FieldCondition(key="path", match=models.MatchAny(any=files[start:start + group]))])
    for path, ids in sorted(by_table.items()):
        ids.sort()
        for start in range(0, len(ids), group):
            yield models.Filter(must=[_match("path", path), models.FieldCondition(
                key=ID_COLUMN, match=models.MatchAny(any=ids[start:start + group]))])


def qdrant_conditions(key: str) -> list[Any]:
    """Conditions that select the points of one key."""
    path, record_id = split_key(key)
    return [_match("path", path)] + ([_match(ID_COLUMN, record_id)] if record_id is not None else [])


def _match(field: str, value: str) -> Any:
    from qdrant_client import models

    return models.FieldCondition(key=field, match=models.MatchValue(value=value))
