"""Tiny image-text models (CLIP, SigLIP) for the tests of `gpucli embed` on images (issue 29), and
the vectors transformers itself gives for them, written as a user of transformers would.

Each `save_tiny_*` builds, offline and in about half a second once transformers is imported, a randomly initialised model
saved with `save_pretrained`, with its image processor (preprocessor_config.json) and a fast
tokenizer (tokenizer.json, which gpucli reads with the `tokenizers` library for char offsets), so
that `AutoModel`, `AutoImageProcessor` and `AutoTokenizer` all load the directory with no network.
The same arguments give the same files and the same weights.

- CLIP: a real `CLIPTokenizer` (byte-level BPE) built from a generated vocab.json and merges.txt:
  the 256 byte characters, each also with "</w>", merges that spell out a few common English
  words, then <|startoftext|> and <|endoftext|>. The text tower pools at the first
  `text_config.eos_token_id`, which is the tokenizer's <|endoftext|> id (the pad token too).
- SigLIP: a SentencePiece-like Unigram model built with `tokenizers` from a fixed list of pieces
  (the trainer is not deterministic), lowercasing, "▁" for spaces, </s> appended, </s> for
  padding, saved as a `PreTrainedTokenizerFast` (tokenizer.json) whose model_max_length is the
  text tower's max_position_embeddings (16). With `sentencepiece=True`, as the Hub's
  google/siglip-* repos ship it instead: the same pieces as a real SentencePiece model
  (spiece.model) saved by the slow `SiglipTokenizer`, and no tokenizer.json. The text tower
  pools at the LAST position, whatever token is there: hence SigLIP's `padding="max_length"`.
  The tokenizer returns an attention_mask, and with it SigLIP's vectors change (see
  `reference_text_vectors`).

Test files import these as `from tests.image_text_models import ...`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

HIDDEN = 32  # both towers of both models
LAYERS = 2
HEADS = 4
INTERMEDIATE = 64
CLIP_TEXT_POSITIONS = 77
SIGLIP_TEXT_POSITIONS = 16
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
BICUBIC = 3  # PIL.Image.Resampling.BICUBIC

# Words the tiny tokenizers hold whole (the rest is spelled out in characters or bytes).
WORDS = (
    "a", "an", "the", "of", "on", "in", "at", "and", "is", "with", "photo", "picture", "image",
    "red", "blue", "white", "black", "green", "car", "cat", "dog", "cup", "coffee", "astronaut",
    "rocket", "coins", "night", "day", "sky", "table", "street", "sleeping", "sofa", "space", "suit",
)  # fmt: skip

# The sentences the tests embed; every one fits SigLIP's 16 positions once tokenized.
SENTENCES = ("a red car at night", "a photo of a cat", "a cup of coffee on a table", "an astronaut in space")


def _libraries() -> tuple[Any, Any]:
    return pytest.importorskip("torch"), pytest.importorskip("transformers")


# --- CLIP ----------------------------------------------------------------------------------------


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's and CLIP's map of the 256 bytes to printable characters (byte-level BPE)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def clip_vocab_and_merges(words: Sequence[str] = WORDS) -> tuple[dict[str, int], list[str]]:
    """CLIP's vocab.json and merges.txt (without its "#version" line) for a byte-level BPE that
    holds `words` whole: each word is spelt out left to right, "r e", "re d</w>". No words gives a
    character-level vocabulary with no merges."""
    merges: list[str] = []
    for word in words:
        parts = [bytes_to_unicode()[b] for b in word.lower().encode("utf-8")]
        parts[-1] += "</w>"
        done = parts[0]
        for part in parts[1:]:
            merge = f"{done} {part}"
            if merge not in merges:
                merges.append(merge)
            done += part
    chars = list(bytes_to_unicode().values())
    tokens = [*chars, *(c + "</w>" for c in chars), *(m.replace(" ", "") for m in merges)]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {token: i for i, token in enumerate(tokens)}, merges


def save_clip_tokenizer(path: Path, words: Sequence[str] = WORDS) -> Any:
    """Write vocab.json and merges.txt, load them with `CLIPTokenizer` (transformers' fast, tokenizers-backed
    class), save it into `path` (tokenizer.json, tokenizer_config.json); returns the tokenizer."""
    _, transformers = _libraries()
    vocab, merges = clip_vocab_and_merges(words)
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiny-clip-tokenizer-") as tmp:
        for where in (Path(tmp), path):  # the sources stay beside tokenizer.json, as on the Hub
            (where / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
            (where / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8")
        tokenizer = transformers.CLIPTokenizer.from_pretrained(tmp, model_max_length=CLIP_TEXT_POSITIONS)
    if not getattr(tokenizer, "is_fast", True):  # transformers 4.x: the slow class, converted
        tokenizer = transformers.CLIPTokenizerFast.from_pretrained(path, model_max_length=CLIP_TEXT_POSITIONS)
    tokenizer.save_pretrained(path)
    return tokenizer


def save_tiny_clip(
    path: Path, image_size: int = 32, patch_size: int = 8, projection_dim: int = 16, seed: int = 0,
    *, words: Sequence[str] = WORDS,
) -> Path:  # fmt: skip
    """A randomly initialised `CLIPModel` (2 layers, 4 heads, width 32 in each tower, vectors of
    `projection_dim`) with its `CLIPImageProcessor` and fast CLIP tokenizer, in `path`."""
    torch, transformers = _libraries()
    path = Path(path)
    tokenizer = save_clip_tokenizer(path, words)
    tower = {"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
             "num_attention_heads": HEADS}  # fmt: skip
    text = {**tower, "vocab_size": len(tokenizer), "max_position_embeddings": CLIP_TEXT_POSITIONS,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    vision = {**tower, "image_size": image_size, "patch_size": patch_size}
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection_dim)
    torch.manual_seed(seed)
    transformers.CLIPModel(config).eval().save_pretrained(path)
    processor = {
        "image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": image_size},
        "resample": BICUBIC, "do_center_crop": True, "crop_size": {"height": image_size, "width": image_size},
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD, "do_convert_rgb": True,
    }  # fmt: skip
    (path / "preprocessor_config.json").write_text(json.dumps(processor, indent=2), encoding="utf-8")
    return path


# --- SigLIP --------------------------------------------------------------------------------------

SIGLIP_SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in google/siglip-*
SIGLIP_PUNCTUATION = ".,!?;:'\"-()"


def siglip_pieces(words: Sequence[str] = WORDS) -> list[tuple[str, float]]:
    """(piece, log probability) of a SentencePiece-like Unigram vocabulary: the special tokens,
    "▁word" for each word, a few suffixes, and every lowercase letter, digit and punctuation mark
    alone and after "▁", so that any ASCII text tokenizes (anything else is <unk>)."""
    pieces = [(token, 0.0) for token in SIGLIP_SPECIALS] + [("▁", -5.0)]
    pieces += [("▁" + word, -3.0 - i / 100) for i, word in enumerate(dict.fromkeys(w.lower() for w in words))]
    pieces += [(suffix, -4.0) for suffix in ("s", "ing", "ed", "er")]
    chars = "abcdefghijklmnopqrstuvwxyz0123456789" + SIGLIP_PUNCTUATION
    pieces += [(c, -6.0) for c in chars] + [("▁" + c, -6.5) for c in chars]
    first: dict[str, float] = {}
    for piece, score in pieces:
        first.setdefault(piece, score)  # each piece once, where it first comes
    return list(first.items())


def save_siglip_tokenizer(path: Path, words: Sequence[str] = WORDS) -> Any:
    """A Unigram tokenizer (tokenizers library) wrapped in `PreTrainedTokenizerFast`, saved into
    `path` with tokenizer_class "PreTrainedTokenizerFast" (the slow `SiglipTokenizer`, which
    AutoTokenizer would pick from config.json's model_type, needs spiece.model)."""
    _, transformers = _libraries()
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    pieces = siglip_pieces(words)
    backend = Tokenizer(models.Unigram(pieces, unk_id=SIGLIP_SPECIALS.index("<unk>"), byte_fallback=False))
    backend.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    eos = SIGLIP_SPECIALS.index("</s>")
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos)]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="</s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=SIGLIP_TEXT_POSITIONS,
    )  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # transformers 5 writes "TokenizersBackend", unknown to 4.x
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return tokenizer


