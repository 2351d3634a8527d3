"""Embedded mode's durability: one SQLite sync per write instead of one per point."""

from __future__ import annotations

from typing import Any

from gpucli.core.errors import GpucliError


def group_commits(client: Any, collection: str) -> Any:
    """Embedded mode commits (and fsyncs) SQLite once per point: ~13 ms a point on this disk.
    Switch its storage to WAL with synchronous=NORMAL (commits no longer fsync, and the file
    stays safe from corruption on power loss), and let `checkpoint` run once per write:
    12x faster, and a write is still durable when it returns. This reaches into qdrant-client's
    internals (1.x: QdrantLocal.collections[name].storage.storage); when they differ, returns
    None and point-by-point commits stay."""
    import sqlite3

    try:
        db = client._client.collections[collection].storage.storage
    except (AttributeError, KeyError, TypeError):
        return None
    if not isinstance(db, sqlite3.Connection):
        return None
    try:
        if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            return None
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error:
        return None
    return db


def checkpoint(db: Any, display: str) -> None:
    """With group commits (db from `group_commits`, else None: nothing to do): make everything
    written so far durable, once per write."""
    if db is None:
        return
    busy = db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0]
    if busy:
        raise GpucliError(f"{display}: the embedded storage could not be synced (busy). This is a bug.")
