"""A Parquet embed output, searched by brute force: its parts streamed in record batches with a
running top-k (memory bounded by one batch, whatever the dataset's size). The model, query prompt
and --dims are the `gpucli.*` keys of the parts' schema metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpucli.commands.search.hits import HIT_COLUMNS, Hit, TopK, fused
from gpucli.commands.search.parts import Parts
from gpucli.commands.search.stored import number, reading
from gpucli.core.errors import UsageError

BATCH_ROWS = 16_384  # rows scored at a time (a Parquet batch, or as many JSON lines)


class ParquetIndex:
    def __init__(self, where: str) -> None:
        self.display = where
        self.rows_scanned = 0
        path = Path(where)
        if not path.exists():
            raise UsageError(f"--in {where}: no such file or directory (give an embed output: DIR.parquet, "
                             "FILE.jsonl, qdrant://HOST:PORT/COLLECTION or qdrant:PATH/COLLECTION)")
        check_parquet(where, path)
        try:
            self.parts = Parts(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable input is the same usage error
            raise UsageError(f"--in {where}: not a Parquet output (a part cannot be read: "
                             f"{first_line(exc)})") from None
        schema = self.parts.schema
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        self.model = meta.get("gpucli.model", "")
        self.query_prompt = meta.get("gpucli.query_prompt")  # None: an output made before prompts were recorded
        self.truncate_dims = number(meta.get("gpucli.truncate_dims"))  # --dims: queries are cut alike
        self.columns = [c for c in HIT_COLUMNS if c in schema.names]
        self.sparse = "sparse" in schema.names  # --sparse bm25
        if not self.model or "embedding" not in schema.names or "path" not in schema.names:
            raise UsageError(f"--in {where}: not a gpucli embed output (no gpucli.model metadata or no "
                             "embedding column); make one with `gpucli embed DIR --out OUT.parquet`")
        self.reading = reading(where, meta, schema.field("embedding"))  # --vector-type
        self.dims = self.reading.dims

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        best = TopK(k)
        for batch in self._batches(self.columns + ["embedding"]):
            self.rows_scanned += batch.num_rows
            best.offer(self.reading.scores(self.reading.from_column(batch.column("embedding")), vector), batch)
        return best.hits()

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25 in two passes: the query terms' document frequencies, then every row's score."""
        from gpucli.tasks.text.sparse import DocumentFrequencies

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
        from gpucli.tasks.text.sparse import hybrid_depth

        return fused([self.nearest(vector, hybrid_depth(k)), self.lexical(terms, hybrid_depth(k))], k)

    def _batches(self, columns: list[str]) -> Iterator[Any]:
        """The parts' batches; a part that cannot be read (damaged since the scan began, or not
        Parquet) is a usage error naming the output, as one the opening found."""
        try:
            yield from self.parts.batches(columns, BATCH_ROWS)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise UsageError(f"--in {self.display}: not a Parquet output (a part cannot be read: "
                             f"{first_line(exc)})") from None

    def close(self) -> None:
        pass


def check_parquet(where: str, path: Path) -> None:
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


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
