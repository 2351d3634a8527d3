"""Zip containers (DOCX, PPTX, ODT, ODP, EPUB) opened safely: a zip bomb is refused from its
central directory, before one byte is inflated.

Python's zipfile stops inflating a member at its declared size (and then fails its CRC), so
bounding the declared sizes bounds memory; the ratio check refuses the classic bomb (a few KB
that declare GBs of zeros) with a clear reason even under the total bound.
"""

from __future__ import annotations

import io
import zipfile

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.compressed import MAX_RATIO, RATIO_FROM  # the one inflation bound, compressed files' too

MAX_UNCOMPRESSED = 256 << 20  # all members together: far above any real office file's XML
MAX_MEMBERS = 100_000
# Office XML deflates 5-20x, very repetitive XML up to ~100x; 1 GiB of zeros deflates ~1000x: a member past
# RATIO_FROM that inflates over MAX_RATIO times is refused (the bound compressed inputs share).

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file: Office encryption wraps OOXML in one


def open_zip(data: bytes, label: str) -> zipfile.ZipFile:
    """The archive, or InputError('decode', why) when it is not a zip or looks like a bomb."""
    if data.startswith(OLE_MAGIC):
        raise InputError(Stage.DECODE, f"not a valid {label} file (an OLE compound file: a password-protected "
                                   "document, or a legacy .doc/.ppt renamed); not read")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
        raise InputError(Stage.DECODE, f"not a valid {label} file (not a zip archive)") from None
    try:
        check_bomb(archive.infolist())
    except InputError:
        archive.close()
        raise
    return archive


def check_bomb(members: list[zipfile.ZipInfo]) -> None:
    """Refuse an archive whose declared sizes or ratios could exhaust memory when inflated."""
    if len(members) > MAX_MEMBERS:
        raise InputError(Stage.DECODE, f"zip bomb refused: {len(members):,} members (the bound is {MAX_MEMBERS:,})")
    total = sum(member.file_size for member in members)
    if total > MAX_UNCOMPRESSED:
        raise InputError(Stage.DECODE, f"zip bomb refused: its members declare {_mib(total)} uncompressed "
                                   f"(the bound is {_mib(MAX_UNCOMPRESSED)}); nothing was inflated")
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > RATIO_FROM and ratio > MAX_RATIO:
            raise InputError(Stage.DECODE, f"zip bomb refused: {member.filename!r} declares {_mib(member.file_size)} "
                                       f"from {member.compress_size:,} bytes ({ratio:,.0f}x; the bound is "
                                       f"{MAX_RATIO}x); nothing was inflated")


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB"
