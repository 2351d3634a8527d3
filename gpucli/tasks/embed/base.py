"""What every model of `gpucli embed` shares, the text encoders' (embed.py) and the image-text
models' (_image_text.py): the command's name, help, options and inputs (texts and documents,
read as inputs/documents/reading.py reads them), their windows of token ids, and how vectors are stored
(`--vector-type`). Each model's task sets, in `open`, what the windows need: `documents`,
`tokens` (tasks/text/tokens.py), `window`, the special tokens and prompt ids that frame a window,
`unknown` (tasks/text/unknown.py) and `terms` (--sparse).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gpucli.core.records import UNKNOWN_TOKENS, Failure, Items, Source
from gpucli.core.stages import Stage
from gpucli.core.vectors import Stored
from gpucli.inputs.extract import format_for
from gpucli.inputs.extract import suffixes as document_suffixes
from gpucli.tasks.base import ModelEntry, Task
from gpucli.tasks.embed.dims import checked_dims
from gpucli.tasks.embed.models import catalogue
from gpucli.tasks.embed.options import EmbedOptions
from gpucli.tasks.text.chunking import WindowBlock, multi_page

DOCUMENT_WEIGHT = 32  # files a document counts as in a read chunk (EmbedBase.read_weight)


class EmbedBase(Task):
    """`gpucli embed` whatever its model: subclassed by EmbedTask and ImageTextTask."""

    name = "embed"
    help = ("Embed text files and documents (PDF, DOCX, PPTX, ODT, EPUB, HTML, RTF, notebooks, e-mail) into "
            "vectors, one row per chunk (with its page), and write Parquet, JSONL or Qdrant.")
    examples = """\
  gpucli embed ./docs                              # -> embed.parquet/ with the default model
  gpucli embed ./docs --out vectors.jsonl --json   # JSON lines, summary as JSON on stdout
  gpucli embed ./docs --model BAAI/bge-small-en-v1.5 --devices cuda:0,1
  gpucli embed a.txt b.md --include '*.md' --chunk-tokens 128
  gpucli embed ./papers --include '*.pdf' --extract-timeout 300   # PDFs only, slow ones allowed 5 min
  gpucli embed ./docs --dry-run | grep '"format": "pdf"'           # what each input would be read as
  gpucli embed ./notes --out notes.parquet --prune --watch        # then stay up: changes as they come
  gpucli embed --from posts.parquet --text-column body --id-column id   # one input per row"""
    # plain text, then every document format gpucli/inputs/extract/ reads (PDF, DOCX, PPTX, ODT, ODP, EPUB, HTML, XML,
    # RTF, notebooks, e-mail)
    suffixes = tuple(dict.fromkeys((".txt", ".md", ".markdown", ".rst", ".text", ".csv", ".tsv", ".json", ".jsonl",
                                    ".tex", ".log", ".py", ".org", ".adoc") + document_suffixes()))
    Options = EmbedOptions
    reads_extensionless = True  # README, AUTHORS, ChangeLog: read when their content is text (inputs/walk.py)
    reads_tables = True  # --from TABLE: texts from a table's rows (gpucli/inputs/tables.py)
    default_model = "minilm"
    shown_settings = ("dims", "full_dims", "vector_type", "sparse", "modality", "model_type", "pooling", "normalize",
                      "prompt", "prompt_name", "query_prompt", "query_prompt_name", "max_tokens", "runtime", "quantize")
    cost_name = "tokens"
    default_batch_size = 64
    default_max_cost = 64 * 256
    # On 2 CPU cores (benchmarks/README.md, embed) 256-token texts run best ~8 a batch (10-20%
    # faster than 32): a budget of 2048 tokens does that. One-sentence texts ran as fast at 32
    # and 64 a batch (sentence-transformers' sweeps: 282/331 against 294/337 docs/s); 64 halves
    # the batches each input costs the parent and the worker (on 100k one-sentence files with a
    # near-free model, ~0.4 ms of CPU a batch), and the budget still keeps long texts at ~8.
    cpu_batch_size = 64
    cpu_max_cost = 2048
    # A reader holds a text, its token ids and offsets and its chunks' texts at once: ~10-15 MB per
    # MB of text since tokenizing in slices (benchmarks: ~170 MB per MB in one `encode`).
    max_file_mb = 64.0
    # Texts are small once tokenized, and each reader call costs the parent a hand-over (a
    # thread wake-up, pickling both ways): 256 one-sentence files a call took 1.9 s less of the
    # parent's CPU per 100k files than 64 (reader.CHUNK_BYTES still bounds a chunk of big files).
    read_chunk_files = 256

    @classmethod
    def read_as(cls, path: str) -> str:
        """A document format's name ("pdf", "docx", "html"...: gpucli/inputs/extract/), else "text"."""
        fmt = format_for(path)
        return fmt.name if fmt is not None else "text"

    def read_weight(self, path: str) -> int:
        """A document counts as DOCUMENT_WEIGHT files in a read chunk (8 a chunk, against 256
        one-sentence texts): extraction is most of a chunk's time, and a tree of PDFs read 40 to a
        chunk kept one reader and one extraction child busy while the others waited."""
        return DOCUMENT_WEIGHT if format_for(path) is not None else 1

    scripts: Any = None  # the scripts the model reads (tasks/text/scripts.py), when a task's open sets them
    terms: Any = None  # --sparse bm25's term weights (tasks/text/sparse.py), when a task's open sets them
    _in_worker = False  # set by setup: the worker takes the model the parent resolved, from the cache

    @classmethod
    def models(cls) -> list[ModelEntry]:
        return catalogue()

    def prepare_many(self, sources: list[Source], datas: list[bytes]) -> tuple[Items | None, list[Failure]]:
        """Decode or extract a chunk of files (gpucli/inputs/documents/reading.py), tokenize them in one
        `encode_batch` (it releases the GIL and uses the cores), refuse the texts the model cannot
        read (`_unknown.py`), and cut token windows at the text's boundaries (`_chunking.py`) into
        one block: the ids of every window as one flat array (`Ragged`; overlapping windows share a
        document's ids), the row columns as arrays. No per-token Python for a text the model reads;
        a loop per document and per window only."""
        docs, failures = self.documents.read(sources, datas)
        cut = WindowBlock(self.window, self.options.chunk_overlap)
        tokens = self.tokens.tokenize([doc.text for _, doc in docs], whole=multi_page(docs))  # pages: every offset
        for (source, doc), (ids, offsets) in zip(docs, tokens):
            if len(ids) == 0:
                failures.append(Failure(source.path, Stage.PREPROCESS, "the tokenizer found no tokens in this text"))
                continue
            refused = None if self.options.allow_unknown_tokens else self.unknown.refusal(doc.text, ids, offsets)
            if refused is None and self.scripts is not None and not self.options.allows_any_script:
                refused = self.scripts.refusal(doc.text)  # Cyrillic, Greek... for an English model
            if refused is not None:
                failures.append(Failure(source.path, Stage.PREPROCESS, refused, cause=UNKNOWN_TOKENS))
            else:
                cut.add(source.id, doc, ids, offsets)
        extra = len(self.prefix) + len(self.prompt_ids) + len(self.suffix)
        block = cut.block(extra)
        if block is not None and self.terms is not None:  # --sparse bm25: each window's term weights
            block.meta.update(self.terms.weigh(block.payload))
        return block, failures

    def close_reading(self) -> None:
        self.documents.close()

    def keep_dims(self, path: str, full: int, known: bool | None = None) -> None:
        """--dims (tasks/embed/dims.py): rows keep the first `dims` of the model's `full`
        ones; --dims of all of them is no cut and no new setting."""
        self.full_dims = full
        self.dims = checked_dims(self.spec.model, path, full, self.options.dims, self.options.force_dims, known=known)
        if self.dims == full and self.options.dims:
            self.options = replace(self.options, dims=0)

    def checked_vectors(self, items: Items, outputs: Any) -> np.ndarray:
        """A batch's outputs as float32 vectors, a row of `dims` per item (else a ValueError)."""
        vectors = np.asarray(outputs, dtype=np.float32)
        if vectors.shape != (len(items), self.dims):
            raise ValueError(f"expected {len(items)} vectors of {self.dims} dims, got an array of {vectors.shape}")
        return vectors

    # --- --vector-type: how the output stores vectors (gpucli/core/vectors.py) ---
    @property
    def stored(self) -> Stored:
        if getattr(self, "_stored", None) is None:
            self._stored = Stored(self.options.vector_type, self.dims)
        return self._stored

    def keep_vectors(self, output: Any) -> None:
        """The output this run writes: Qdrant keeps float vectors (its own datatypes and
        quantization), and the ledger keeps int8's calibration for every later run."""
        self._stored = Stored(self.options.vector_type, self.dims, keeps_floats=output.sink.name == "qdrant",
                              ledger=lambda: output.ledger)
    # --- end --vector-type ---

    def tag_part(self, table: Any) -> Any:
        """A whole part's table with int8's calibration in its field metadata: a part whose first rows
        are copies read back (dedup) holds it too, so that every part file decodes alone."""
        return self.stored.tag(table)
