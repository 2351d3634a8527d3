"""The text side of an image-text model: the tokenizer that cuts its texts into windows with
their char offsets, and what happens to texts when the model has none.

The tokenizer is the checkpoint's tokenizer.json; a SigLIP checkpoint as the Hub ships it
(spiece.model only) gets one built from its SentencePiece model (`siglip_tokenizer`, below).
A model with neither (a Chinese-CLIP or AltCLIP directory saved without tokenizer.json) still
embeds its images; each text input is a failure record that says why, and a search query is
tokenized by transformers' own tokenizer, truncated to the tower's length.

SigLIP's tokenizer as a fast one, for checkpoints that ship only its SentencePiece model
(google/siglip-* on the Hub: spiece.model, no tokenizer.json). gpucli cuts a text into windows
with each token's char offsets, which a `tokenizers` tokenizer gives and transformers' `SiglipTokenizer` (slow only: transformers has no converter for it)
does not. So one is built here from spiece.model, as transformers' `SpmConverter` builds others
(convert_slow_tokenizer.py: the pieces and their scores as a Unigram model, SentencePiece's
normalizer spec as normalizers), with SigLIP's own text canonicalisation in front. Normalizers
keep each character's alignment, so the offsets point into the text as read, punctuation and
all. Step by step, `SiglipTokenizer` (transformers 4.45-5.x) and here:

    "▁" + text.replace("▁", " ")          Replace("▁", " "); the "▁" is prepended below
    lower() (its do_lower_case, on)        Lowercase
    string.punctuation removed             Replace([punctuation], "")
    runs of whitespace -> " ", strip()     Replace([whitespace]+, " "), Strip
    SentencePiece's charsmap (NFKC),       Precompiled, Replace(spaces at either end, ""),
      extra spaces removed                   Replace(" {2,}", " ")
    the "<unk>" trick that keeps one "▁"   Prepend("▁")
    " " escaped                            Replace(" ", "▁")
    Viterbi over the pieces' scores        Unigram
    </s> appended                          TemplateProcessing "$A </s>"

The ids equal `SiglipTokenizer`'s (tests/integration/test_embed_images.py checks texts with
capitals, punctuation, odd whitespace and NFKC forms against it), except in a text that spells
a special token out: transformers splits "</s>" or "<unk>" off as that token, this reads its
letters, as every other punctuation mark (a text cannot end itself early).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import numpy as np

from gpucli.tasks.text.tokenizer import has_tokenizer_file, load_tokenizer, unbounded

SPIECE_FILE = "spiece.model"
SLOW_CLASS = "SiglipTokenizer"
UNIGRAM = 1  # sentencepiece's TrainerSpec.ModelType
EOS = "</s>"
# the characters Python's `\s` matches in SiglipTokenizer's `re.sub(r"\s+", " ", text)` (those for which
# str.isspace() holds), spelt out: tokenizers' regex engine has its own idea of `\s`
WHITESPACE = "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"


def text_tokenizer(path: str, model_type: str) -> Any | None:
    """The fast tokenizer that cuts the model's texts, or None when it has none."""
    return load_tokenizer(path) if has_tokenizer_file(path) else siglip_tokenizer(path, model_type)


def no_tokenizer(model: str) -> str:
    """Why a text input of `model` is refused (a failure record's reason)."""
    return (f"{model} has no fast tokenizer (tokenizer.json), which gpucli needs to cut a text into chunks with "
            "their char offsets; its images are embedded. Leave texts out with --include '*.jpg' (and other "
            "image globs), or save a fast tokenizer into the model directory")


def slow_query_ids(path: str, query: str, max_tokens: int) -> tuple[np.ndarray, int | None]:
    """A query's ids by transformers' own tokenizer, truncated to the tower's length, and the id it
    pads with (None: it names none)."""
    from transformers import AutoTokenizer

    slow = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ids = slow(query, truncation=True, max_length=max_tokens)["input_ids"]
    return np.asarray(ids, np.int64), slow.pad_token_id


def siglip_tokenizer(path: str, model_type: str) -> Any | None:
    """A fast tokenizer built from the SigLIP checkpoint at `path`, or None when it is not one
    that ships only `SiglipTokenizer`'s SentencePiece model (a Unigram one)."""
    config = _tokenizer_config(path)
    if model_type != "siglip" or config.get("tokenizer_class", SLOW_CLASS) != SLOW_CLASS:
        return None
    proto = _sentencepiece_model(Path(path) / SPIECE_FILE)
    if proto is None or proto.trainer_spec.model_type != UNIGRAM:
        return None
    from tokenizers import Tokenizer, models, processors

    tokenizer = Tokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=proto.trainer_spec.unk_id,
                                         byte_fallback=proto.trainer_spec.byte_fallback))
    tokenizer.normalizer = _normalizer(proto.normalizer_spec, bool(config.get("do_lower_case", True)))
    eos = tokenizer.token_to_id(EOS)
    if eos is None:
        return None
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}",
                                                             special_tokens=[(EOS, eos)])
    return unbounded(tokenizer)


def _normalizer(spec: Any, lower_case: bool) -> Any:
    """SiglipTokenizer's canonicalisation, then SentencePiece's normalizer spec (module docstring)."""
    from tokenizers import Regex, normalizers

    steps = [normalizers.Replace("▁", " ")] + ([normalizers.Lowercase()] if lower_case else [])
    steps += [normalizers.Replace(Regex(_any_of(string.punctuation)), ""),
              normalizers.Replace(Regex(_any_of(WHITESPACE) + "+"), " "), normalizers.Strip()]
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    steps.append(normalizers.Prepend("▁"))
    if spec.escape_whitespaces:
        steps.append(normalizers.Replace(" ", "▁"))
    return normalizers.Sequence(steps)


def _any_of(chars: str) -> str:
    """A regex class of `chars`, each escaped."""
    return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in chars) + "]"


def _tokenizer_config(path: str) -> dict:
    try:
        config = json.loads((Path(path) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _sentencepiece_model(file: Path) -> Any | None:
    """spiece.model's ModelProto (sentencepiece's own protobuf module), or None when unreadable."""
    if not file.is_file():
        return None
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2

    try:
        return sentencepiece_model_pb2.ModelProto.FromString(file.read_bytes())
    except (OSError, DecodeError):
        return None
