"""embed with an image-text model (CLIP, SigLIP): images and texts into one vector space.

`gpucli embed` becomes this task when `--model` names a model with a vision and a text tower
(`EmbedTask.variant`): the same command, options and output, with image files as inputs too.

    image   decoded as classify decodes (EXIF orientation, CMYK, 16-bit, alpha on white, bombs
            refused: tasks/_images.py), resized and cropped by the model's own image processor
            in the reader, kept as uint8; rescaled and normalised on the device; one row, chunk 0,
            `modality` "image", the vector `get_image_features` gives, L2-normalised
    text    read, extracted, cleaned and cut into windows exactly as embed does (its windows are
            the text tower's length: 77 tokens for CLIP, 64 for SigLIP); `modality` "text", the
            vector `get_text_features` gives, L2-normalised

Both kinds travel in one block: a payload per item (a uint8 H x W x 3 array, or the window's
token ids with the tokenizer's special tokens), images through shared memory. A batch may hold
both; the worker runs each kind as its own forward pass and returns the vectors in order.
The cost of an item is in tokens for both: a window's tokens, or the vision tower's patches
(+1), so the batch caps of text embedding fit images too.

Padding follows each family's reference: CLIP pads to the longest window with an attention
mask (its text tower pools at the end-of-text token); SigLIP was trained on texts padded to the
tower's full length (its model card: `padding="max_length"`), and pools the last position, so
its windows are padded to that length with the pad token and given no attention mask, as it
was trained (big_vision, open_clip#984, transformers#39269). transformers' model card passes
the mask its tokenizer returns; with a bidirectional text tower that gives other vectors, so
gpucli's SigLIP text vectors equal `get_text_features(input_ids=...)` alone. CLIP's text tower
is causal and pools before any padding: the mask changes nothing there.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpucli.core.errors import UsageError
from gpucli.core.records import Failure, Items, Source
from gpucli.core.stages import Stage
from gpucli.models.hub import check_package, hub_info, resolve_model_dir
from gpucli.tasks._images import IMAGE_SUFFIXES, ShmBatch, ShmPool, open_image, read_batch, stack
from gpucli.tasks._unknown import Unknown
from gpucli.tasks.base import per_core
from gpucli.tasks.embed import DOCUMENT_WEIGHT, EmbedTask, _special_tokens, load_tokenizer

IMAGE, TEXT = "image", "text"
IMAGE_WEIGHT = 16  # files an image counts as in a read chunk: decoding a photo costs ~ a document's extraction
DEFAULT_OVERLAP = 32  # EmbedOptions.chunk_overlap's default: a quarter of the window where a tower is shorter
REAL_MODEL_BYTES = 4_000_000  # weights from which the model gets a worker per CPU core (as classify)
# model types whose text tower was trained on texts padded to its full length, pooled at the last position
PAD_TO_LENGTH = ("siglip",)
SUPPORTED = ("clip", "siglip", "chinese_clip", "altclip")  # get_image_features / get_text_features, fixed size


def is_image_text(path: str) -> bool:
    """Whether the model directory at `path` holds an image-text model (a vision and a text tower)."""
    from gpucli.models.model_kind import ModelKind, model_kind

    return model_kind(path)[0] is ModelKind.IMAGE_TEXT


def image_text_dir(model: str, revision: str = "", download: bool = True) -> str | None:
    """The local directory of `model` when it is an image-text model, else None. A Hub id is taken
    from the cache (downloaded where the Hub is reachable and it is not cached, unless not
    `download`); a model that cannot be found is left to the text task, whose loader says what to do."""
    try:
        path = resolve_model_dir(model, revision, kind="transformers", cache_first=True,
                                 cache_only=not download).path
    except UsageError:
        return None
    return path if is_image_text(path) else None


@dataclass(frozen=True)
class MixedBatch:
    """A batch on its way to a worker: the images in one shared-memory block, the windows'
    ids pickled, and where each goes back in the batch's order."""

    size: int
    images: ShmBatch | None
    image_at: tuple[int, ...]
    texts: tuple[Any, ...]
    text_at: tuple[int, ...]

    def __len__(self) -> int:
        return self.size


