"""Compressed inputs read transparently: `notes.txt.gz`, `page.html.bz2`, `log.xz`, `doc.md.zst`.

A file whose name ends in a compression suffix is an input when the name without it is one (or is
extensionless text); its bytes are inflated in the reader, under the limits every input has: the
inflated text may not pass --max-file-mb (a "too large" skip, as for a file that large), and a file
that inflates over MAX_RATIO times once past RATIO_FROM is refused as a bomb before it is whole (the
bound the zip containers share: inputs/extract/_zip.py). The row's `path` stays the compressed file's.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib

from gpucli.core.errors import InputError
from gpucli.core.stages import SkipReason, Stage

SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
MAX_RATIO = 200  # an inflation past this many times its input, once past RATIO_FROM, is a bomb (zip members too)
RATIO_FROM = 8 << 20  # small inputs may compress as they like: they cannot hurt
STEP = 1 << 20  # bytes inflated at a time: a bomb is stopped within one step of its bound


def inner_name(path: str) -> str:
    """`path` without its compression suffix (`a/notes.txt.gz` -> `a/notes.txt`); `path` itself else."""
    lower = path.lower()
    for suffix in SUFFIXES:
        if lower.endswith(suffix) and len(path) > len(suffix):
            return path[: -len(suffix)]
    return path


def is_compressed(path: str) -> bool:
    return inner_name(path) != path


def inflate(path: str, data: bytes, max_bytes: int) -> bytes:
    """The inflated bytes of a compressed input, or an InputError: not valid (decode), a bomb (decode),
    or inflating past `max_bytes` (a skip, too large)."""
    suffix = path[len(inner_name(path)):].lower()
    bound = max(RATIO_FROM, len(data) * MAX_RATIO)
    try:
        out = _inflate(suffix, data, min(max_bytes, bound) + 1)
    except Exception as exc:  # noqa: BLE001 - zlib, bz2, lzma, zstandard: each its own error; one file's failure
        raise InputError(Stage.DECODE, f"not a valid {suffix[1:]} file ({exc})") from None
    if len(out) > max_bytes:
        raise InputError(Stage.SKIP, f"inflates to over --max-file-mb {max_bytes / 2**20:g} MiB; raise the limit to "
                                     "read it", cause=SkipReason.TOO_LARGE)
    if len(out) > bound:
        raise InputError(Stage.DECODE, f"decompression bomb refused: {len(data):,} bytes inflate past "
                                       f"{MAX_RATIO}x (the bound); stopped there")
    return out


def head(path: str, size: int) -> bytes:
    """The first `size` inflated bytes of a compressed file (for sniffing whether it holds text)."""
    with open(path, "rb") as file:
        data = file.read(max(size, 1 << 16))  # a few KB of a compressed text inflate past `size`
    try:
        return _inflate(path[len(inner_name(path)):].lower(), data, size)
    except Exception:  # noqa: BLE001 - a sniff: the head read ended inside the stream, or it is not one
        return _partial(path, data, size)


def _partial(path: str, data: bytes, size: int) -> bytes:
    """What a stream cut short inflates to (the head read ended inside it)."""
    suffix = path[len(inner_name(path)):].lower()
    try:
        if suffix == ".gz":
            return zlib.decompressobj(wbits=47).decompress(data, size)
        if suffix == ".bz2":
            return bz2.BZ2Decompressor().decompress(data, size)
        if suffix == ".xz":
            return lzma.LZMADecompressor().decompress(data, size)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
        pass
    return b""


def _inflate(suffix: str, data: bytes, limit: int) -> bytes:
    """Up to `limit` bytes of the inflated stream (every member of a multi-member .gz / .bz2 / .xz)."""
    if suffix == ".zst":
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
            return reader.read(limit)
    out = bytearray()
    rest = data
    while rest and len(out) < limit:
        d = zlib.decompressobj(wbits=47) if suffix == ".gz" else bz2.BZ2Decompressor() if suffix == ".bz2" \
            else lzma.LZMADecompressor()
        feed = rest
        while not d.eof and len(out) < limit:
            piece = d.decompress(feed, min(STEP, limit - len(out)))
            out += piece
            feed = d.unconsumed_tail if suffix == ".gz" else b""
            if not piece and (not feed if suffix == ".gz" else d.needs_input):
                break  # the input is spent before the stream's end
        if len(out) >= limit:
            break
        if not d.eof:
            raise EOFError("the compressed stream ends early")
        rest = d.unused_data
    return bytes(out[:limit])
