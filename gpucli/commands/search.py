"""`gpucli search`: the chunks of an embed output nearest to a query, by cosine similarity.

The query is embedded in-process by the same code the workers run (`EmbedTask.prepare` +
`predict`), with the model the output names: Parquet file metadata `gpucli.model`, or the
Qdrant collection's metadata (falling back to the `model` payload of its points). The query gets
the query prompt the output's metadata names (`gpucli.query_prompt`, written by `gpucli embed`),
or, for an output made before gpucli wrote it, the model's own query prompt; pooling follows the
model's modules as for documents (`gpucli.tasks._st_modules`).
A Parquet dataset is scanned in record batches with a running top-k (memory bounded by
one batch, whatever the dataset's size); a Qdrant collection is asked with `query_points`.

`--mode sparse` and `--mode hybrid` (an output made with `--sparse bm25`, issue 30) score BM25 over
the rows' sparse vectors (tasks/_sparse.py): the query's distinct terms, cut by the output's
model's tokenizer, each weighing 1. Over Parquet and JSON lines two passes: the document
frequency of the query's terms (memory: one counter per query term), then the scores; Qdrant
applies its IDF modifier itself. Hybrid fuses the dense and the sparse top lists by reciprocal
rank fusion, score = sum 1 / (60 + rank), in Qdrant by `query_points` with both prefetched.

Its size (over 400 lines): the three output kinds (Parquet, JSON lines, Qdrant) each need an
index that reads them, and the rendering fits the terminal; the query's model is the task's own.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpucli.core.errors import GpucliError, InputError, RunFailedError, UsageError
from gpucli.core.terminal import cut, fit, width_of
from gpucli.output.sinks.qdrant import SPARSE_VECTOR, Connection, is_qdrant, parse_target, vector_params

BATCH_ROWS = 16_384
HIT_COLUMNS = ("path", "chunk", "page", "text", "char_start", "char_end", "modality")  # what a hit shows
SNIPPET_CHARS = 100


@dataclass
class Hit:
    score: float
    path: str
    chunk: int
    text: str = ""
    char_start: int | None = None
    char_end: int | None = None
    page: int | None = None  # the PDF page or slide, from 1; None where the format has none
    modality: str | None = None  # "image" or "text" in an output of an image-text model; None otherwise

    def to_dict(self, rank: int) -> dict[str, Any]:
        row = {"rank": rank, **asdict(self), "score": round(self.score, 6)}
        if self.modality is None:  # an output of a text model: its hits have no modality
            del row["modality"]
        return row

    @property
    def shown(self) -> str:
        """The hit's text, or what stands for an image."""
        return "(image)" if self.modality == "image" else self.text


@dataclass
class SearchResult:
    source: str
    model: str
    hits: list[Hit]
    rows_scanned: int | None  # None for Qdrant (the server searches)
    embed_s: float
    search_s: float


MODES = ("dense", "sparse", "hybrid")  # --mode (issue 30)


def search(where: str, query: str, k: int = 10, image: str = "", mode: str = "dense") -> SearchResult:
    """Open the output, embed the query with its model (the words of `query`, or the image file
    `image` for an output of an image-text model), and return the k nearest chunks. A server
    that stays unreachable is the search's failure (exit 1, `search --help`), not a run's (the
    sinks' RunFailedError, exit 3)."""
    try:
        return _search(where, query, k, image, mode)
    except RunFailedError as exc:
        raise GpucliError(str(exc)) from None