class ImageTextTask(EmbedTask):
    """`gpucli embed --model CLIP_OR_SIGLIP`: see the module docstring."""

    name = "embed"  # embed itself for the user; not registered (an `_` module): EmbedTask.variant picks it
    suffixes = tuple(dict.fromkeys(EmbedTask.suffixes + IMAGE_SUFFIXES))
    queue_items = 512  # an image waits as ~150 KB at 224 x 224
    terms = None  # --sparse is refused for image-text models (embed's prepare_many asks for its weights)
    read_chunk_files = 64

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self._shm = ShmPool()
        self._processor: Any = None
        self._processor_lock = threading.Lock()  # reader threads ask for it at once

    @property
    def processor(self) -> Any:
        """The model's own image processor (on Pillow: gpucli.tasks._classifiers), loaded once."""
        with self._processor_lock:
            if self._processor is None:
                from gpucli.tasks._classifiers import _hf_processor

                self._processor = _hf_processor(self.spec.model, self.path)
            return self._processor

    def read_weight(self, path: str) -> int:
        if path.lower().endswith(IMAGE_SUFFIXES):
            return IMAGE_WEIGHT
        return super().read_weight(path)

    @classmethod
    def read_as(cls, path: str) -> str:
        return IMAGE if path.lower().endswith(IMAGE_SUFFIXES) else super().read_as(path)

    def reader_processes(self, cores: int, devices: list[str]) -> int:
        return 0  # Pillow and the tokenizer release the GIL: threads, as classify reads

    def cpu_workers(self, cores: int) -> int:
        return per_core(cores) if _weight_bytes(self.path) >= REAL_MODEL_BYTES else 1

    # --- parent ---------------------------------------------------------------------------
    def open(self) -> None:
        """The model's config and tokenizer. Its image processor (transformers': seconds to import)
        is loaded by the first image a reader prepares (`processor`), not here: the workers start
        loading the model meanwhile, instead of after the parent's import."""
        self.resolved = resolve_model_dir(self.spec.model, self.spec.revision, kind="transformers",
                                          cache_first=self._in_worker)
        self.path = self.resolved.path
        config = json.loads((Path(self.path) / "config.json").read_text(encoding="utf-8"))
        self.model_type = str(config.get("model_type") or "")
        if self.model_type not in SUPPORTED:
            raise UsageError(f"--model {self.spec.model}: a {self.model_type!r} image-text model; gpucli embed runs "
                             f"image-text models of the types {', '.join(SUPPORTED)} (CLIP, SigLIP and SigLIP 2 "
                             "fixed-resolution checkpoints, Chinese-CLIP, AltCLIP)")
        if self.options.backend == "onnx" or self.options.quantize:
            raise UsageError(f"--model {self.spec.model} is an image-text model: it runs on --backend torch only "
                             "(no --backend onnx, no --quantize)")
        if self.options.sparse:  # issue 30: sparse vectors are over a text model's token windows
            raise UsageError(f"--sparse: --model {self.spec.model} is an image-text model; sparse lexical vectors "
                             "are made for text models only for now (embed without --sparse)")
        text, vision = config.get("text_config") or {}, config.get("vision_config") or {}
        self.spec = _on_torch(self.spec)
        self.runtime, self.notices = "torch", []
        self.max_tokens = int(text.get("max_position_embeddings") or 77)
        if self.options.chunk_tokens:
            self.max_tokens = min(self.max_tokens, self.options.chunk_tokens)
        self.pad_to = self.max_tokens if self.model_type in PAD_TO_LENGTH else 0
        from gpucli.tasks._st_modules import Prompts

        self.prompts = Prompts(self.options.prefix, "", "", "")
        if self.options.prompt:
            raise UsageError(f"--prompt: {self.spec.model} names no prompts; use --prefix TEXT")
        self.tokenizer = None  # no tokenizer.json (SigLIP's SentencePiece): images only; queries by transformers
        self.prompt, self.window, self.unknown = self.options.prefix, self.max_tokens, None
        self.pad_id = int(text.get("pad_token_id") or 0)
        if (Path(self.path) / "tokenizer.json").is_file():
            self._open_texts(text)
        from gpucli.tasks._documents import Documents

        self.documents = Documents(self.options.extract_timeout)
        self.processor_name = _processor_name(self.path)
        self.image_cost = _patches(vision)
        self.dims = int(config.get("projection_dim") or text.get("projection_size") or text.get("hidden_size") or 0)
        if not self.dims:
            raise UsageError(f"model {self.spec.model!r}: its config names no projection or hidden size")
        from gpucli.tasks._dims import checked_dims

        self.full_dims = self.dims  # --dims (issue 30): the first dims of both towers' vectors
        self.dims = checked_dims(self.spec.model, self.path, self.full_dims, self.options.dims, self.options.force_dims)
        if self.dims == self.full_dims and self.options.dims:  # all the model's dims: no cut, no new setting
            self.options = dataclasses.replace(self.options, dims=0)
        hidden, layers = int(vision.get("hidden_size") or 768), int(vision.get("num_hidden_layers") or 12)
        self.layer_weights = layers * 12 * hidden * hidden

    def _open_texts(self, text: dict) -> None:
        """The fast tokenizer and the windows it cuts (as embed's, the text tower's length)."""
        self.tokenizer = load_tokenizer(self.path)
        self._ends_from_text = False
        self.prefix, self.suffix = _special_tokens(self.tokenizer)
        self.pad_id = _pad_id(self.path, self.tokenizer, text)
        self.use_prompt(self.options.prefix)
        if self.options.chunk_overlap == DEFAULT_OVERLAP and self.window <= DEFAULT_OVERLAP:  # a short tower
            self.options = dataclasses.replace(self.options, chunk_overlap=self.window // 4)
        if self.window < 1 or self.options.chunk_overlap >= self.window:
            raise UsageError(f"--chunk-overlap {self.options.chunk_overlap} must be below the chunk's {self.window} "
                             f"text tokens (the text tower of {self.spec.model} takes {self.max_tokens})")
        self.unknown = Unknown.of(self.tokenizer, self.spec.model)

    def use_prompt(self, prompt: str) -> None:
        from gpucli.tasks._tokens import TextTokens

        self.prompt = prompt
        self.prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids if prompt else []
        self.prompt_length = 0
        self.window = self.max_tokens - len(self.prefix) - len(self.suffix) - len(self.prompt_ids)
        self.tokens = TextTokens(self.tokenizer, self.window, False, prompt, self.prompt_ids)

    def info(self) -> dict[str, str]:
        from gpucli.inputs.extract import extractor_versions
        from gpucli.tasks._dims import dims_info

        return {"gpucli.model": self.spec.model, "gpucli.model_path": str(self.path), "gpucli.dims": str(self.dims),
                "gpucli.max_tokens": str(self.max_tokens), "gpucli.modality": "image,text",
                **self.stored.info(),  # --vector-type (issue 30): as for text models (gpucli/core/vectors.py)
                "gpucli.model_type": self.model_type, "gpucli.normalize": str(self._normalizes).lower(),
                "gpucli.prompt": self.prompt, "gpucli.image_processor": self.processor_name,
                **hub_info(self.resolved), "gpucli.runtime": "torch",
                "gpucli.extractors": json.dumps(extractor_versions(), sort_keys=True),
                **dims_info(self.full_dims, self.dims)}

    @property
    def _normalizes(self) -> bool:
        return self.options.normalize is not False

    def schema(self):
        import pyarrow as pa

        return pa.schema([("chunk", pa.int32()), ("page", pa.int32()), ("char_start", pa.int64()),
                          ("char_end", pa.int64()), ("text", pa.string()), ("modality", pa.string()),
                          ("embedding", self.stored.field_type())])

    def prepare_many(self, sources: list[Source], datas: list[bytes]) -> tuple[Items | None, list[Failure]]:
        """Images one by one (decode, the processor's resize and crop), texts as embed prepares
        them; one block, a payload per item."""
        from gpucli.core.errors import InputError

        images = [i for i, s in enumerate(sources) if s.path.lower().endswith(IMAGE_SUFFIXES)]
        texts = [i for i in range(len(sources)) if i not in set(images)]
        blocks, failures = [], []
        if texts and self.tokenizer is None:
            failures.extend(Failure(sources[i].path, Stage.PREPROCESS, self._no_fast_tokenizer) for i in texts)
        elif texts:
            block, failed = super().prepare_many([sources[i] for i in texts], [datas[i] for i in texts])
            failures.extend(failed)
            if block is not None:
                blocks.append(self._text_items(block))
        kept, pixels = [], []
        for i in images:
            try:
                pixels.append(self.pixels(datas[i]))
                kept.append(sources[i].id)
            except InputError as exc:
                failures.append(Failure(sources[i].path, exc.stage, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a decoder or processor bug costs one file
                failures.append(Failure(sources[i].path, Stage.PREPROCESS, f"{type(exc).__name__}: {exc}"))
        if kept:
            blocks.append(_image_items(kept, pixels, self.image_cost))
        return (Items.concat(blocks) if blocks else None), failures

    @property
    def _no_fast_tokenizer(self) -> str:
        return (f"{self.spec.model} has no fast tokenizer (tokenizer.json), which gpucli needs to cut a text into "
                "chunks with their char offsets; its images are embedded. Leave texts out with --include '*.jpg' "
                "(and other image globs), or save a fast tokenizer into the model directory")

    def pixels(self, data: bytes) -> np.ndarray:
        """One image's pixels as the model's processor resizes and crops them, uint8 H x W x 3
        (rescaling and normalising happen on the device)."""
        out = self.processor(images=open_image(data), do_rescale=False, do_normalize=False, return_tensors="np")
        values = np.asarray(out["pixel_values"][0])  # C, H, W in 0..255
        return np.ascontiguousarray(np.clip(np.rint(values), 0, 255).astype(np.uint8).transpose(1, 2, 0))

    def _text_items(self, block: Items) -> Items:
        """embed's block with a payload per window: the ids the tower sees, special tokens included."""
        head, tail = np.asarray(self.prefix + self.prompt_ids, np.int64), np.asarray(self.suffix, np.int64)
        rows = [np.concatenate([head, block.payload.row(i).astype(np.int64), tail]) for i in range(len(block))]
        payload = np.empty(len(rows), dtype=object)
        payload[:] = rows
        meta = dict(block.meta)
        meta["modality"] = np.full(len(block), TEXT, dtype=object)
        return Items(block.source_ids, block.index, block.cost, list(payload), meta)

    def pack(self, payloads: list[Any]) -> MixedBatch:
        image_at = tuple(i for i, p in enumerate(payloads) if p.dtype == np.uint8)
        text_at = tuple(i for i, p in enumerate(payloads) if p.dtype != np.uint8)
        images = self._shm.pack([payloads[i] for i in image_at]) if image_at else None
        return MixedBatch(len(payloads), images, image_at, tuple(payloads[i] for i in text_at), text_at)

    def release(self, packed: Any) -> None:
        if isinstance(packed, MixedBatch) and packed.images is not None:
            self._shm.release(packed.images)

    # --- worker ---------------------------------------------------------------------------
    def setup(self, device: str) -> None:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging

        from gpucli.tasks._classifiers import torch_dtype

        self._in_worker = True
        self.open()
        if self.resolved.source == "package":
            check_package(self.resolved)
        logging.set_verbosity_error()
        logging.disable_progress_bar()
        self.device = torch.device(device)
        self.dtype = torch_dtype(self.spec.dtype, self.device)
        model = AutoModel.from_pretrained(self.path, trust_remote_code=False, local_files_only=True)
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise UsageError(f"model {self.spec.model!r} ({type(model).__name__}) has no get_image_features / "
                             "get_text_features")
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.use_mask = self.model_type not in PAD_TO_LENGTH  # SigLIP was trained without one (see the module doc)
        from gpucli.tasks._classifiers import _hf_normalize

        norm = _hf_normalize(self.processor)
        self._mul = torch.tensor([norm.scale / s for s in norm.std], device=self.device).view(1, 3, 1, 1)
        self._sub = torch.tensor([m / s for m, s in zip(norm.mean, norm.std)], device=self.device).view(1, 3, 1, 1)

    def unpack(self, packed: Any) -> Any:
        return packed

    def predict(self, packed: Any) -> np.ndarray:
        """A float32 matrix, a row per item in the batch's order: the images in one forward pass
        of the vision tower, the windows in one of the text tower."""
        if not isinstance(packed, MixedBatch):  # a caller in this process (search): payloads as they are
            packed = _unshared(list(packed))
        out = np.zeros((packed.size, self.dims), dtype=np.float32)
        if packed.image_at:
            arrays = read_batch(packed.images) if isinstance(packed.images, ShmBatch) else packed.images
            out[list(packed.image_at)] = self.image_vectors(stack(arrays))
        if packed.text_at:
            out[list(packed.text_at)] = self.text_vectors(list(packed.texts))
        return out

    def image_vectors(self, batch: np.ndarray) -> np.ndarray:
        import torch

        pixels = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device, non_blocking=True)
        with torch.inference_mode():
            pixels = pixels.permute(0, 3, 1, 2).float().mul_(self._mul).sub_(self._sub).to(self.dtype)
            return self._finish(self.model.get_image_features(pixel_values=pixels))

    def text_vectors(self, rows: list[np.ndarray]) -> np.ndarray:
        import torch

        width = max(self.pad_to, max(len(r) for r in rows))
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device)}
        if self.use_mask:
            inputs["attention_mask"] = torch.from_numpy(mask).to(self.device)
        with torch.inference_mode():
            return self._finish(self.model.get_text_features(**inputs))

    def _finish(self, features: Any) -> np.ndarray:
        """transformers 5 returns the features as the output's pooler_output, 4.x as a tensor."""
        import torch

        vectors = features if isinstance(features, torch.Tensor) else features.pooler_output
        vectors = vectors.float()[..., : self.dims]
        if self._normalizes:
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return vectors.cpu().numpy()

    # --- queries (gpucli search) ------------------------------------------------------------
    def query_text(self, query: str) -> np.ndarray:
        """One query's vector by the text tower, in this process (after `setup`): its windows'
        vectors averaged where it is longer than one, as embed cuts it; with a model that has no
        fast tokenizer, transformers' own tokenizer, truncated to the tower's length."""
        from gpucli.core.errors import InputError
        from gpucli.core.records import Source

        if self.tokenizer is None:
            from transformers import AutoTokenizer

            slow = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            ids = slow(query, truncation=True, max_length=self.max_tokens)["input_ids"]
            self.pad_id = slow.pad_token_id if slow.pad_token_id is not None else self.pad_id
            return self.text_vectors([np.asarray(ids, np.int64)])[0]
        block, failures = self.prepare_many([Source(0, "<query>", "<query>")], [query.encode("utf-8")])
        if failures:
            raise InputError(failures[0].stage, failures[0].error)
        vector = self.predict(block.payload).mean(axis=0)
        return vector / max(float(np.linalg.norm(vector)), 1e-12)

    def query_image(self, data: bytes) -> np.ndarray:
        """One image's vector, in this process (after `setup`)."""
        return self.image_vectors(self.pixels(data)[None])[0]

    def rows(self, items: Items, outputs: Any) -> tuple[Any, list[tuple[int, str]]]:
        import pyarrow as pa

        vectors = np.asarray(outputs, dtype=np.float32)
        if vectors.shape != (len(items), self.dims):
            raise ValueError(f"expected {len(items)} vectors of {self.dims} dims, got an array of {vectors.shape}")
        image = items.meta["modality"] == IMAGE
        page = items.meta["page"].astype(np.int32)
        table = pa.table({"chunk": pa.array(items.index, pa.int32()),
                          "page": pa.array(page, pa.int32(), mask=page == 0),
                          "char_start": pa.array(items.meta["char_start"].astype(np.int64), pa.int64(), mask=image),
                          "char_end": pa.array(items.meta["char_end"].astype(np.int64), pa.int64(), mask=image),
                          "text": pa.array(items.meta["text"], pa.string()),
                          "modality": pa.array(items.meta["modality"], pa.string()),
                          "embedding": self.stored.column(vectors)})  # --vector-type (issue 30)
        return self.stored.tag(table), []


