"""The Qdrant sink: points in a collection, on a server or in embedded storage.

Point ids are uuid5(path NUL chunk), so a rerun upserts in place (points.py). Before a file's
points are written, nothing is deleted; after, points of that file numbered at or above its new
chunk count (left by an older, longer version) are removed (deletes.py). Every call waits for
the server's acknowledgement (`wait=True`): `write` returns only once its points are durable.

All rows live in one place (the collection), so `write` names it as the location: a redone
file is upserted in place (never stale), a pruned file's points are deleted by `supersede`.

Server and embedded mode differ in four places only: where the state lives (state_dir.py),
how calls fail and are retried (connection.py), how writes are made durable (embedded mode
flushes its Qdrant Edge shard once per write, edge.py; a server acknowledges each call), and
when the HNSW index is built (embedded: once, when a run that wrote closes; a server: itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import gpucli.output.sinks.qdrant.collection as collection
import gpucli.output.sinks.qdrant.deletes as deletes
import gpucli.output.sinks.qdrant.state_dir as places
from gpucli.output.sinks.base import Sink
from gpucli.output.sinks.qdrant.collection import Mismatch, Wanted
from gpucli.output.sinks.qdrant.connection import Connection
from gpucli.output.sinks.qdrant.points import Points, chunk_counts, upsert
from gpucli.output.sinks.qdrant.target import is_qdrant, parse_target


class QdrantSink(Sink):
    name = "qdrant"
    help = ("qdrant://HOST:PORT/COLLECTION (server; qdrants:// for TLS; key from QDRANT_API_KEY) or "
            "qdrant:PATH/COLLECTION (embedded: Qdrant Edge in this process)")

    takes_state_dir: ClassVar[bool] = True  # open_sink passes --state-dir (server mode uses it)

    def __init__(self, target: str, state_dir: str = "") -> None:
        super().__init__(target)
        self.parsed = parse_target(target)
        self.state_root = places.state_root(state_dir)
        self.notices: list[str] = []  # for the user, once open returns (a ledger moved)
        self.conn: Connection | None = None
        self.wanted = Wanted(dims=0)  # what this run writes: known once `open` has the schema
        self.mismatch = Mismatch()  # what `reset` must repair before the first write
        self._unindexed = False  # embedded: points were written since the shard's indexes were built

    @classmethod
    def accepts(cls, target: str) -> bool:
        return is_qdrant(target)

    @property
    def display(self) -> str:
        return self.parsed.display

    @property
    def failures_path(self) -> str:
        if self.parsed.local:
            return str(Path(self.parsed.path) / f"{self.parsed.collection}.failures.jsonl")
        return str(self.state_dir / places.FAILURES)

    @property
    def state_dir(self) -> Path:
        """Beside the storage in embedded mode; per user, server and collection in server mode."""
        if self.parsed.local:
            return places.embedded_state_dir(self.parsed)
        return places.server_state_dir(self.parsed, self.state_root)

    # --- open: check the collection before any work -------------------------------------------
    def open(self, schema, metadata: dict[str, str]) -> None:
        """Called with the run lock held and before the ledger opens: a ledger an earlier
        version left in the current directory moves into the state directory first."""
        if not self.parsed.local:
            self._adopt_legacy_ledger()
        self.wanted = Wanted.of(schema, metadata)
        self.conn = conn = Connection(self.parsed)
        name = self.parsed.collection
        try:
            if conn.call("checking the collection", lambda: conn.client.collection_exists(name)):
                self.mismatch = collection.check_existing(conn, self.wanted)
            else:
                collection.create(conn, self.wanted)
            self.notices.extend(conn.notices)  # a collection moved from qdrant-client's local mode
        except BaseException:
            self.close()  # the pipeline calls close only after a successful open; free the storage lock
            raise

    def earlier_state_dirs(self) -> list[Path]:
        """Where an earlier gpucli kept this output's ledger (open moves it from there): what an
        output was made with is read from there until then (Output.made_with)."""
        return [] if self.parsed.local else [places.legacy_state_dir(self.parsed)]

    def _adopt_legacy_ledger(self) -> None:
        legacy = places.legacy_state_dir(self.parsed)
        if legacy.absolute() != self.state_dir.absolute() and places.adopt_legacy(legacy, self.state_dir):
            self.notices.append(f"moved the ledger of {self.display} from {legacy.absolute()} to {self.state_dir}: "
                                "gpucli now keeps it per user, server and collection, whatever directory it runs "
                                "from (--state-dir chooses another place)")

    def _durable(self) -> None:
        """Embedded: everything written so far is on disk once this returns (a server acknowledged
        each call already)."""
        if self.parsed.local:
            name = self.parsed.collection
            self.conn.call("syncing the storage", lambda: self.conn.client.flush(name))

    # --- write: upsert, then drop chunks a shorter new version no longer has -------------------
    def write(self, table) -> str:
        refusal = self.mismatch.refusal(self.display, self.wanted)
        if refusal is not None:
            raise refusal
        upsert(self.conn, Points.of(table, self.wanted, with_text=self.parsed.text))
        deletes.remove_stale(self.conn, chunk_counts(table))
        self._durable()
        self._unindexed = True
        return self.parsed.collection

    # --- incremental runs (state.py) ------------------------------------------------------------
    def reset(self) -> None:
        """Empty the collection, keeping its configuration (HNSW, quantization, indexes), unless
        its vectors must change (then it is made again, empty)."""
        deletes.delete_everything(self.conn)
        if self.mismatch.needs_new_collection:
            self._recreate()
        if self.mismatch.other_model:
            name, client = self.parsed.collection, self.conn.client
            self.conn.call("updating the collection",
                           lambda: client.update_collection(name, metadata=self.wanted.metadata))
        self.mismatch = Mismatch()
        self._durable()

    def _recreate(self) -> None:
        """--full on a collection made without --sparse or for another vector type: Qdrant changes
        no vectors of an existing collection, so the (now empty) collection is made again."""
        name, client = self.parsed.collection, self.conn.client
        self.conn.call("recreating the collection", lambda: client.delete_collection(name))
        collection.create(self.conn, self.wanted)
        self.notices.append(f"made {self.display} again, with {self.mismatch.rebuilt_with(self.wanted)}: a Qdrant "
                            "collection's vectors are fixed when it is created")

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Delete every point of the given paths. A redone file is upserted in place under the
        same location and never listed here; a pruned one is. Idempotent."""
        paths = sorted(set().union(*stale.values())) if stale else []
        deletes.delete_inputs(self.conn, paths)  # files by path, a table's records by path and id
        self._durable()

    def close(self) -> None:
        """Embedded, after a run that wrote: build the indexes once, for everything this run
        wrote (Qdrant Edge builds none on its own), then release the storage."""
        if self.conn is None:
            return
        try:
            if self.parsed.local and self._unindexed:
                name = self.parsed.collection
                self.conn.call("indexing the collection", lambda: self.conn.client.optimize(name))
                self._unindexed = False
        finally:
            self.conn.close()
            self.conn = None
