"""Qdrant: a server over REST, or qdrant-client's embedded local mode on disk.

    --out qdrant://HOST[:PORT]/COLLECTION      server (http; port 6333 by default)
    --out qdrants://HOST[:PORT]/COLLECTION     server over TLS
    --out qdrant:PATH/COLLECTION               embedded: storage directory PATH (qdrant:./qdrant_data/docs)

Options ride in the query string: `?text=false` leaves chunk text out of the payload,
`?batch=N` sets points per upsert (64-256, default 128). The API key comes only from the
`QDRANT_API_KEY` environment variable: never from the URL, never shown.

Point ids are uuid5(path NUL chunk), so a rerun upserts in place. Before a file's points are
written, nothing is deleted; after, points of that file numbered at or above its new chunk
count (left by an older, longer version) are removed. Every call waits for the server's
acknowledgement (`wait=True`): `write` returns only once its points are durable.

Server faults (connection refused, timeouts, 5xx, 429) are retried with exponential backoff
and jitter within a time budget; a 4xx fails at once with the server's message. Knobs (for
tests and slow links): GPUCLI_QDRANT_RETRIES (attempts, default 6), GPUCLI_QDRANT_RETRY_S
(budget per call, default 30), GPUCLI_QDRANT_BACKOFF_S (first pause, default 0.5),
GPUCLI_QDRANT_TIMEOUT_S (per request, default 10).

The failures JSONL and the ledger directory (state.py) go beside the storage in embedded
mode (PATH/COLLECTION.failures.jsonl, PATH/COLLECTION.gpucli/) and in the current directory
in server mode (./COLLECTION.failures.jsonl, ./COLLECTION.gpucli/HOST-PORT/): a cron job
that runs from one directory keeps one ledger per server and collection.

All rows live in one place (the collection), so `write` names it as the location: a redone
file is upserted in place (never stale), a pruned file's points are deleted by `supersede`.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from gpucli.errors import GpucliError, LockedError, UsageError
from gpucli.sinks.base import Sink

T = TypeVar("T")

# Fixed forever: changing it would change every point id and duplicate every collection.
NAMESPACE = uuid.UUID("6f1c3a0e-8d2b-5b7e-9a41-3c5d2e7f9b10")
API_KEY_ENV = "QDRANT_API_KEY"
DEFAULT_PORT = 6333
DEFAULT_BATCH = 128
BATCH_RANGE = (64, 256)
PROBE_IDS = 1024
# How the vectors were made (issue 14): `gpucli search` embeds queries with the recorded query prompt.
PROMPT_KEYS = ("gpucli.pooling", "gpucli.normalize", "gpucli.prompt", "gpucli.prompt_name", "gpucli.query_prompt",
               "gpucli.query_prompt_name")
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,255}$")
OPTIONS = {"text": "true/false: store chunk text in the payload (default true)",
           "batch": "points per upsert, 64-256 (default 128)"}
SCHEMES = ("qdrant://", "qdrants://", "qdrant:")


def point_id(path: str, chunk: int) -> str:
    """Deterministic id of one chunk of one file: reruns upsert in place."""
    return str(uuid.uuid5(NAMESPACE, f"{path}\x00{chunk}"))


@dataclass(frozen=True)
class Retry:
    """Bounded retries: at most `attempts` tries, no new pause once `budget_s` is spent."""

    attempts: int = 6
    budget_s: float = 30.0
    backoff_s: float = 0.5
    max_pause_s: float = 8.0
    timeout_s: float = 10.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Retry:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for attr, name, kind in (("attempts", "RETRIES", int), ("budget_s", "RETRY_S", float),
                                 ("backoff_s", "BACKOFF_S", float), ("timeout_s", "TIMEOUT_S", float)):
            raw = env.get(f"GPUCLI_QDRANT_{name}")
            if raw is None:
                continue
            try:
                values[attr] = kind(raw)
            except ValueError:
                raise UsageError(f"GPUCLI_QDRANT_{name}: {raw!r} is not a valid {kind.__name__}") from None
        retry = cls(**values)
        if retry.attempts < 1 or retry.budget_s < 0 or retry.backoff_s < 0 or retry.timeout_s <= 0:
            raise UsageError("GPUCLI_QDRANT_RETRIES must be >= 1, the _S settings >= 0 (TIMEOUT_S > 0)")
        return retry

    def pause(self, attempt: int) -> float:
        """Exponential backoff with jitter: between half and all of base * 2^(attempt-1)."""
        base = min(self.max_pause_s, self.backoff_s * 2 ** (attempt - 1))
        return base * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class Target:
    """A parsed `qdrant...` output: a server URL or an embedded storage path, plus a collection."""

    collection: str
    url: str = ""  # server mode: http(s)://host:port[/prefix]
    path: str = ""  # embedded mode: the storage directory
    text: bool = True
    batch: int = DEFAULT_BATCH
    query: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return bool(self.path)

    @property
    def display(self) -> str:
        """The output as shown to people: no secrets (the key never is in it)."""
        if self.local:
            return f"qdrant:{self.path}/{self.collection}"
        scheme = "qdrants" if self.url.startswith("https:") else "qdrant"
        return f"{scheme}://{self.url.split('://', 1)[1]}/{self.collection}"


def is_qdrant(target: str) -> bool:
    return target.lower().startswith(SCHEMES)


def parse_target(target: str) -> Target:
    """`qdrant://host:port/coll`, `qdrants://...` or `qdrant:PATH/coll` -> Target (UsageError if bad)."""
    lower = target.lower()
    if lower.startswith(("qdrant://", "qdrants://")):
        return _parse_server(target)
    if lower.startswith("qdrant:"):
        return _parse_local(target[len("qdrant:"):])
    raise UsageError(f"{target!r} is not a Qdrant output (qdrant://HOST:PORT/COLLECTION or qdrant:PATH/COLLECTION)")


def _parse_server(target: str) -> Target:
    parts = urlsplit(target)
    if "@" in parts.netloc:
        raise UsageError("a Qdrant URL must not carry credentials; put the API key in the environment variable "
                         f"{API_KEY_ENV}")
    options = _options(parts.query)
    scheme = "https" if parts.scheme.lower() == "qdrants" else "http"
    if not parts.hostname:
        raise UsageError("Qdrant URL needs a host: qdrant://HOST:PORT/COLLECTION")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise UsageError("Qdrant URL has a bad port: qdrant://HOST:PORT/COLLECTION") from None
    segments = [s for s in parts.path.split("/") if s]
    if not segments:
        raise UsageError("Qdrant URL names no collection: qdrant://HOST:PORT/COLLECTION")
    collection = _collection(segments[-1])
    prefix = "/" + "/".join(segments[:-1]) if len(segments) > 1 else ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Target(collection, url=f"{scheme}://{host}:{port}{prefix}", **options)


def _parse_local(rest: str) -> Target:
    path, _, query = rest.partition("?")
    options = _options(query)
    path = path.rstrip("/")
    storage, _, name = path.rpartition("/")
    if not storage or not name:
        raise UsageError("embedded Qdrant output needs a storage directory and a collection: qdrant:PATH/COLLECTION "
                         "(e.g. qdrant:./qdrant_data/docs)")
    return Target(_collection(name), path=storage, **options)


def _collection(name: str) -> str:
    if not NAME.match(name):
        raise UsageError(f"Qdrant collection name {name!r}: use letters, digits, '_', '-' and '.'")
    return name


def _options(query: str) -> dict[str, Any]:
    raw = dict(parse_qsl(query, keep_blank_values=True))
    secret = [k for k in raw if "key" in k.lower() or "token" in k.lower()]
    if secret:
        raise UsageError(f"the Qdrant API key is read only from the environment variable {API_KEY_ENV}, "
                         "never from the URL")
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in OPTIONS.items())
        raise UsageError(f"unknown Qdrant output option(s) {', '.join(unknown)}; known: {known}")
    options: dict[str, Any] = {"query": raw}
    if "text" in raw:
        value = raw["text"].strip().lower()
        if value not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise UsageError(f"Qdrant option text={raw['text']!r}: use true or false")
        options["text"] = value in ("1", "true", "yes", "on")
    if "batch" in raw:
        try:
            batch = int(raw["batch"])
        except ValueError:
            batch = -1
        if not BATCH_RANGE[0] <= batch <= BATCH_RANGE[1]:
            raise UsageError(f"Qdrant option batch={raw['batch']!r}: points per upsert must be "
                             f"{BATCH_RANGE[0]}-{BATCH_RANGE[1]}")
        options["batch"] = batch
    return options


# --- connecting and calling, with retries -----------------------------------------------------
class Connection:
    """A sync QdrantClient plus the retry policy; shared by the sink and `gpucli search`.

    Calls are made one at a time (the writer awaits each), possibly from different threads
    of asyncio's pool: hence `force_disable_check_same_thread` for the embedded SQLite.
    """

    def __init__(self, target: Target, retry: Retry | None = None) -> None:
        self.target = target
        self.retry = retry or Retry.from_env()
        self.client = self._connect()

    def _connect(self) -> Any:
        import warnings

        from qdrant_client import QdrantClient

        if self.target.local:
            try:
                return QdrantClient(path=self.target.path, force_disable_check_same_thread=True)
            except RuntimeError as exc:
                if "already accessed" in str(exc):
                    raise LockedError(f"{self.target.display}: the embedded Qdrant storage {self.target.path} is "
                                      "in use by another process or client (embedded mode allows one at a time; "
                                      "use a Qdrant server for concurrent access)") from None
                raise GpucliError(f"{self.target.display}: cannot open the embedded storage: {exc}") from None
        key = os.environ.get(API_KEY_ENV) or None
        with warnings.catch_warnings():
            if urlsplit(self.target.url).hostname in ("localhost", "127.0.0.1", "::1"):  # plain http is fine here
                warnings.filterwarnings("ignore", message="Api key is used with an insecure connection")
            return QdrantClient(url=self.target.url, api_key=key, timeout=max(1, round(self.retry.timeout_s)),
                                check_compatibility=False)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one client call; retry transient server faults; raise GpucliError when spent."""
        if self.target.local:
            try:
                return fn()
            except GpucliError:
                raise
            except Exception as exc:  # noqa: BLE001 - embedded errors are final; name the output
                raise GpucliError(f"{self.target.display}: {what} failed: {_describe(exc)}") from None
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - sorted below
                wait = _transient(exc)
                if wait is None:
                    raise _fatal(self.target, what, exc) from None
                pause = max(wait, self.retry.pause(attempt))
                spent = time.monotonic() - started
                if attempt >= self.retry.attempts or spent + pause > self.retry.budget_s:
                    state = "unreachable" if _network_error(getattr(exc, "source", exc)) else "kept failing"
                    raise GpucliError(f"Qdrant at {self.target.display} {state}: {what} failed {attempt} time(s) "
                                      f"over {spent:.1f}s, retries spent; last error: {_describe(exc)}") from None
                time.sleep(pause)

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing must not mask the run's own error
            pass