def _search(where: str, query: str, k: int, image: str = "", mode: str = "dense") -> SearchResult:
    if k < 1:
        raise UsageError("-k must be at least 1")
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}")
    if mode != "dense" and image:
        raise UsageError(f"--mode {mode} matches words; search by --image is dense only")
    if image and query.strip():
        raise UsageError("give a QUERY in words or --image FILE, not both")
    if not image and not query.strip():
        raise UsageError("the query is empty; give some words to look for (or --image FILE)")
    data = _image_bytes(image) if image else b""
    index = open_index(where)
    try:
        if mode != "dense" and not index.sparse:
            raise UsageError(f"--mode {mode}: {index.display} holds no sparse vectors (it was made without "
                             "--sparse bm25); search it with --mode dense, or embed again with --sparse bm25 --full")
        t0 = time.perf_counter()
        cut = {"dims": index.truncate_dims} if index.truncate_dims else {}  # --dims (issue 30)
        vector = None if mode == "sparse" else (embed_image_query(index.model, data, image, **cut) if image
                                                else embed_query(index.model, query, index.query_prompt, **cut))
        terms = None if mode == "dense" else query_terms(index.model, query)  # --mode sparse, hybrid
        if vector is not None and vector.shape[0] != index.dims:
            raise UsageError(f"--in {index.display}: model {index.model!r} now makes {vector.shape[0]}-d vectors, "
                             f"but the output holds {index.dims}-d ones")
        t1 = time.perf_counter()
        hits = _hits(index, mode, vector, terms, k)
        t2 = time.perf_counter()
    finally:
        index.close()
    return SearchResult(index.display, index.model, hits, index.rows_scanned, t1 - t0, t2 - t1)


def _hits(index: Any, mode: str, vector: Any, terms: Any, k: int) -> list[Hit]:
    if mode == "sparse":
        return index.lexical(terms, k)
    if mode == "hybrid":
        return index.hybrid(vector, terms, k)
    return index.nearest(vector, k)


def open_index(where: str) -> ParquetIndex | JsonlIndex | QdrantIndex:
    if is_qdrant(where):
        return QdrantIndex(where)
    if where.lower().endswith(".jsonl") and Path(where).is_file():
        return JsonlIndex(where)
    return ParquetIndex(where)


# --- the query --------------------------------------------------------------------------------
def embed_query(model: str, query: str, prompt: str | None = None, dims: int = 0) -> Any:
    """One unit vector for the query (see `embed_queries`)."""
    return embed_queries(model, [query], prompt, **({"dims": dims} if dims else {}))[0]


def embed_queries(model: str, queries: list[str], prompt: str | None = None, dims: int = 0) -> list[Any]:
    """Unit vectors from the code the workers run, the model loaded once. A query longer than
    the model's window is cut into chunks as a document would be, and their vectors averaged.
    `prompt`: the query prompt the output recorded; None = the model's own query prompt. `dims`: the
    output's --dims (0: all), which cuts the query's vector as it cut the rows'."""
    import numpy as np


    task = _query_task(model, dims)
    task.setup("cpu")
    if hasattr(task, "query_text"):  # an image-text model: its text tower (tasks/_image_text.py)
        try:
            return [np.asarray(task.query_text(query), dtype=np.float32) for query in queries]
        except InputError as exc:
            raise UsageError(f"the query cannot be embedded: {exc}") from None
    task.use_prompt(task.prompts.query if prompt is None else prompt)  # after setup, which sets the document's
    vectors = []
    for query in queries:
        block = query_block(task, query, "embedded")
        vector = np.asarray(task.predict(block.payload), dtype=np.float32).mean(axis=0)
        vectors.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
    return vectors


def query_block(task: Any, query: str, what: str) -> Any:
    """The query cut as the task cuts a document (its windows' block); a query the task refuses
    (no tokens, unknown to the model) is a usage error saying so."""
    from gpucli.core.records import Source

    try:
        block, failures = task.prepare_many([Source(0, "<query>", "<query>")], [query.encode("utf-8")])
        if failures:
            raise InputError(failures[0].stage, failures[0].error)
    except InputError as exc:
        raise UsageError(f"the query cannot be {what}: {exc}") from None
    return block


def _query_task(model: str, dims: int = 0) -> Any:
    """embed's task for `model`, loaded in this process: its image-text variant for CLIP or SigLIP
    (whose text tower embeds words into the images' space), else the text task."""
    from gpucli.tasks import TaskSpec
    from gpucli.tasks.embed import EmbedTask

    spec = TaskSpec("embed", model, {"dims": dims, "force_dims": True} if dims else {})
    task = EmbedTask.variant(spec)(spec)
    task.open()
    return task


