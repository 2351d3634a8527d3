"""embed with an image-text model (CLIP, SigLIP): images and texts into one vector space.

`gpucli embed` becomes this task when `--model` names a model with a vision and a text tower
(`EmbedTask.variant`): the same command, options and output (tasks/embed/base.py), with image
files as inputs too.

    image   decoded as classify decodes (EXIF orientation, CMYK, 16-bit, alpha on white, bombs
            refused: tasks/images/decode.py), resized and cropped by the model's own image processor
            in the reader, kept as uint8; rescaled and normalised on the device; one row, chunk 0,
            `modality` "image", the vector `get_image_features` gives, L2-normalised
    text    read, extracted, cleaned and cut into windows exactly as embed does (its windows are
            the text tower's length: 77 tokens for CLIP, 64 for SigLIP); `modality` "text", the
            vector `get_text_features` gives, L2-normalised. The tokenizer is the model's
            tokenizer.json, or one built from SigLIP's SentencePiece model
            (tasks/image_text/texts.py)

Both kinds travel in one block: a payload per item (a uint8 H x W x 3 array, or the window's
token ids with the tokenizer's special tokens), images through shared memory. A batch may hold
both (tasks/embed/image_text_items.py); the worker runs each kind as its own forward pass of its
tower (tasks/image_text/towers.py) and returns the vectors in order.
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
from typing import Any

import numpy as np

from gpucli.core.errors import InputError, UsageError
from gpucli.core.records import Failure, Items, Source
from gpucli.core.stages import Stage
from gpucli.inputs.documents import Documents
from gpucli.inputs.encodings import NamedEncodings
from gpucli.inputs.extract import extractor_versions
from gpucli.models.hub import check_package, hub_info, resolve_model_dir
from gpucli.tasks.base import TaskSpec, per_core
from gpucli.tasks.embed.base import EmbedBase
from gpucli.tasks.embed.dims import dims_info
from gpucli.tasks.embed.image_text_items import IMAGE, MixedBatch, image_items, rows_schema, rows_table, text_items
from gpucli.tasks.embed.options import EmbedOptions
from gpucli.tasks.embed.st_model import Prompts
from gpucli.tasks.image_text.config import ImageTextConfig, processor_name, weight_bytes
from gpucli.tasks.image_text.texts import no_tokenizer, slow_query_ids, text_tokenizer
from gpucli.tasks.image_text.towers import Towers
from gpucli.tasks.images import IMAGE_SUFFIXES, SharedProcessor, ShmPool, open_image, stack
from gpucli.tasks.text.scripts import ScriptRule
from gpucli.tasks.text.tokenizer import saved_pad_id, special_tokens
from gpucli.tasks.text.tokens import TextTokens
from gpucli.tasks.text.unknown import Unknown

IMAGE_WEIGHT = 16  # files an image counts as in a read chunk: decoding a photo costs ~ a document's extraction
DEFAULT_OVERLAP = 32  # EmbedOptions.chunk_overlap's default: a quarter of the window where a tower is shorter
REAL_MODEL_BYTES = 4_000_000  # weights from which the model gets a worker per CPU core (as classify)


class ImageTextTask(EmbedBase):
    """`gpucli embed --model CLIP_OR_SIGLIP`: see the module docstring."""

    suffixes = tuple(dict.fromkeys(EmbedBase.suffixes + IMAGE_SUFFIXES))
    queue_items = 512  # an image waits as ~150 KB at 224 x 224
    read_chunk_files = 64

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self._shm = ShmPool()
        self._processor = SharedProcessor()

    @property
    def processor(self) -> Any:
        """The model's own image processor (on Pillow: gpucli.tasks.classify.adapters), loaded once."""
        return self._processor.get(self.spec.model, self.path)

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
        return per_core(cores) if weight_bytes(self.path) >= REAL_MODEL_BYTES else 1

    # --- parent ---------------------------------------------------------------------------
    def open(self) -> None:
        """The model's config and tokenizer. Its image processor (transformers': seconds to import)
        is loaded by the first image a reader prepares (`processor`), not here: the workers start
        loading the model meanwhile, instead of after the parent's import."""
        self.resolved = resolve_model_dir(self.spec.model, self.spec.revision, kind="transformers",
                                          cache_first=self._in_worker)
        self.path = self.resolved.path
        self.config = ImageTextConfig.read(self.spec.model, self.path)
        refuse_options(self.spec.model, self.options)
        self.spec = dataclasses.replace(self.spec, options={**self.spec.options, "backend": "torch"}, runtime="torch")
        self.runtime, self.notices = "torch", []
        self.max_tokens = min(self.config.text_positions, self.options.chunk_tokens or self.config.text_positions)
        self.prompts = Prompts(self.options.prefix, "", "", "")
        self.prompt, self.window, self.unknown = self.options.prefix, self.max_tokens, None
        self.pad_id = self.config.pad_id
        self.tokenizer = text_tokenizer(self.path, self.config.model_type)  # None: texts are refused, images embedded
        if self.tokenizer is not None:
            self._open_texts()
        self.documents = Documents(self.options.extract_timeout, encodings=NamedEncodings.parse(self.options.encoding))
        self.processor_name = processor_name(self.path)
        if not self.config.dims:
            raise UsageError(f"model {self.spec.model!r}: its config names no projection or hidden size")
        self.keep_dims(self.path, self.config.dims)  # --dims: the first dims of both towers' vectors
        self.layer_weights = self.config.layer_weights

    def _open_texts(self) -> None:
        """The tokenizer's windows (as embed's, the text tower's length)."""
        self.prefix, self.suffix = special_tokens(self.tokenizer)
        self.pad_id = saved_pad_id(self.path, self.tokenizer, self.config.pad_id)
        self.use_prompt(self.options.prefix)
        if self.options.chunk_overlap == DEFAULT_OVERLAP and self.window <= DEFAULT_OVERLAP:  # a short tower
            self.options = dataclasses.replace(self.options, chunk_overlap=self.window // 4)
        if self.window < 1 or self.options.chunk_overlap >= self.window:
            raise UsageError(f"--chunk-overlap {self.options.chunk_overlap} must be below the chunk's {self.window} "
                             f"text tokens (the text tower of {self.spec.model} takes {self.max_tokens})")
        self.unknown = Unknown.of(self.tokenizer, self.spec.model)
        self.scripts = ScriptRule.of(self.spec.model, str(self.path))  # scripts it does not read

    def use_prompt(self, prompt: str) -> None:
        self.prompt = prompt
        self.prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids if prompt else []
        self.window = self.max_tokens - len(self.prefix) - len(self.suffix) - len(self.prompt_ids)
        self.tokens = TextTokens(self.tokenizer, self.window, False, prompt, self.prompt_ids)

    @property
    def pad_to(self) -> int:
        """The length SigLIP's windows are padded to (0: CLIP's, to the longest, with a mask)."""
        return self.max_tokens if self.config.pads_to_length else 0

    @property
    def _normalizes(self) -> bool:
        return self.options.normalize is not False

    def info(self) -> dict[str, str]:
        return {"gpucli.model": self.spec.model, "gpucli.model_path": str(self.path), "gpucli.dims": str(self.dims),
                "gpucli.max_tokens": str(self.max_tokens), "gpucli.modality": "image,text",
                **self.stored.info(),  # --vector-type: as for text models (gpucli/core/vectors.py)
                "gpucli.model_type": self.config.model_type, "gpucli.normalize": str(self._normalizes).lower(),
                "gpucli.prompt": self.prompt, "gpucli.image_processor": self.processor_name,
                **hub_info(self.resolved), "gpucli.runtime": "torch",
                "gpucli.extractors": json.dumps(extractor_versions(), sort_keys=True),
                **dims_info(self.full_dims, self.dims)}

    def schema(self):
        return rows_schema(self.stored.field_type())

    def prepare_many(self, sources: list[Source], datas: list[bytes]) -> tuple[Items | None, list[Failure]]:
        """Images one by one (decode, the processor's resize and crop), texts as embed prepares
        them; one block, a payload per item."""
        is_image = [s.path.lower().endswith(IMAGE_SUFFIXES) for s in sources]
        texts = [i for i, image in enumerate(is_image) if not image]
        blocks, failures = [], []
        if texts and self.tokenizer is None:
            failures.extend(Failure(sources[i].path, Stage.PREPROCESS, no_tokenizer(self.spec.model)) for i in texts)
        elif texts:
            block, failed = super().prepare_many([sources[i] for i in texts], [datas[i] for i in texts])
            failures.extend(failed)
            if block is not None:
                blocks.append(text_items(block, self.prefix + self.prompt_ids, self.suffix))
        kept, pixels = [], []
        for source, data in ((s, d) for s, d, image in zip(sources, datas, is_image) if image):
            try:
                pixels.append(self.pixels(data))
                kept.append(source.id)
            except InputError as exc:
                failures.append(Failure(source.path, exc.stage, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a decoder or processor bug costs one file
                failures.append(Failure(source.path, Stage.PREPROCESS, f"{type(exc).__name__}: {exc}"))
        if kept:
            blocks.append(image_items(kept, pixels, self.config.image_cost))
        return (Items.concat(blocks) if blocks else None), failures

    def pixels(self, data: bytes) -> np.ndarray:
        """One image's pixels as the model's processor resizes and crops them, uint8 H x W x 3
        (rescaling and normalising happen on the device)."""
        out = self.processor(images=open_image(data), do_rescale=False, do_normalize=False, return_tensors="np")
        values = np.asarray(out["pixel_values"][0])  # C, H, W in 0..255
        return np.ascontiguousarray(np.clip(np.rint(values), 0, 255).astype(np.uint8).transpose(1, 2, 0))

    def pack(self, payloads: list[Any]) -> MixedBatch:
        return MixedBatch.of(payloads, self._shm)

    def release(self, packed: Any) -> None:
        if isinstance(packed, MixedBatch) and packed.images is not None:
            self._shm.release(packed.images)

    # --- worker ---------------------------------------------------------------------------
    def setup(self, device: str) -> None:
        self._in_worker = True
        self.open()
        if self.resolved.source == "package":
            check_package(self.resolved)
        self.towers = Towers.load(self.spec.model, self.path, device, self.spec.dtype, self.processor,
                                  dims=self.dims, normalize=self._normalizes, pad_to=self.pad_to)

    def unpack(self, packed: Any) -> Any:
        return packed

    def predict(self, packed: Any) -> np.ndarray:
        """A float32 matrix, a row per item in the batch's order: the images in one forward pass
        of the vision tower, the windows in one of the text tower."""
        if not isinstance(packed, MixedBatch):  # a caller in this process (search): payloads as they are
            packed = MixedBatch.of(list(packed))
        out = np.zeros((packed.size, self.dims), dtype=np.float32)
        if packed.image_at:
            out[list(packed.image_at)] = self.towers.images(stack(packed.image_arrays()))
        if packed.text_at:
            out[list(packed.text_at)] = self.towers.texts(list(packed.texts), self.pad_id)
        return out

    # --- queries (gpucli search) ------------------------------------------------------------
    def query_text(self, query: str) -> np.ndarray:
        """One query's vector by the text tower, in this process (after `setup`): its windows'
        vectors averaged where it is longer than one, as embed cuts it; with a model that has no
        fast tokenizer, transformers' own tokenizer, truncated to the tower's length."""
        if self.tokenizer is None:
            ids, pad_id = slow_query_ids(self.path, query, self.max_tokens)
            return self.towers.texts([ids], self.pad_id if pad_id is None else pad_id)[0]
        block, failures = self.prepare_many([Source(0, "<query>", "<query>")], [query.encode("utf-8")])
        if failures:
            raise InputError(failures[0].stage, failures[0].error)
        vector = self.predict(block.payload).mean(axis=0)
        return vector / max(float(np.linalg.norm(vector)), 1e-12)

    def query_image(self, data: bytes) -> np.ndarray:
        """One image's vector, in this process (after `setup`)."""
        return self.towers.images(self.pixels(data)[None])[0]

    def rows(self, items: Items, outputs: Any) -> tuple[Any, list[tuple[int, str]]]:
        vectors = self.checked_vectors(items, outputs)
        return self.stored.tag(rows_table(items, self.stored.column(vectors))), []  # --vector-type


def refuse_options(model: str, options: EmbedOptions) -> None:
    """The embed options an image-text model does not take, as usage errors."""
    if options.backend == "onnx" or options.quantize:
        raise UsageError(f"--model {model} is an image-text model: it runs on --backend torch only "
                         "(no --backend onnx, no --quantize)")
    if options.sparse:  # sparse vectors are over a text model's token windows
        raise UsageError(f"--sparse: --model {model} is an image-text model; sparse lexical vectors "
                         "are made for text models only for now (embed without --sparse)")
    if options.prompt:
        raise UsageError(f"--prompt: {model} names no prompts; use --prefix TEXT")