def save_siglip_sentencepiece(path: Path, words: Sequence[str] = WORDS) -> Any:
    """SigLIP's tokenizer as the Hub's google/siglip-* repos ship it: a SentencePiece Unigram model
    of `siglip_pieces` (written as a ModelProto, so the pieces are these: training would pick its
    own) with SentencePiece's nmt_nfkc normalisation, saved into `path` by transformers' slow
    `SiglipTokenizer` (spiece.model and tokenizer_config.json; no tokenizer.json, as SigLIP has
    no fast tokenizer class). Returns the tokenizer."""
    _, transformers = _libraries()
    spm = pytest.importorskip("sentencepiece")
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = model_pb2.ModelProto()
    proto.normalizer_spec.CopyFrom(_nmt_nfkc_normalizer(spm, model_pb2))
    trainer = proto.trainer_spec
    trainer.model_type = model_pb2.TrainerSpec.UNIGRAM
    trainer.pad_id, trainer.eos_id, trainer.unk_id, trainer.bos_id = 0, 1, 2, -1  # SIGLIP_SPECIALS' order
    trainer.pad_piece, trainer.eos_piece, trainer.unk_piece = SIGLIP_SPECIALS
    kinds = {"<pad>": model_pb2.ModelProto.SentencePiece.CONTROL, "</s>": model_pb2.ModelProto.SentencePiece.CONTROL,
             "<unk>": model_pb2.ModelProto.SentencePiece.UNKNOWN}
    for piece, score in siglip_pieces(words):
        proto.pieces.add(piece=piece, score=score, type=kinds.get(piece, model_pb2.ModelProto.SentencePiece.NORMAL))
    trainer.vocab_size = len(proto.pieces)
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiny-siglip-spiece-") as tmp:
        (Path(tmp) / "spiece.model").write_bytes(proto.SerializeToString())
        tokenizer = transformers.SiglipTokenizer(vocab_file=str(Path(tmp) / "spiece.model"),
                                                 model_max_length=SIGLIP_TEXT_POSITIONS)
        tokenizer.save_pretrained(path)
    assert (path / "spiece.model").is_file() and not (path / "tokenizer.json").exists()
    return tokenizer


