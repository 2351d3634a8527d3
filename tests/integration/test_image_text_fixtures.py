"""The tiny image-text models of tests/image_text_models.py (issue 29): each directory loads with
transformers' Auto classes and no network, its tokenizer.json gives char offsets, the reference
vectors are finite unit rows of the model's width, and the same seed builds the same model."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest

from gpucli.models.model_kind import ModelKind, model_kind
from tests.helpers import SAMPLE
from tests.image_text_models import (
    SENTENCES,
    open_like_gpucli,
    reference_image_vectors,
    reference_text_vectors,
    save_tiny_clip,
    save_tiny_siglip,
    text_inputs,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

IMAGE_NAMES = ("chelsea.png", "coffee.png", "astronaut.jpg", "chelsea_exif_rotated.jpg")
DIMS = {"clip": 16, "siglip": 32}
BUILD = {"clip": save_tiny_clip, "siglip": save_tiny_siglip}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image-text")
    return {name: build(root / name) for name, build in BUILD.items()}


@pytest.fixture(scope="module")
def images():
    return [open_like_gpucli(SAMPLE / "images" / name) for name in IMAGE_NAMES]


@pytest.fixture
def offline(monkeypatch):
    """HF_HUB_OFFLINE=1 (the flag huggingface_hub read at its import follows) and no socket connects."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise AssertionError(f"network use while loading a local model: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def unit_rows(vectors: np.ndarray, rows: int, dims: int) -> None:
    assert vectors.dtype == np.float32 and vectors.shape == (rows, dims)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_loads_with_auto_classes_offline(models, name, offline):
    path = models[name]
    assert (path / "tokenizer.json").is_file() and (path / "preprocessor_config.json").is_file()
    model = transformers.AutoModel.from_pretrained(str(path))
    processor = transformers.AutoImageProcessor.from_pretrained(str(path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    assert type(model).__name__ == {"clip": "CLIPModel", "siglip": "SiglipModel"}[name]
    assert type(processor).__name__.startswith({"clip": "CLIPImageProcessor", "siglip": "SiglipImageProcessor"}[name])
    assert tokenizer.is_fast
    text = model.config.text_config
    assert text.vocab_size >= len(tokenizer)
    assert text.pad_token_id == tokenizer.pad_token_id
    assert text.eos_token_id == tokenizer.eos_token_id
    assert tokenizer.model_max_length == text.max_position_embeddings == {"clip": 77, "siglip": 16}[name]


def test_clip_special_tokens_and_eos_pooling(models):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(models["clip"]))
    model = transformers.AutoModel.from_pretrained(str(models["clip"])).eval()
    text = model.config.text_config
    assert text.bos_token_id == tokenizer.convert_tokens_to_ids("<|startoftext|>") == tokenizer.bos_token_id
    assert text.eos_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>") != 2  # 2: the old argmax pooling
    inputs = text_inputs(models["clip"], list(SENTENCES))
    ids = inputs["input_ids"]
    assert (ids[:, 0] == text.bos_token_id).all() and (ids == text.eos_token_id).any(dim=1).all()
    with torch.inference_mode():
        out = model.text_model(**inputs)
    eos = (ids == text.eos_token_id).int().argmax(dim=1)
    torch.testing.assert_close(out.pooler_output, out.last_hidden_state[torch.arange(len(ids)), eos])
    # causal attention, pooled before the padding: the mask changes nothing
    np.testing.assert_array_equal(
        reference_text_vectors(models["clip"], list(SENTENCES)),
        reference_text_vectors(models["clip"], list(SENTENCES), attention_mask=False),
    )


def test_siglip_pads_to_max_length_and_pools_last(models):
    inputs = text_inputs(models["siglip"], list(SENTENCES))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(models["siglip"]))
    ids = inputs["input_ids"]
    assert ids.shape == (len(SENTENCES), 16) and "attention_mask" in inputs
    assert (ids[:, -1] == tokenizer.eos_token_id).all()  # </s> appended, </s> the pad
    assert tokenizer.convert_ids_to_tokens(tokenizer("a red car at night")["input_ids"]) == [
        "▁a", "▁red", "▁car", "▁at", "▁night", "</s>"]  # fmt: skip
    long = text_inputs(models["siglip"], ["a red car " * 20])["input_ids"]
    assert long.shape == (1, 16)
    # pooled at the last position whatever is there: the attention_mask changes the vector
    masked = reference_text_vectors(models["siglip"], list(SENTENCES))
    unmasked = reference_text_vectors(models["siglip"], list(SENTENCES), attention_mask=False)
    unit_rows(unmasked, len(SENTENCES), DIMS["siglip"])
    assert np.abs(masked - unmasked).max() > 1e-3


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_tokenizer_json_gives_offsets(models, name):
    tokenizer = tokenizers.Tokenizer.from_file(str(models[name] / "tokenizer.json"))
    text = "a red car at night"
    encoding = tokenizer.encode(text)
    assert encoding.ids and len(encoding.offsets) == len(encoding.ids)
    spans = [text[start:end].strip() for start, end in encoding.offsets if end > start]
    assert spans == ["a", "red", "car", "at", "night"]
    assert encoding.ids[-1] == tokenizer.token_to_id({"clip": "<|endoftext|>", "siglip": "</s>"}[name])


