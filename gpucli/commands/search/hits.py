"""What a search finds: `Hit`, the `SearchResult`, the running top-k of a scan, the fusion of
ranked lists, and the `Index` every kind of output offers (Parquet, JSON lines, Qdrant)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

HIT_COLUMNS = ("path", "chunk", "page", "text", "char_start", "char_end", "modality")  # what a hit shows


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


class Index(Protocol):
    """An open embed output, as a search sees it: what it was made with, and its three scorings."""

    display: str  # the output as the user named it (a Qdrant URL without its key)
    model: str  # the model that made it, which embeds the query
    query_prompt: str | None  # None: an output made before gpucli recorded it (the model's own then)
    truncate_dims: int  # --dims it was made with (0: all); the query is cut alike
    dims: int
    sparse: bool  # made with --sparse bm25
    rows_scanned: int | None

    def nearest(self, vector: Any, k: int) -> list[Hit]: ...

    def lexical(self, terms: Any, k: int) -> list[Hit]: ...

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]: ...

    def close(self) -> None: ...


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
        shown = batch.select([c for c in batch.schema.names if c in HIT_COLUMNS])  # never `mtime`: an older
        # output's timestamp[ns] would need pandas in to_pylist
        rows = [shown.slice(i, 1).to_pylist()[0] for i in picked]  # not take(): it imports pandas (~0.2 s)
        for i, row in zip(picked, rows):
            self.best.append(Hit(float(scores[i]), row["path"], int(row.get("chunk") or 0), row.get("text") or "",
                                 row.get("char_start"), row.get("char_end"), row.get("page"), row.get("modality")))
        self.best.sort(key=lambda h: (-h.score, h.path, h.chunk))
        del self.best[self.k:]

    def hits(self) -> list[Hit]:
        return list(self.best)


def fused(lists: list[list[Hit]], k: int) -> list[Hit]:
    """Reciprocal rank fusion of ranked hit lists (dense, sparse): each hit's score its fused one."""
    from gpucli.tasks.text.sparse import fuse

    return [Hit(score, **{key: value for key, value in asdict(hit).items() if key != "score"})
            for score, hit in fuse(lists, k, key=lambda hit: (hit.path, hit.chunk))]