def _nmt_nfkc_normalizer(spm: Any, model_pb2: Any) -> Any:
    """SentencePiece's nmt_nfkc normalizer spec (its precompiled charsmap included), from a char
    model trained on a few letters: the trainer compiles the rule, the pieces are thrown away."""
    import io

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c"] * 10), model_writer=model, model_type="char",
                                   vocab_size=8, hard_vocab_limit=False, normalization_rule_name="nmt_nfkc",
                                   minloglevel=2, num_threads=1)
    return model_pb2.ModelProto.FromString(model.getvalue()).normalizer_spec


def save_tiny_siglip(path: Path, image_size: int = 32, patch_size: int = 8, seed: int = 0, *,
                     sentencepiece: bool = False) -> Path:
    """A randomly initialised `SiglipModel` (2 layers, 4 heads, width 32 in each tower: vectors of
    32) with its `SiglipImageProcessor` and a fast tokenizer, or with `sentencepiece` only its
    SentencePiece model (as on the Hub), in `path`."""
    torch, transformers = _libraries()
    path = Path(path)
    tokenizer = save_siglip_sentencepiece(path) if sentencepiece else save_siglip_tokenizer(path)
    tower = {"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
             "num_attention_heads": HEADS}  # fmt: skip
    text = {**tower, "vocab_size": len(tokenizer), "max_position_embeddings": SIGLIP_TEXT_POSITIONS,
            "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": None}  # fmt: skip
    vision = {**tower, "image_size": image_size, "patch_size": patch_size}
    config = transformers.SiglipConfig(text_config=text, vision_config=vision)
    torch.manual_seed(seed)
    transformers.SiglipModel(config).eval().save_pretrained(path)
    processor = {
        "image_processor_type": "SiglipImageProcessor", "do_resize": True,
        "size": {"height": image_size, "width": image_size}, "resample": BICUBIC, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
    }  # fmt: skip
    (path / "preprocessor_config.json").write_text(json.dumps(processor, indent=2), encoding="utf-8")
    return path


