"""EPUB: zipfile and the OPF spine, each XHTML chapter through the HTML extractor
(without its <title>, which repeats the chapter's heading).

ebooklib reads EPUBs too, but it is AGPL: never imported here (the tests use it as a writer).
The reading order is the package's: META-INF/container.xml names the .opf, whose <spine>
lists manifest ids in order. Chapters are joined by a blank line; an EPUB has no fixed pages.
XML is parsed by defusedxml (no entity expansion, no external entities); the zip is checked
for a bomb before anything is inflated.
"""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Iterator
from urllib.parse import unquote

from defusedxml import ElementTree

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract._zip import open_zip
from gpucli.inputs.extract.htmltext import decode_html, html_to_text
from gpucli.inputs.extract.layout import join_paragraphs

CONTAINER = "META-INF/container.xml"
ENCRYPTION = "META-INF/encryption.xml"
_XMLENC_NS = "{http://www.w3.org/2001/04/xmlenc#}"
_CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF_NS = "{http://www.idpf.org/2007/opf}"
CHAPTER_TYPES = {"application/xhtml+xml", "text/html"}


def extract_epub(data: bytes) -> Document:
    """The chapters' text in spine order."""
    with open_zip(data, "EPUB") as archive:
        return Document(join_paragraphs(_chapter_texts(archive)))


def _chapter_texts(archive: zipfile.ZipFile) -> Iterator[str]:
    names = spine(archive)
    if set(names) & _encrypted(archive):
        raise InputError(Stage.DECODE, "encrypted EPUB (DRM): its chapters cannot be read without the key; not read")
    for name in names:
        try:
            content = archive.read(name)
        except KeyError:
            continue  # a spine item missing from the zip: read the rest
        yield html_to_text(decode_html(content), keep_title=False)


def spine(archive: zipfile.ZipFile) -> list[str]:
    """Zip member names of the (X)HTML items of the spine, in reading order."""
    opf_path = _rootfile(archive)
    opf = _parse(archive, opf_path)
    base = posixpath.dirname(opf_path)
    manifest = {item.get("id"): item for item in opf.iter(f"{_OPF_NS}item")}
    names = []
    for itemref in opf.iter(f"{_OPF_NS}itemref"):
        item = manifest.get(itemref.get("idref"))
        if item is not None and item.get("media-type") in CHAPTER_TYPES and item.get("href"):
            names.append(posixpath.normpath(posixpath.join(base, unquote(item.get("href").split("#")[0]))))
    if not names:
        raise InputError(Stage.DECODE, "not a valid EPUB file (its spine names no XHTML chapter)")
    return names


def _encrypted(archive: zipfile.ZipFile) -> set[str]:
    """Members that META-INF/encryption.xml lists as encrypted (fonts are often obfuscated: harmless)."""
    if ENCRYPTION not in archive.namelist():
        return set()
    references = _parse(archive, ENCRYPTION).iter(f"{_XMLENC_NS}CipherReference")
    return {posixpath.normpath(unquote(ref.get("URI", ""))) for ref in references}


def _rootfile(archive: zipfile.ZipFile) -> str:
    container = _parse(archive, CONTAINER)
    for rootfile in container.iter(f"{_CONTAINER_NS}rootfile"):
        if rootfile.get("full-path"):
            return rootfile.get("full-path")
    raise InputError(Stage.DECODE, f"not a valid EPUB file ({CONTAINER} names no package file)")


def _parse(archive: zipfile.ZipFile, name: str):
    try:
        return ElementTree.fromstring(archive.read(name))
    except KeyError:
        raise InputError(Stage.DECODE, f"not a valid EPUB file (no {name} in the zip)") from None
