"""Bytes -> str for text files: UTF-8 first, then charset detection, never garbage.

UTF-8 (with or without BOM) and UTF-16/32 with a BOM decode directly; anything else goes
to charset-normalizer (GB18030/GBK, Big5, Shift-JIS, Latin-1, UTF-16 without BOM...).
Binary content (images, archives, executables named .txt) is refused: embedding it would
give garbage vectors that look like data.
"""

from __future__ import annotations

import codecs
import re

from gpucli.errors import InputError

BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
MAX_CONTROL_RATIO = 0.01


def decode_text(data: bytes) -> str:
    """Decode or raise InputError('decode', why)."""
    text = _decode(data)
    if _looks_binary(text):
        raise InputError("decode", "binary content, not text (control characters in the decoded text)")
    return text


def _decode(data: bytes) -> str:
    for bom, encoding in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                break
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if b"\x00" in data[:4096] and not _utf16_like(data):
        raise InputError("decode", "binary content, not text (NUL bytes)")
    from charset_normalizer import from_bytes

    best = from_bytes(data[: 1 << 20] if len(data) > 1 << 20 else data).best()
    if best is None:
        raise InputError("decode", "binary content, not text (no text encoding fits)")
    try:
        return data.decode(best.encoding)
    except (UnicodeDecodeError, LookupError):
        raise InputError("decode", f"not valid {best.encoding} text") from None


def _utf16_like(data: bytes) -> bool:
    """UTF-16 without BOM: NULs in every other byte for ASCII-heavy text."""
    head = data[:4096]
    even, odd = head[0::2].count(0), head[1::2].count(0)
    return max(even, odd) > len(head) // 4 and min(even, odd) < len(head) // 64 + 1


# Unicode categories Cc (control, less \t \n \v \f \r), Cs (surrogates) and Co (private use):
# one regex scan in C instead of a category lookup per character (0.3 s per 20k short files).
CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff"
                     "\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


def _looks_binary(text: str) -> bool:
    sample = text[:65536]
    if not sample:
        return False
    return len(CONTROL.findall(sample)) / len(sample) > MAX_CONTROL_RATIO