# --- what transformers gives ---------------------------------------------------------------------


def open_like_gpucli(path: str | Path) -> Image.Image:
    """An image as a user opens it: EXIF orientation applied, RGB (gpucli's reader does this too;
    it also puts alpha on white, where convert("RGB") drops it: use opaque images)."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        return (ImageOps.exif_transpose(im) or im).convert("RGB")


def _features(output: Any) -> Any:
    """transformers 5 returns a BaseModelOutputWithPooling from get_*_features, 4.x the tensor."""
    pooled = getattr(output, "pooler_output", None)
    return output if pooled is None else pooled


def _unit_rows(features: Any) -> np.ndarray:
    import numpy as np

    vectors = features.detach().float().cpu().numpy().astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _model(model_dir: str | Path) -> Any:
    _, transformers = _libraries()
    return transformers.AutoModel.from_pretrained(str(model_dir)).eval()


def reference_image_vectors(model_dir: str | Path, images: list[Image.Image]) -> np.ndarray:
    """`get_image_features` of AutoModel on AutoImageProcessor's pixels: L2-normalised float32 rows."""
    torch, transformers = _libraries()
    model = _model(model_dir)
    processor = transformers.AutoImageProcessor.from_pretrained(str(model_dir))
    inputs = processor(images=images, return_tensors="pt")
    with torch.inference_mode():
        return _unit_rows(_features(model.get_image_features(**inputs)))


def text_inputs(model_dir: str | Path, texts: list[str]) -> Any:
    """AutoTokenizer's batch as each model's card has it: CLIP padded to the longest text,
    SigLIP to max_length (the text tower's positions), both truncated."""
    _, transformers = _libraries()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    config = transformers.AutoConfig.from_pretrained(str(model_dir))
    if config.model_type.startswith("siglip"):
        length = config.text_config.max_position_embeddings
        return tokenizer(texts, padding="max_length", max_length=length, truncation=True, return_tensors="pt")
    return tokenizer(texts, padding=True, truncation=True, return_tensors="pt")


def reference_text_vectors(model_dir: str | Path, texts: list[str], *, attention_mask: bool = True) -> np.ndarray:
    """`get_text_features(**inputs)` of AutoModel on `text_inputs`: L2-normalised float32 rows.

    The tokenizer returns an attention_mask and the model card passes it on. CLIP's vectors do not
    depend on it (causal attention, pooled at the first <|endoftext|>, before any padding); SigLIP's
    do: its text tower attends both ways and pools at the last position, a pad for a short text.
    SigLIP was trained with no mask (big_vision, open_clip): `attention_mask=False` drops it."""
    torch, _ = _libraries()
    model = _model(model_dir)
    inputs = dict(text_inputs(model_dir, texts))
    if not attention_mask:
        inputs.pop("attention_mask", None)
    with torch.inference_mode():
        return _unit_rows(_features(model.get_text_features(**inputs)))
