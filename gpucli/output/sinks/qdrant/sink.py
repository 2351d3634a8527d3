"""The Qdrant sink: points in a collection, on a server or in embedded storage.

Point ids are uuid5(path NUL chunk), so a rerun upserts in place (points.py). Before a file's
points are written, nothing is deleted; after, points of that file numbered at or above its new
chunk count (left by an older, longer version) are removed (deletes.py). Every call waits for
the server's acknowledgement (`wait=True`): `write` returns only once its points are durable.

All rows live in one place (the collection), so `write` names it as the location: a redone
file is upserted in place (never stale), a pruned file's points are deleted by `supersede`.

Server and embedded mode speak the same calls (protocol.py: a server through qdrant-client,
server.py; Qdrant Edge in this process, edge/) and differ in four places only: where the state
lives (state_dir.py), how calls fail and are retried (retry.py for a server; embedded errors are
final), how writes are made durable (embedded mode flushes its Qdrant Edge shard once per write;
a server acknowledges each call), and when the HNSW index is built (embedded: once, when a run
that wrote closes; a server: itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import gpucli.output.sinks.qdrant.collection as collection
import gpucli.output.sinks.qdrant.deletes as deletes
import gpucli.output.sinks.qdrant.state_dir as places
from gpucli.core.keys import row_keys
from gpucli.output.sinks.base import Sink
from gpucli.output.sinks.qdrant.collection import Mismatch, Wanted
from gpucli.output.sinks.qdrant.connect import connect
from gpucli.output.sinks.qdrant.points import chunk_counts
from gpucli.output.sinks.qdrant.protocol import Client, Rows
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
        self.client: Client | None = None
        self.wanted = Wanted(dims=0)  # what this run writes: known once `open` has the schema
        self.mismatch = Mismatch()  # what `reset` must repair before the first write
        self._unindexed = False  # embedded: points were written since the shard's indexes were built
        self._created = False  # this open made the collection (a run that found no input takes it back)
        self._wrote = False

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
        self.client = client = connect(self.parsed, writes=True)
        try:
            if client.exists():
                self.mismatch = collection.check_existing(client, self.wanted)
            else:
                collection.create(client, self.wanted)
                self._created = True
            self.notices.extend(client.notices)  # a collection moved from qdrant-client's local mode
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

    def _open_client(self) -> Client:
        if self.client is None:
            raise RuntimeError("the Qdrant sink is used before open or after close. This is a bug.")
        return self.client

    # --- write: upsert, then drop chunks a shorter new version no longer has -------------------
    def write(self, table) -> str:
        refusal = self.mismatch.refusal(self.display, self.wanted)
        if refusal is not None:
            raise refusal
        client = self._open_client()
        client.upsert(Rows(table, self.wanted.dims, self.wanted.model, self.wanted.sparse, self.parsed.text))
        keys, chunks = row_keys(table).to_pylist(), table.column("chunk").to_pylist()
        deletes.remove_stale(client, chunk_counts(keys, chunks))
        client.flush()  # embedded: on disk once this returns (a server acknowledged each call)
        self._unindexed = self._wrote = True
        return self.parsed.collection

    # --- incremental runs (state.py) ------------------------------------------------------------
    def reset(self) -> None:
        """Empty the collection, keeping its configuration (HNSW, quantization, indexes), unless
        its vectors must change (then it is made again, empty)."""
        client = self._open_client()
        deletes.delete_everything(client)
        if self.mismatch.needs_new_collection:
            self._recreate(client)
        if self.mismatch.other_model:
            client.set_metadata(self.wanted.metadata)
        self.mismatch = Mismatch()
        client.flush()

    def _recreate(self, client: Client) -> None:
        """--full on a collection made without --sparse or for another vector type: Qdrant changes
        no vectors of an existing collection, so the (now empty) collection is made again."""
        client.drop()
        collection.create(client, self.wanted)
        self.notices.append(f"made {self.display} again, with {self.mismatch.rebuilt_with(self.wanted)}: a Qdrant "
                            "collection's vectors are fixed when it is created")

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Delete every point of the given paths. A redone file is upserted in place under the
        same location and never listed here; a pruned one is. Idempotent."""
        client = self._open_client()
        paths = sorted(set().union(*stale.values())) if stale else []
        deletes.delete_inputs(client, paths)  # files by path, a table's records by path and id
        client.flush()

    def close(self) -> None:
        """Embedded, after a run that wrote: build the indexes once, for everything this run
        wrote (Qdrant Edge builds none on its own), then release the storage."""
        if self.client is None:
            return
        try:
            if self._unindexed:
                self.client.index()
                self._unindexed = False
        finally:
            self.client.close()
            self.client = None

    def discard(self) -> None:
        """After `close`, for a run that found no input: the embedded collection this open made,
        never written to, goes again, and with it the storage's lock file when no collection is
        left (Output.discard then removes the directories it made). A server's collection stays:
        a server is shared, and a collection on it is no file left in the way."""
        if self.parsed.local and self._created and not self._wrote and self.client is None:
            from gpucli.output.sinks.qdrant.edge import discard_new

            discard_new(Path(self.parsed.path), self.parsed.collection)
            self._created = False
