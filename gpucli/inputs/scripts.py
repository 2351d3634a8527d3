"""Which writing systems a text's letters are in: Latin, Cyrillic, Greek, Arabic, Han...

A model reads the languages it was trained on (gpucli/models/languages.py); a text mostly in a
script none of them is written in is text the model cannot read, even where its tokenizer has
pieces for every letter (an English model turns Russian into known sub-word pieces it never learnt
to read). The script of a letter is the first word of its Unicode name ("CYRILLIC SMALL
LETTER A"), with Japanese kana and Korean Hangul kept apart from Han ideographs.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

SAMPLE_CHARS = 20_000  # letters are counted in the text's first 20,000 characters: a long text's share is stable
KANA = {"HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"}
# A Han character, a kana or a Hangul syllable is a morpheme or a syllable: it counts as 3 letters, about an
# English word's worth (4.7 letters) less its space, so that "mostly" means the same in Chinese as in Russian
# (counted one each, a Chinese man page of Debian's was 30% Han beside its English option names).
WEIGHTS = {"CJK": 3, "HIRAGANA": 3, "HANGUL": 3}
KNOWN = frozenset(("LATIN", "CYRILLIC", "GREEK", "ARABIC", "HEBREW", "DEVANAGARI", "CJK", "HIRAGANA", "HANGUL", "THAI",
                   "LAO", "KHMER", "MYANMAR", "BENGALI", "TAMIL", "TELUGU", "KANNADA", "MALAYALAM", "GUJARATI",
                   "GURMUKHI", "ORIYA", "SINHALA", "GEORGIAN", "ARMENIAN", "ETHIOPIC", "TIBETAN", "THAANA"))
NAMES = {"CJK": "Han", "HIRAGANA": "Japanese kana", "KATAKANA": "Japanese kana", "KATAKANA-HIRAGANA": "Japanese kana",
         "HANGUL": "Hangul"}


@lru_cache(maxsize=8192)
def letter_script(c: str) -> str:
    """The script of one letter beyond ASCII, as its Unicode name's first word (CJK for Han)."""
    word = unicodedata.name(c, "UNKNOWN").split(" ", 1)[0]
    if word in KANA:
        return "HIRAGANA"
    if word in ("HALFWIDTH", "FULLWIDTH"):
        name = unicodedata.name(c)
        return "HIRAGANA" if "KATAKANA" in name else "HANGUL" if "HANGUL" in name else "LATIN"
    return word


@dataclass(frozen=True)
class Letters:
    """A text's letters by script (in its first SAMPLE_CHARS characters; ideographs weigh 3, see WEIGHTS)."""

    by_script: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_script.values())

    def share(self, scripts: set[str] | frozenset[str]) -> float:
        """The share of the letters in `scripts`."""
        return sum(n for s, n in self.by_script.items() if s in scripts) / self.total if self.total else 0.0

    def main(self, outside: set[str] | frozenset[str] = frozenset()) -> str:
        """The script most letters are in, not counting `outside`."""
        counted = Counter({s: n for s, n in self.by_script.items() if s not in outside})
        return counted.most_common(1)[0][0] if counted else ""


def letters(text: str) -> Letters:
    sample = text[:SAMPLE_CHARS]
    ascii_letters = sum(1 for c in sample if c.isascii() and c.isalpha()) if not sample.isascii() else None
    if ascii_letters is None:  # the common case: one C scan says there is nothing but Latin
        return Letters({"LATIN": sum(1 for c in sample if c.isalpha())})
    counts: Counter[str] = Counter({"LATIN": ascii_letters})
    for c in sample:
        if not c.isascii() and c.isalpha() and (script := letter_script(c)) in KNOWN:
            counts[script] += WEIGHTS.get(script, 1)  # not "MATHEMATICAL", "MODIFIER", "FEMININE" (ª): letters of no language
    return Letters(dict(counts))


def shown(script: str) -> str:
    """A script's name for people: Cyrillic, Han, Japanese kana, Hangul."""
    return NAMES.get(script, script.title())