def query_terms(model: str, query: str) -> Any:
    """The query's distinct BM25 terms (tasks/_sparse.py), ascending: its token ids as the output's
    model cut its documents, less special and punctuation tokens. Loads the tokenizer, not the model."""
    from gpucli.tasks._sparse import Terms

    task = _query_task(model)
    block = query_block(task, query, "matched")
    terms = Terms(task.tokenizer).query(block.payload.values)
    if not len(terms):
        raise UsageError("the query has no words to match (only punctuation); give some words to look for")
    return terms


def fused(lists: list[list[Hit]], k: int) -> list[Hit]:
    """Reciprocal rank fusion of ranked hit lists (dense, sparse): each hit's score its fused one."""
    from gpucli.tasks._sparse import fuse

    return [Hit(score, **{key: value for key, value in asdict(hit).items() if key != "score"})
            for score, hit in fuse(lists, k, key=lambda hit: (hit.path, hit.chunk))]


def embed_image_query(model: str, data: bytes, name: str = "<image>", dims: int = 0) -> Any:
    """The unit vector of one image, by the image tower of the output's image-text model."""
    import numpy as np

    task = _query_task(model, dims)
    if not hasattr(task, "query_image"):
        raise UsageError(f"--image: the output was made with {model!r}, a text model with no image tower; search "
                         "by image needs an output made with an image-text model (CLIP, SigLIP: `gpucli embed DIR "
                         "--model openai/clip-vit-base-patch32`)")
    task.setup("cpu")
    try:
        vector = np.asarray(task.query_image(data), dtype=np.float32)
    except InputError as exc:
        raise UsageError(f"--image {name}: {exc}") from None
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _image_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--image {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None


# --- Parquet: streamed brute force ------------------------------------------------------------
class ParquetIndex:
    def __init__(self, where: str) -> None:
        import pyarrow.dataset as ds

        self.display = where
        self.rows_scanned = 0
        path = Path(where)
        if not path.exists():
            raise UsageError(f"--in {where}: no such file or directory (give an embed output: DIR.parquet, "
                             "FILE.jsonl, qdrant://HOST:PORT/COLLECTION or qdrant:PATH/COLLECTION)")
        _check_parquet(where, path)
        try:
            self.dataset = ds.dataset(str(path), format="parquet")
            schema = self.dataset.schema
        except Exception as exc:  # noqa: BLE001 - any unreadable input is the same usage error
            raise UsageError(f"--in {where}: not a Parquet output (a part cannot be read: "
                             f"{_first_line(exc)})") from None
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        self.model = meta.get("gpucli.model", "")
        self.query_prompt = meta.get("gpucli.query_prompt")  # None: an output made before prompts were recorded
        self.truncate_dims = _int(meta.get("gpucli.truncate_dims"))  # --dims (issue 30): queries are cut alike
        self.columns = [c for c in HIT_COLUMNS if c in schema.names]
        self.sparse = "sparse" in schema.names  # --sparse bm25 (issue 30)
        if not self.model or "embedding" not in schema.names or "path" not in schema.names:
            raise UsageError(f"--in {where}: not a gpucli embed output (no gpucli.model metadata or no "
                             "embedding column); make one with `gpucli embed DIR --out OUT.parquet`")
        self.reading = _reading(where, meta, schema.field("embedding"))  # --vector-type (issue 30)
        self.dims = self.reading.dims

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        best = TopK(k)
        for batch in self.dataset.to_batches(columns=self.columns + ["embedding"], batch_size=BATCH_ROWS,
                                             batch_readahead=2, fragment_readahead=1):
            self.rows_scanned += batch.num_rows
            best.offer(self.reading.scores(self.reading.from_column(batch.column("embedding")), vector), batch)
        return best.hits()

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25 in two passes: the query terms' document frequencies, then every row's score."""
        from gpucli.tasks._sparse import DocumentFrequencies

        frequencies, rows = DocumentFrequencies(terms), 0
        for batch in self._batches(["sparse"]):
            rows += batch.num_rows
            frequencies.count(batch.column("sparse"))
        scorer, best = frequencies.scorer(), TopK(k)
        for batch in self._batches(self.columns + ["sparse"]):
            best.offer(scorer.scores(batch.column("sparse")), batch)
        self.rows_scanned = max(self.rows_scanned, rows)  # hybrid reads the rows for both lists
        return best.hits()

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        from gpucli.tasks._sparse import hybrid_depth

        return fused([self.nearest(vector, hybrid_depth(k)), self.lexical(terms, hybrid_depth(k))], k)

    def _batches(self, columns: list[str]) -> Any:
        return self.dataset.to_batches(columns=columns, batch_size=BATCH_ROWS, batch_readahead=2,
                                       fragment_readahead=1)

    def close(self) -> None:
        pass


def _check_parquet(where: str, path: Path) -> None:
    """Say what `path` is when it is no Parquet output, in words (not pyarrow's "Parquet magic
    bytes not found"): a dataset directory with no complete part yet, an empty one, or a file
    that is not Parquet."""
    if path.is_file():
        with open(path, "rb") as f:
            if f.read(4) != b"PAR1":
                raise UsageError(f"--in {where}: not a Parquet output (the file is not Parquet; a JSON lines output "
                                 "is searched when its name ends in .jsonl)")
        return
    names = [p.name for p in path.iterdir()]
    if any(n.endswith(".parquet") and not n.startswith((".", "_")) for n in names):
        return
    if any(n.endswith(".inprogress") for n in names) or _has_state(where):
        raise UsageError(f"--in {where}: no complete part yet (a run is writing this output, or stopped before its "
                         "first part); search it once a part is written: `gpucli inspect` shows how far it is")
    raise UsageError(f"--in {where}: not a gpucli embed output (an empty directory); make one with "
                     "`gpucli embed DIR --out OUT.parquet`")


def _has_state(where: str) -> bool:
    """Whether a run made this output: its state directory, beside it or where an earlier
    gpucli kept it (inside it, `_gpucli/`), exists."""
    from gpucli.output.sinks import open_sink

    try:
        sink = open_sink(where)
    except UsageError:  # not named as gpucli names outputs
        return False
    return any(directory.is_dir() for directory in (sink.state_dir, *sink.earlier_state_dirs()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --- JSON lines: streamed brute force, the model from the ledger ---------------------------------
class JsonlIndex:
    """A JSON lines embed output, read BATCH_ROWS lines at a time. JSON lines has no file
    metadata: the model, dims and query prompt are those the ledger beside it recorded."""

    def __init__(self, where: str) -> None:
        self.display = where
        self.rows_scanned = 0
        info = _ledger_info(where)
        self.model = info.get("gpucli.model", "")
        self.query_prompt = info.get("gpucli.query_prompt")
        self.truncate_dims = _int(info.get("gpucli.truncate_dims"))
        if not self.model:
            raise UsageError(f"--in {where}: not a gpucli embed output (no ledger beside it names its model); make "
                             "one with `gpucli embed DIR --out OUT.jsonl`")
        self.dims = int(info["gpucli.dims"]) if info.get("gpucli.dims", "").isdigit() else self._first_dims()
        self.reading = _reading(where, {**info, "gpucli.dims": str(self.dims)})  # --vector-type (issue 30)
        self.sparse = "gpucli.sparse" in info  # --sparse bm25 (issue 30)

    def _first_dims(self) -> int:
        with open(self.display, "rb") as f:
            row = _json_row(f.readline()) or {}
        return len(row.get("embedding") or [])

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        best = TopK(k)
        for rows, matrix in self._batches():
            self.rows_scanned += len(rows)
            best.offer(self.reading.scores(self.reading.matrix(matrix), vector), _record_batch(rows))
        return best.hits()

    def _batches(self) -> Any:
        """(rows without their vectors, float32 matrix) per BATCH_ROWS lines; a torn last line
        (a run killed mid-write, before the ledger took the line) is left out."""
        import numpy as np

        rows, vectors = [], []
        with open(self.display, "rb") as f:
            for line in f:
                row = _json_row(line)
                if row is None or not isinstance(row.get("embedding"), list):
                    continue
                vectors.append(row.pop("embedding"))
                rows.append(row)
                if len(rows) >= BATCH_ROWS:
                    yield rows, np.asarray(vectors, dtype=np.float32)
                    rows, vectors = [], []
        if rows:
            yield rows, np.asarray(vectors, dtype=np.float32)

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25 in two passes over the file, as over Parquet."""
        from gpucli.tasks._sparse import DocumentFrequencies

        frequencies, rows = DocumentFrequencies(terms), 0
        for _, sparse in self._sparse_batches():
            rows += len(sparse)
            frequencies.count(sparse)
        scorer, best = frequencies.scorer(), TopK(k)
        for batch, sparse in self._sparse_batches():
            best.offer(scorer.scores(sparse), batch)
        self.rows_scanned = max(self.rows_scanned, rows)
        return best.hits()

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        from gpucli.tasks._sparse import hybrid_depth

        return fused([self.nearest(vector, hybrid_depth(k)), self.lexical(terms, hybrid_depth(k))], k)

    def _sparse_batches(self) -> Any:
        """(hit columns, sparse column) per BATCH_ROWS lines, as `_batches` reads them."""
        import pyarrow as pa

        from gpucli.tasks._sparse import arrow_type

        rows: list[dict] = []
        with open(self.display, "rb") as f:
            for line in f:
                row = _json_row(line)
                if row is not None and isinstance(row.get("embedding"), list):
                    rows.append(row)
                if len(rows) >= BATCH_ROWS:
                    yield _record_batch(rows), pa.array([row.get("sparse") for row in rows], arrow_type())
                    rows = []
        if rows:
            yield _record_batch(rows), pa.array([row.get("sparse") for row in rows], arrow_type())

    def close(self) -> None:
        pass


def _json_row(line: bytes) -> dict | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _record_batch(rows: list[dict]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pylist([{key: row.get(key) for key in HIT_COLUMNS} for row in rows])


def _ledger_info(where: str) -> dict[str, str]:
    """The `info` a run stored with its settings in the output's ledger ({} without one)."""
    try:
        settings = json.loads(_ledger_meta(where, "settings") or "{}")
    except ValueError:
        settings = {}
    info = settings.get("info") if isinstance(settings, dict) else None
    return {str(k): str(v) for k, v in info.items()} if isinstance(info, dict) else {}


def _ledger_meta(where: str, key: str) -> str | None:
    """One meta entry of the output's ledger (None without it, or without a ledger)."""
    from gpucli.core.errors import OutputError
    from gpucli.output.ledger_view import ReadOnlyLedger
    from gpucli.output.sinks import open_sink
    from gpucli.output.state_dir import LEDGER, ledger_dir

    try:
        ledger = ReadOnlyLedger(ledger_dir(open_sink(where)) / LEDGER, check=False)
    except OutputError as exc:
        raise UsageError(f"--in {where}: its ledger {exc}") from None
    try:
        return ledger.meta(key)
    finally:
        ledger.close()


def _reading(where: str, meta: dict[str, str], field: Any = None) -> Any:
    """How the output's vectors read back (--vector-type, gpucli/core/vectors.py): float16 and int8 as
    float32, binary as packed bits; int8's calibration from the `embedding` field's metadata, else
    from the ledger (all a JSON lines output has)."""
    from gpucli.core.vectors import INT8_KEY, LEDGER_KEY, TYPE_KEY, Reading

    in_field = field is not None and INT8_KEY.encode() in (field.metadata or {})
    int8 = _ledger_meta(where, LEDGER_KEY) if meta.get(TYPE_KEY) == "int8" and not in_field else None
    try:
        return Reading.of(meta, field, int8)
    except ValueError as exc:
        raise UsageError(f"--in {where}: {exc}") from None


class TopK:
    """The k best rows seen so far; each batch contributes its own best k (argpartition)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.best: list[Hit] = []

    def offer(self, scores: Any, batch: Any) -> None:
        import numpy as np

        if len(scores) > self.k:
            picked = np.argpartition(-scores, self.k - 1)[: self.k]
        else:
            picked = np.arange(len(scores))
        floor = self.best[-1].score if len(self.best) >= self.k else -np.inf
        picked = [int(i) for i in picked if scores[i] > floor]
        if not picked:
            return
        shown = [c for c in batch.schema.names if c not in ("embedding", "sparse")]
        rows = batch.select(shown).take(picked).to_pylist()
        for i, row in zip(picked, rows):
            self.best.append(Hit(float(scores[i]), row["path"], int(row.get("chunk") or 0), row.get("text") or "",
                                 row.get("char_start"), row.get("char_end"), row.get("page"), row.get("modality")))
        self.best.sort(key=lambda h: (-h.score, h.path, h.chunk))
        del self.best[self.k:]

    def hits(self) -> list[Hit]:
        return list(self.best)


# --- Qdrant -----------------------------------------------------------------------------------
class QdrantIndex:
    def __init__(self, where: str) -> None:
        self.target = parse_target(where)
        self.display = self.target.display
        self.rows_scanned = None
        self.conn = Connection(self.target)
        try:
            self._describe()
        except BaseException:
            self.conn.close()
            raise

    def _describe(self) -> None:
        client, name = self.conn.client, self.target.collection
        if not self.conn.call("checking the collection", lambda: client.collection_exists(name)):
            raise UsageError(f"--in {self.display}: no such collection")
        info = self.conn.call("reading the collection", lambda: client.get_collection(name))
        self.dims, _ = vector_params(info, self.display)
        self.sparse = SPARSE_VECTOR in (info.config.params.sparse_vectors or {})  # --sparse bm25 (issue 30)
        metadata = getattr(info.config, "metadata", None) or {}
        self.model = metadata.get("gpucli.model", "")
        self.query_prompt = metadata.get("gpucli.query_prompt")  # None: not recorded (older output)
        self.truncate_dims = _int(metadata.get("gpucli.truncate_dims"))
        from gpucli.output.sinks.qdrant.vector_types import search_params

        # int8, binary (issue 30): Qdrant rescores; embedded mode searches exactly (and warns of the parameter)
        self.search_params = None if self.target.local else search_params(metadata.get("gpucli.vector_type", ""))
        if not self.model:  # a collection made by hand or by an older server: ask a point
            points, _ = self.conn.call("reading a point", lambda: client.scroll(name, limit=1, with_payload=["model"]))
            self.model = (points[0].payload or {}).get("model", "") if points else ""
        if not self.model:
            raise UsageError(f"--in {self.display}: not a gpucli embed output (no model in its metadata or "
                             "payloads)" + ("; the collection is empty" if info.points_count == 0 else ""))

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        client, name = self.conn.client, self.target.collection
        response = self.conn.call("searching", lambda: client.query_points(
            name, query=vector.tolist(), limit=k, with_payload=True, search_params=self.search_params))
        return _qdrant_hits(response)

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25: the collection's sparse vectors against the query's terms, with Qdrant's IDF modifier."""
        client, name = self.conn.client, self.target.collection
        response = self.conn.call("searching", lambda: client.query_points(
            name, query=_sparse_query(terms), using=SPARSE_VECTOR, limit=k, with_payload=True))
        return _qdrant_hits(response)

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        """Both lists prefetched and fused by Qdrant (RRF with its k = 61: Qdrant's rank counts from
        0, so its 1 / (k + rank0) is gpucli's 1 / (60 + rank)). A server that refuses a parametrised
        RRF (an older version) gets the two queries and gpucli's own fusion."""
        from qdrant_client import models

        from gpucli.tasks._sparse import RRF_K, hybrid_depth

        client, name, depth = self.conn.client, self.target.collection, hybrid_depth(k)
        prefetch = [models.Prefetch(query=vector.tolist(), limit=depth),
                    models.Prefetch(query=_sparse_query(terms), using=SPARSE_VECTOR, limit=depth)]
        try:
            response = self.conn.call("searching", lambda: client.query_points(
                name, prefetch=prefetch, query=models.RrfQuery(rrf=models.Rrf(k=RRF_K + 1)), limit=k,
                with_payload=True))
        except RunFailedError:
            raise
        except GpucliError:
            if self.target.local:
                raise
            return fused([self.nearest(vector, depth), self.lexical(terms, depth)], k)
        return _qdrant_hits(response)

    def close(self) -> None:
        self.conn.close()


def _qdrant_hits(response: Any) -> list[Hit]:
    hits = []
    for point in response.points:
        p = point.payload or {}
        hits.append(Hit(float(point.score), str(p.get("path", "")), int(p.get("chunk") or 0),
                        str(p.get("text") or ""), p.get("char_start"), p.get("char_end"), p.get("page"),
                        p.get("modality")))
    return hits


def _sparse_query(terms: Any) -> Any:
    """The query's terms as Qdrant's sparse vector, each weighing 1 (as fastembed's BM25 queries)."""
    from qdrant_client import models

    return models.SparseVector(indices=[int(t) for t in terms], values=[1.0] * len(terms))


# --- printing ---------------------------------------------------------------------------------
def render(result: SearchResult, as_json: bool, console: Any = None) -> None:
    """Hits on stdout (a table on a terminal or the `console` given, tab-separated lines
    otherwise, JSON lines with --json); one line about the search on stderr."""
    if as_json:
        for rank, hit in enumerate(result.hits, 1):
            print(json.dumps(hit.to_dict(rank), ensure_ascii=False))
    elif console is not None or sys.stdout.isatty():
        _table(result, console)
    else:
        for hit in result.hits:
            page = "" if hit.page is None else hit.page
            print(f"{hit.score:.4f}\t{hit.path}\t{hit.chunk}\t{page}\t{snippet(hit.shown)}")
    scanned = f"{result.rows_scanned} rows scanned, " if result.rows_scanned is not None else ""
    print(fit(f"gpucli search: {len(result.hits)} hits from {result.source} (model {result.model}; {scanned}"
              f"query embedded in {result.embed_s:.2f}s, searched in {result.search_s:.3f}s)", width_of(sys.stderr)),
          file=sys.stderr)


def _table(result: SearchResult, console: Any = None) -> None:
    """Two lines a hit, fitted to the console's width: the rank, the score and where (path,
    chunk, page; a long path folds), then the snippet cut on a word boundary. Paths and chunk
    text are user data: Text, never markup (a chunk holding `[/usr/local]` is not a closing tag,
    a file named `notes [draft].txt` keeps its brackets)."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    width = max(console.width, 40)
    console.print(Text(f"{'#':>3}  {'score':<6}  path (chunk, page) / snippet", style="bold"), soft_wrap=True)
    for rank, hit in enumerate(result.hits, 1):
        where = f"{hit.path}  (chunk {hit.chunk}" + (f", page {hit.page}" if hit.page is not None else "") + ")"
        console.print(Text(_folded(f"{rank:>3}. {hit.score:.4f}  ", where, width)), soft_wrap=True)
        console.print(Text("     " + cut(hit.shown, width - 5), style="dim"), soft_wrap=True)


def _folded(prefix: str, text: str, width: int) -> str:
    """`prefix` + `text`, the text folded under itself where it passes `width` (a path has no
    word boundary to wrap on; moving it whole to the next line would not make it fit)."""
    room = max(width - len(prefix), 10)
    pieces = [text[i: i + room] for i in range(0, len(text), room)] or [""]
    return "\n".join([prefix + pieces[0], *(" " * len(prefix) + piece for piece in pieces[1:])])


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """The text on one line, cut after a whole word (tab-separated output: a fixed length)."""
    return cut(text, limit)