def _transient(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (0 if it did not) when worth retrying; None when final."""
    from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, ResourceExhaustedResponse):
        return float(min(exc.retry_after_s, 30))
    if isinstance(exc, UnexpectedResponse):
        code = exc.status_code or 0
        return 0.0 if code >= 500 or code in (408, 429) else None
    if isinstance(exc, ResponseHandlingException):
        return 0.0 if _network_error(exc.source) else None
    return 0.0 if _network_error(exc) else None


def _network_error(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


def _fatal(target: Target, what: str, exc: BaseException) -> GpucliError:
    from qdrant_client.http.exceptions import UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        hint = " (check QDRANT_API_KEY)" if exc.status_code in (401, 403) else ""
        return GpucliError(f"Qdrant at {target.display} refused {what}: HTTP {exc.status_code}: "
                           f"{server_message(exc)}{hint}")
    return GpucliError(f"Qdrant at {target.display}: {what} failed: {_describe(exc)}")


def server_message(exc: Any) -> str:
    """The server's own words from an error response (`status.error`), else its raw body."""
    content = getattr(exc, "content", b"") or b""
    try:
        body = json.loads(content)
        status = body.get("status") if isinstance(body, dict) else None
        if isinstance(status, dict) and status.get("error"):
            return str(status["error"])
    except (ValueError, TypeError):
        pass
    text = content.decode("utf-8", "replace").strip()
    return text[:300] if text else (getattr(exc, "reason_phrase", "") or "no message")


def _describe(exc: BaseException) -> str:
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return f"HTTP {exc.status_code}: {server_message(exc)}"
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- the sink ---------------------------------------------------------------------------------
class QdrantSink(Sink):
    name = "qdrant"
    help = ("qdrant://HOST:PORT/COLLECTION (server; qdrants:// for TLS; key from QDRANT_API_KEY) or "
            "qdrant:PATH/COLLECTION (embedded, small collections)")

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.parsed = parse_target(target)
        self.conn: Connection | None = None
        self.model = ""
        self.dims = 0
        self.metadata: dict[str, str] = {}
        self._other_model = ""
        self._db = None

    @classmethod
    def accepts(cls, target: str) -> bool:
        return is_qdrant(target)

    @property
    def display(self) -> str:
        return self.parsed.display

    @property
    def failures_path(self) -> str:
        name = f"{self.parsed.collection}.failures.jsonl"
        return str(Path(self.parsed.path) / name) if self.parsed.local else name

    @property
    def state_dir(self) -> Path:
        if self.parsed.local:
            return Path(self.parsed.path) / f"{self.parsed.collection}.gpucli"
        server = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.parsed.url.split("://", 1)[1]).strip("-")
        return Path(f"{self.parsed.collection}.gpucli") / server

    # --- open: check the collection before any work -------------------------------------------
    def open(self, schema, metadata: dict[str, str]) -> None:
        self.dims = _dims(schema, metadata)
        self.model = metadata.get("gpucli.model", "")
        self.metadata = {k: v for k, v in metadata.items() if k in ("gpucli.model", "gpucli.dims", "gpucli.version",
                                                                      "gpucli.task") + PROMPT_KEYS}
        self.conn = Connection(self.parsed)
        name = self.parsed.collection
        try:
            if self.conn.call("checking the collection", lambda: self.conn.client.collection_exists(name)):
                self._check_existing()
            else:
                self._create()
            self._db = group_commits(self.conn.client, name) if self.parsed.local else None
        except BaseException:
            self.close()  # the pipeline calls close only after a successful open; free the storage lock
            raise

    def _check_existing(self) -> None:
        name = self.parsed.collection
        info = self.conn.call("reading the collection", lambda: self.conn.client.get_collection(name))
        size, distance = vector_params(info, self.display)
        if size != self.dims:
            raise UsageError(f"{self.display} holds {size}-d vectors; model {self.model!r} makes {self.dims}-d ones. "
                             "Write to another collection, use the model the collection was made with, or delete "
                             "the collection")
        if distance != "Cosine":
            raise UsageError(f"{self.display} uses {distance} distance; gpucli writes to Cosine collections. "
                             "Write to another collection")
        stored = (getattr(info.config, "metadata", None) or {}).get("gpucli.model")
        # Another model of the same dims: refused at the first write unless `reset` emptied the
        # collection first (--full, or a new ledger), so vectors of two models never mix.
        self._other_model = stored if stored and self.model and stored != self.model else ""

    def _create(self) -> None:
        from qdrant_client import models

        name, client = self.parsed.collection, self.conn.client
        vectors = models.VectorParams(size=self.dims, distance=models.Distance.COSINE)
        try:
            self.conn.call("creating the collection",
                           lambda: client.create_collection(name, vectors_config=vectors, metadata=self.metadata))
        except GpucliError as exc:
            if "metadata" not in str(exc) and "unknown field" not in str(exc):
                raise
            # a server older than collection metadata (1.16): the points' `model` payload suffices
            self.conn.call("creating the collection", lambda: client.create_collection(name, vectors_config=vectors))
        if not self.parsed.local:  # a keyword index on path keeps the stale-chunk and prune deletes cheap
            self.conn.call("indexing path", lambda: client.create_payload_index(
                name, "path", models.PayloadSchemaType.KEYWORD, wait=True))

    # --- write: upsert, then drop chunks a shorter new version no longer has -------------------
    def write(self, table) -> str:
        from qdrant_client import models

        if self._other_model:
            raise UsageError(f"{self.display} holds vectors of model {self._other_model!r}, not {self.model!r}: "
                             f"mixing models makes search meaningless. Use --model {self._other_model}, another "
                             "collection, or --full to empty this one and rebuild it")
        ids, vectors, payloads = self._points(table)
        name = self.parsed.collection
        for start in range(0, len(ids), self.parsed.batch):
            end = start + self.parsed.batch
            batch = models.Batch(ids=ids[start:end], vectors=vectors[start:end], payloads=payloads[start:end])
            self.conn.call("upsert", lambda b=batch: self.conn.client.upsert(name, points=b, wait=True))
        self._remove_stale(chunk_counts(table))
        self._sync()
        return self.parsed.collection

    def _sync(self) -> None:
        """Embedded mode with group commits: make everything written so far durable."""
        if self._db is not None:
            busy = self._db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0]
            if busy:
                raise GpucliError(f"{self.display}: the embedded storage could not be synced (busy). This is a bug.")

    def _points(self, table) -> tuple[list[str], list[list[float]], list[dict[str, Any]]]:
        import numpy as np

        column = table.column("embedding").combine_chunks()
        vectors = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        vectors = vectors.reshape(len(table), self.dims).tolist()
        keep = [c for c in table.column_names if c != "embedding" and (self.parsed.text or c != "text")]
        rows = table.select(keep).to_pylist()
        for row in rows:
            row["model"] = self.model
        ids = [point_id(row["path"], row["chunk"]) for row in rows]
        return ids, vectors, rows

    def _remove_stale(self, counts: dict[str, int]) -> None:
        """Chunks of one file are always numbered 0..n-1 with no gaps (every write covers a file
        whole, in order), so a file has stale points exactly when chunk n exists: probe those ids
        (cheap everywhere), and filter-delete only for files that shrank."""
        from qdrant_client import models

        name = self.parsed.collection
        shrunk: list[str] = []
        probes = [(path, point_id(path, n)) for path, n in counts.items()]
        for start in range(0, len(probes), PROBE_IDS):
            group = probes[start:start + PROBE_IDS]
            found = self.conn.call("checking for stale chunks", lambda g=group: self.conn.client.retrieve(
                name, ids=[pid for _, pid in g], with_payload=False, with_vectors=False))
            present = {str(p.id) for p in found}
            shrunk.extend(path for path, pid in group if pid in present)
        for path in shrunk:
            selector = models.FilterSelector(filter=models.Filter(must=[
                models.FieldCondition(key="path", match=models.MatchValue(value=path)),
                models.FieldCondition(key="chunk", range=models.Range(gte=counts[path])),
            ]))
            self.conn.call("deleting stale chunks",
                           lambda s=selector: self.conn.client.delete(name, points_selector=s, wait=True))

    # --- incremental runs (state.py) ------------------------------------------------------------
    def reset(self) -> None:
        """Empty the collection, keeping its configuration (HNSW, quantization, indexes)."""
        from qdrant_client import models

        name, client = self.parsed.collection, self.conn.client
        everything = models.FilterSelector(filter=models.Filter())
        self.conn.call("emptying the collection", lambda: client.delete(name, points_selector=everything, wait=True))
        if self._other_model:
            self.conn.call("updating the collection", lambda: client.update_collection(name, metadata=self.metadata))
            self._other_model = ""
        self._sync()

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Delete every point of the given paths. A redone file is upserted in place under the
        same location and never listed here; a pruned one is. Idempotent."""
        from qdrant_client import models

        name, client = self.parsed.collection, self.conn.client
        paths = sorted(set().union(*stale.values())) if stale else []
        for start in range(0, len(paths), 256):
            group = paths[start:start + 256]
            selector = models.FilterSelector(filter=models.Filter(must=[
                models.FieldCondition(key="path", match=models.MatchAny(any=group))]))
            self.conn.call("deleting points of removed files",
                           lambda s=selector: client.delete(name, points_selector=s, wait=True))
        self._sync()

    def close(self) -> None:
        if self.conn is not None:
            self._db = None
            self.conn.close()
            self.conn = None


def group_commits(client: Any, collection: str) -> Any:
    """Embedded mode commits (and fsyncs) SQLite once per point: ~13 ms a point on this disk.
    Switch its storage to WAL with synchronous=NORMAL (commits no longer fsync, and the file
    stays safe from corruption on power loss), and let `_sync` checkpoint once per write:
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


