"""Document extraction: bytes of a PDF, DOCX, PPTX, ODT/ODP, EPUB, HTML, XML, RTF, notebook or
e-mail -> plain text with paragraph breaks (and page starts where the format has pages).

Pure and process-free: no files, no network, no subprocesses; the caller reads the bytes and
owns time limits. This module imports nothing heavy: each format's library is imported on the
first call of its extractor (`gpucli --help` must not load PDFium or lxml).

Every failure of a document, from our code or a library's, is an InputError(Stage.DECODE, reason):
a bad file or a decoder bug costs that file, never the run. MemoryError alone passes through:
the pool that runs extractors under a memory cap reports it with the cap.
"""

from __future__ import annotations

import bisect
import importlib
import importlib.metadata
import platform
from collections.abc import Callable
from dataclasses import dataclass, field

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage


@dataclass(frozen=True, slots=True)
class Document:
    """Extracted text; `pages[k]` is the offset in `text` where page (or slide) k+1 starts.

    An empty page starts where the next non-empty one does, so `pages` never decreases and
    `page_at` names the page that holds the character.
    """

    text: str
    pages: tuple[int, ...] = ()

    def page_at(self, offset: int) -> int | None:
        """1-based page holding char `offset`; None for formats without pages."""
        if not self.pages:
            return None
        return max(bisect.bisect_right(self.pages, offset), 1)


@dataclass(frozen=True, slots=True)
class LazyExtractor:
    """bytes -> Document through `module.function`, imported on first call.

    Plain data, so a Format pickles across `spawn`. Wraps every failure into InputError and
    refuses an empty result, so calling `fmt.extract(data)` is as safe as `extract(fmt, data)`.
    """

    label: str
    module: str
    function: str
    library: str

    def __call__(self, data: bytes) -> Document:
        try:
            run = getattr(importlib.import_module(self.module), self.function)
        except ImportError as error:
            raise InputError(Stage.DECODE, f"{self.label} files need {self.library} ({error}): "
                                       f"pip install {self.library}") from None
        try:
            document = run(data)
        except (InputError, MemoryError):
            raise  # MemoryError: the caller's memory cap (gpucli/inputs/documents/sandbox.py) names the bound, not the file
        except Exception as error:  # a library's bug or a broken file: one failure, not the run
            raise InputError(Stage.DECODE, f"not a valid {self.label} file ({short_reason(error)})") from error
        if not document.text.strip():
            raise InputError(Stage.DECODE, f"no text in this {self.label} file")
        return document


def short_reason(error: BaseException, limit: int = 200) -> str:
    """'ValueError: message' cut to `limit` characters, for a failure row."""
    message = " ".join(str(error).split())
    kind = type(error).__name__
    if kind == "error":  # zlib.error, struct.error, binascii.Error...: the module says what it is
        kind = f"{type(error).__module__}.{kind}"
    reason = f"{kind}: {message}" if message else kind
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


@dataclass(frozen=True)
class Format:
    """One document format: its suffixes, the distribution that reads it, its extractor."""

    name: str
    suffixes: tuple[str, ...]
    library: str  # PyPI distribution doing the work, for extractor_versions(); "" = stdlib only
    extract: Callable[[bytes], Document] = field(repr=False)
    label: str = ""  # how reasons name it: "not a valid DOCX file (...)"


def _format(name: str, suffixes: tuple[str, ...], library: str, module: str, label: str = "") -> Format:
    label = label or name.upper()
    extractor = LazyExtractor(label, f"gpucli.inputs.extract.{module}", f"extract_{name}", library or "python")
    return Format(name, suffixes, library, extractor, label)


FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (
    _format("pdf", (".pdf",), "pypdfium2", "pdf"),
    _format("docx", (".docx",), "python-docx", "office"),
    _format("pptx", (".pptx",), "python-pptx", "office"),
    _format("odt", (".odt",), "defusedxml", "opendocument"),  # zipfile + content.xml's body
    _format("odp", (".odp",), "defusedxml", "opendocument"),
    _format("epub", (".epub",), "selectolax", "epub"),  # zipfile + OPF spine; chapters through htmltext
    _format("html", (".html", ".htm", ".xhtml"), "selectolax", "htmltext"),
    _format("xml", (".xml",), "defusedxml", "xmltext"),
    _format("rtf", (".rtf",), "striprtf", "rtf"),
    _format("ipynb", (".ipynb",), "", "notebook", "Jupyter notebook"),
    _format("eml", (".eml",), "", "eml", "e-mail"),
)}
_BY_SUFFIX: dict[str, Format] = {suffix: fmt for fmt in FORMATS.values() for suffix in fmt.suffixes}


def format_for(path: str) -> Format | None:
    """The format of `path` by its suffix (any case); None = plain text, read elsewhere."""
    name = str(path).replace("\\", "/").rsplit("/", 1)[-1].lower()
    dot = name.rfind(".")
    return _BY_SUFFIX.get(name[dot:]) if dot > 0 else None


def suffixes() -> tuple[str, ...]:
    """Every suffix of every format, lower case with the dot."""
    return tuple(_BY_SUFFIX)


def extract(fmt: Format | str, data: bytes) -> Document:
    """Extract `data` as `fmt` (a Format or its name); raises InputError('decode', reason)."""
    if isinstance(fmt, str):
        if fmt not in FORMATS:
            raise ValueError(f"unknown document format {fmt!r}; known: {', '.join(FORMATS)}")
        fmt = FORMATS[fmt]
    return fmt.extract(data)


def extractor_versions() -> dict[str, str]:
    """{"pdf": "pypdfium2 5.15.2", "eml": "python 3.11.7", ...}, without importing the libraries."""
    return {name: _version(fmt.library) for name, fmt in FORMATS.items()}


def _version(library: str) -> str:
    if not library:
        return f"python {platform.python_version()}"
    try:
        return f"{library} {importlib.metadata.version(library)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{library} not installed"
