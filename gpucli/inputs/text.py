"""Bytes -> str for text files: UTF-8 first, then charset detection, never garbage.

UTF-8 (with or without BOM) and UTF-16/32 with a BOM decode directly; anything else goes
to charset-normalizer (GB18030/GBK, Big5, Shift-JIS, Latin-1, UTF-16 without BOM...).
Binary content (images, archives, executables named .txt) is refused: embedding it would
give garbage vectors that look like data.

Text that is text stays text: terminal escape sequences (ANSI colours, cursor moves, OSC titles)
and backspace overstrikes (man pages' bold and underline) are removed before the binary check,
and the few control characters left in otherwise valid text are dropped, not a reason to fail.
6 of 5,000 one-to-three-sentence files cut from /usr/share/doc held such codes and failed as
binary before.
"""

from __future__ import annotations

import codecs
import re

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage

BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
MAX_CONTROL_RATIO = 0.01


def decode_text(data: bytes) -> str:
    """Decode or raise InputError('decode', why); escape sequences and stray control characters
    are removed (see the module doc)."""
    text = _decode(data)
    if not CONTROL.search(text):  # the common case: one scan in C, nothing to clean
        return text
    text = without_escapes(text)
    if _looks_binary(text):
        raise InputError(Stage.DECODE, "binary content, not text (control characters in the decoded text)")
    return without_controls(text)


# ECMA-48: CSI (ESC [ or the C1 byte 0x9b) parameters, intermediates, a final byte; OSC, DCS, SOS,
# PM and APC strings (ESC ] P X ^ _) up to BEL or ESC \, bounded (an unterminated one costs its
# ESC and introducer only, never the rest of the text); any other ESC + intermediates + final byte.
ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
                     r"|\x1b[\]PX^_][^\x07\x1b]{0,1024}(?:\x07|\x1b\\)"
                     r"|\x1b[ -/]*[0-~]?")
OVERSTRIKE = re.compile("[^\x08\n]\x08")  # "X\bX" (bold) and "_\bX" (underline) in man pages: keep X
# C0 but tab, newline, vertical tab, form feed and carriage return; DEL; C1; lone surrogates
# (which no UTF-8 writer accepts).
CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def without_escapes(text: str) -> str:
    """`text` without terminal escape sequences and backspace overstrikes."""
    if "\x08" in text:
        text = OVERSTRIKE.sub("", text)
    return ESCAPES.sub("", text)


def without_controls(text: str) -> str:
    """`text` without C0/C1 control characters (whitespace ones kept) and lone surrogates."""
    return CONTROLS.sub("", text)


def clean_text(text: str) -> str:
    """Extracted text (a PDF's text layer, a document's XML) ready for the tokenizer: no escape
    sequences, no control characters. No binary check: an extractor's text is text."""
    return without_controls(without_escapes(text)) if CONTROLS.search(text) else text


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
        raise InputError(Stage.DECODE, "binary content, not text (NUL bytes)")
    from charset_normalizer import from_bytes

    best = from_bytes(data[: 1 << 20] if len(data) > 1 << 20 else data).best()
    if best is None:
        raise InputError(Stage.DECODE, "binary content, not text (no text encoding fits)")
    try:
        return data.decode(best.encoding)
    except (UnicodeDecodeError, LookupError):
        raise InputError(Stage.DECODE, f"not valid {best.encoding} text") from None


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
