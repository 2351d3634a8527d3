"""Whether the model can read a text: the share of its words' tokens that are the unknown token.

A model whose vocabulary does not cover a language turns its text into the unknown token
([UNK]): the default model knows 244 CJK characters, and on the Chinese paragraphs of this
project's seed articles a median 41% (up to 63%) of the tokens were [UNK]. Such a vector looks
like any other and means little; writing it without a word would be dishonest. So an input whose
share is over MAX_UNKNOWN_SHARE is a failure record (stage preprocess) that gives the share and
names a model that reads the language; `--allow-unknown-tokens` embeds it anyway.

The share counts only tokens that cover a letter (of any script): symbols, emoji, digits and
punctuation count neither for nor against, so an input made only of them is never refused (the
rule is about languages, and a model's [UNK] for "★" or "→" says nothing of one). Only the
unknown-token id is looked for first (a C scan of the ids): a text with no [UNK], nearly every
English text, costs nothing more. A tokenizer without an unknown token (byte-level BPE: GPT-2,
RoBERTa) can read any text; the rule never applies to it.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

# Measured with the default model (benchmarks/RESULTS-docs.md): 2,637 English files of /usr/share/doc at most
# 3.2% whole; 85,030 one-to-three-sentence pieces of them at most 20.0% (an English line naming a Chinese
# author: 3 of 15 tokens); the Chinese paragraphs of the seed articles 32% to 83%, median 69%.
MAX_UNKNOWN_SHARE = 0.20  # refused above it
MULTILINGUAL = "intfloat/multilingual-e5-small or BAAI/bge-m3"  # Hugging Face ids that read ~100 languages


@dataclass(frozen=True)
class Unknown:
    """The unknown-token rule for one tokenizer."""

    tokenizer: Any
    unk_id: int | None
    unk_token: str
    model: str

    @staticmethod
    def of(tokenizer: Any, model: str) -> Unknown:
        token = getattr(tokenizer.model, "unk_token", None) or ""
        unk_id = tokenizer.token_to_id(token) if token else None
        return Unknown(tokenizer, unk_id, token, model)

    def share(self, text: str, ids: Any, offsets: Any) -> tuple[float, int, str] | None:
        """(share of unknown tokens among the tokens that cover a letter, their count, the script
        most of them are in), or None when the text has no unknown token or no letter."""
        if self.unk_id is None or not _has(ids, self.unk_id):
            return None
        ids = np.asarray(ids)
        if len(offsets) != len(ids):  # only the ends were asked of the tokenizer: ask again, in full
            encoding = self.tokenizer.encode(text, add_special_tokens=False)
            ids, offsets = np.asarray(encoding.ids), encoding.offsets
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        letters = _covers_letter(text, offsets)
        unknown = (ids == self.unk_id) & letters
        if not letters.any() or not unknown.any():
            return None
        return float(unknown.sum() / letters.sum()), int(unknown.sum()), _script(text, offsets[unknown])

    def refusal(self, text: str, ids: Any, offsets: Any) -> str | None:
        """The failure record's reason when the model cannot read `text`, else None."""
        found = self.share(text, ids, offsets)
        if found is None or found[0] <= MAX_UNKNOWN_SHARE:
            return None
        share, _, script = found
        return (f"{share:.0%} of this text's word tokens are unknown to the model ({self.unk_token}): "
                f"{self.model} does not read its language ({script}), and its vectors would mean little. "
                f"Use a model that does, e.g. --model {MULTILINGUAL} (from the Hugging Face Hub), "
                f"or --allow-unknown-tokens to embed it anyway")


def _has(ids: Any, token: int) -> bool:
    return bool((ids == token).any()) if isinstance(ids, np.ndarray) else token in ids


def _covers_letter(text: str, offsets: np.ndarray) -> np.ndarray:
    """Per token, whether any character it covers is a letter: a prefix sum over the text's
    letters, looked up in a table of the Basic Multilingual Plane (a sort of a long document's
    characters cost a second a few MB), characters beyond it one by one."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    letter = np.zeros(len(codes), dtype=bool)
    plane = codes < 0x10000
    letter[plane] = _bmp_letters()[codes[plane]]
    for i in np.flatnonzero(~plane).tolist():
        letter[i] = chr(int(codes[i])).isalpha()
    before = np.concatenate([[0], np.cumsum(letter)])
    ends = np.clip(offsets, 0, len(codes))
    return before[ends[:, 1]] - before[ends[:, 0]] > 0


_BMP: list[np.ndarray] = []


def _bmp_letters() -> np.ndarray:
    """Whether each character of the Basic Multilingual Plane is a letter (built once: ~10 ms)."""
    if not _BMP:
        _BMP.append(np.fromiter((chr(c).isalpha() for c in range(0x10000)), dtype=bool, count=0x10000))
    return _BMP[0]


def _script(text: str, spans: np.ndarray) -> str:
    """The script most unknown tokens are written in, from the Unicode names of their first
    letters: "CJK" -> Han (Chinese/Japanese), "HANGUL" -> Hangul, "ARABIC" -> Arabic..."""
    names: Counter[str] = Counter()
    for start, end in spans[:2000].tolist():
        letter = next((c for c in text[start:end] if c.isalpha()), "")
        if letter:
            names[unicodedata.name(letter, "UNKNOWN").split()[0]] += 1
    if not names:
        return "unknown script"
    word = names.most_common(1)[0][0]
    return {"CJK": "Han: Chinese or Japanese", "HIRAGANA": "Japanese", "KATAKANA": "Japanese",
            "HANGUL": "Korean"}.get(word, word.title())