def chunk_counts(table) -> dict[str, int]:
    """path -> number of chunks this write holds for it (max chunk + 1)."""
    counts: dict[str, int] = {}
    for path, chunk in zip(table.column("path").to_pylist(), table.column("chunk").to_pylist()):
        counts[path] = max(counts.get(path, 0), int(chunk) + 1)
    return counts


def vector_params(info: Any, display: str) -> tuple[int, str]:
    """(size, distance name) of a collection's single unnamed vector."""
    vectors = info.config.params.vectors
    if isinstance(vectors, dict) or vectors is None:
        names = ", ".join(vectors or {}) or "none"
        raise UsageError(f"{display} uses named vectors ({names}); gpucli writes one unnamed vector per point. "
                         "Write to another collection")
    distance = getattr(vectors.distance, "value", vectors.distance)
    return int(vectors.size), str(distance)


def _dims(schema, metadata: dict[str, str]) -> int:
    import pyarrow as pa

    index = schema.get_field_index("embedding")
    if index < 0 or not pa.types.is_fixed_size_list(schema.field(index).type) or schema.get_field_index("chunk") < 0:
        raise UsageError("a Qdrant output takes embeddings (rows with `chunk` and a fixed-size `embedding`); "
                         "use `gpucli embed`, or a Parquet/JSONL output for this task")
    size = schema.field(index).type.list_size
    declared = metadata.get("gpucli.dims")
    if declared and int(declared) != size:
        raise UsageError(f"the task declares {declared}-d vectors but its schema holds {size}-d ones. This is a bug.")
    return size