def test_clip_with_no_merges_is_character_level(tmp_path, images):
    path = save_tiny_clip(tmp_path / "chars", words=())
    assert (path / "merges.txt").read_text(encoding="utf-8") == "#version: 0.2\n"
    assert len(json.loads((path / "vocab.json").read_text(encoding="utf-8"))) == 512 + 2
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("a red car")["input_ids"])
    assert tokens == ["<|startoftext|>", "a</w>", "r", "e", "d</w>", "c", "a", "r</w>", "<|endoftext|>"]
    unit_rows(reference_text_vectors(path, list(SENTENCES)), len(SENTENCES), 16)
    unit_rows(reference_image_vectors(path, images[:1]), 1, 16)


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_reference_vectors_are_unit_rows(models, images, name):
    unit_rows(reference_image_vectors(models[name], images), len(images), DIMS[name])
    unit_rows(reference_text_vectors(models[name], list(SENTENCES)), len(SENTENCES), DIMS[name])


def test_open_like_gpucli_applies_exif_orientation(images):
    from PIL import Image

    with Image.open(SAMPLE / "images" / "chelsea_exif_rotated.jpg") as stored:
        assert stored.size == (300, 451)
    chelsea, rotated = images[0], images[3]
    assert rotated.mode == "RGB" and rotated.size == chelsea.size == (451, 300)


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_same_seed_same_model(models, images, tmp_path, name):
    again = BUILD[name](tmp_path / "again", seed=0)
    for file in ("tokenizer.json", "preprocessor_config.json"):
        assert (again / file).read_bytes() == (models[name] / file).read_bytes()
    np.testing.assert_array_equal(reference_image_vectors(again, images), reference_image_vectors(models[name], images))
    np.testing.assert_array_equal(
        reference_text_vectors(again, list(SENTENCES)), reference_text_vectors(models[name], list(SENTENCES))
    )
    other = BUILD[name](tmp_path / "other", seed=1)
    assert not np.allclose(
        reference_text_vectors(other, list(SENTENCES)), reference_text_vectors(models[name], list(SENTENCES))
    )


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_model_kind_is_image_text(models, name):
    kind, named = model_kind(str(models[name]))
    assert kind is ModelKind.IMAGE_TEXT
    assert named == {"clip": "CLIPModel", "siglip": "SiglipModel"}[name]


def test_the_hub_style_siglip_ships_only_its_sentencepiece_model(models, tmp_path, offline):
    """google/siglip-* on the Hub: spiece.model and SiglipTokenizer's config, no tokenizer.json;
    the same pieces as the fast tiny SigLIP, so the same ids."""
    path = save_tiny_siglip(tmp_path / "spiece", sentencepiece=True)
    assert (path / "spiece.model").is_file() and not (path / "tokenizer.json").exists()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    assert type(tokenizer).__name__ == "SiglipTokenizer" and not tokenizer.is_fast
    fast = transformers.AutoTokenizer.from_pretrained(str(models["siglip"]))
    assert tokenizer("a red car at night")["input_ids"] == fast("a red car at night")["input_ids"]
    text = transformers.AutoConfig.from_pretrained(str(path)).text_config
    assert (text.pad_token_id, text.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert tokenizer.model_max_length == text.max_position_embeddings == 16
    again = save_tiny_siglip(tmp_path / "again", sentencepiece=True)
    assert (again / "spiece.model").read_bytes() == (path / "spiece.model").read_bytes()
