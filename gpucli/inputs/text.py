"""Bytes -> str for text files: the encoding decided by evidence or refused (inputs/encodings.py),
never garbage.

Binary content (images, archives, executables named .txt) is refused: embedding it would
give garbage vectors that look like data.

Text that is text stays text: terminal escape sequences (ANSI colours, cursor moves, OSC titles)
and backspace overstrikes (man pages' bold and underline) are removed before the binary check,
and the few control characters left in otherwise valid text are dropped, not a reason to fail.
6 of 5,000 one-to-three-sentence files cut from /usr/share/doc held such codes and failed as
binary before.
"""

from __future__ import annotations

import re

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.encodings import EncodingUnknown, decode

MAX_CONTROL_RATIO = 0.01


def decode_text(data: bytes, encoding: str | None = None) -> str:
    """Decode (gpucli/inputs/encodings.py: `encoding` is the one --encoding names for this file) or
    raise InputError('decode', why); escape sequences and stray control characters are removed
    (see the module doc)."""
    text = decode(data, encoding)
    if not CONTROL.search(text):  # the common case: one scan in C, nothing to clean
        return text
    text = without_escapes(text)
    if _looks_binary(text):
        raise InputError(Stage.DECODE, "binary content, not text (control characters in the decoded text)")
    return without_controls(text)


SNIFF_BYTES = 8192  # what `looks_like_text` reads of a file


def looks_like_text(head: bytes) -> bool:
    """Whether a file whose first SNIFF_BYTES are `head` is text, as file(1) would say: it decodes
    (a UTF-8 character cut at the end of the head is no matter) and is not binary. Text whose
    encoding cannot be determined is text: read, it becomes a failure that says how to name it."""
    if not head.strip():
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 3 and len(head) >= SNIFF_BYTES:
            head = head[: exc.start]
    try:
        decode_text(head)
    except EncodingUnknown:
        return True
    except InputError:
        return False
    return True


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


# Unicode categories Cc (control, less \t \n \v \f \r), Cs (surrogates) and Co (private use):
# one regex scan in C instead of a category lookup per character (0.3 s per 20k short files).
CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff"
                     "\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


def _looks_binary(text: str) -> bool:
    sample = text[:65536]
    if not sample:
        return False
    return len(CONTROL.findall(sample)) / len(sample) > MAX_CONTROL_RATIO