def _image_items(source_ids: list[int], pixels: list[np.ndarray], cost: int) -> Items:
    n = len(source_ids)
    text = np.empty(n, dtype=object)
    text[:] = [None] * n
    return Items(np.asarray(source_ids, np.int64), np.zeros(n, np.int64), np.full(n, cost, np.int64), pixels,
                 {"page": np.zeros(n, np.int32), "char_start": np.zeros(n, np.int64),
                  "char_end": np.zeros(n, np.int64), "text": text, "modality": np.full(n, IMAGE, dtype=object)})


def _unshared(payloads: list[np.ndarray]) -> MixedBatch:
    image_at = tuple(i for i, p in enumerate(payloads) if p.dtype == np.uint8)
    text_at = tuple(i for i, p in enumerate(payloads) if p.dtype != np.uint8)
    return MixedBatch(len(payloads), [payloads[i] for i in image_at] if image_at else None,  # type: ignore[arg-type]
                      image_at, tuple(payloads[i] for i in text_at), text_at)


def _processor_name(path: str) -> str:
    """The image processor's class as the model names it (preprocessor_config.json), without loading it."""
    try:
        config = json.loads((Path(path) / "preprocessor_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(config.get("image_processor_type") or config.get("feature_extractor_type") or "")


def _patches(vision: dict) -> int:
    """The vision tower's tokens for one image: its patches and the class token."""
    size, patch = vision.get("image_size") or 224, vision.get("patch_size") or 32
    size = size if isinstance(size, int) else int(max(size))
    return (size // int(patch)) ** 2 + 1


def _pad_id(path: str, tokenizer: Any, text: dict) -> int:
    """The id the tokenizer pads with (its saved pad token), else the text tower's config's."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            token = json.loads((Path(path) / name).read_text(encoding="utf-8")).get("pad_token")
        except (OSError, ValueError, AttributeError):
            continue
        token = token.get("content") if isinstance(token, dict) else token
        found = tokenizer.token_to_id(token) if isinstance(token, str) else None
        if found is not None:
            return int(found)
    return int(text.get("pad_token_id") or 0)


def _on_torch(spec: Any) -> Any:
    return dataclasses.replace(spec, options={**spec.options, "backend": "torch"}, runtime="torch")


def _weight_bytes(path: str) -> int:
    from gpucli.models.hub import WEIGHT_SUFFIXES

    root = Path(path)
    return sum(f.stat().st_size for f in root.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES)) \
        if root.is_dir() else 0


__all__ = ["DOCUMENT_WEIGHT", "ImageTextTask", "image_text_dir", "is_image_text"]
