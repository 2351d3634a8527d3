"""XML: the text content of the elements, parsed by defusedxml over the stdlib's expat (PSF).

Internal entities are ordinary XML (DocBook's `<!ENTITY product "gzip">`): they are expanded, within
expat's bound on amplification (past 8 MiB of expansion, at most 100 times the document's size; a
billion-laughs document stops there and is refused with that reason). An external entity (XXE: a
file or URL named in the DTD) is never fetched: a document that uses one is refused with a calm
one-line reason, not read with the entity left out (before, any entity declaration was
refused as "a billion-laughs or external-entity (XXE) attack?"). An external DTD is never read.

Layout without a schema: an element with text of its own (mixed content such as
<p>a <b>b</b> c</p> included) is one line; consecutive lines of one parent form a paragraph,
so the fields of a record stay together and records are separated by a blank line.
"""

from __future__ import annotations

from collections.abc import Iterator
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException, EntitiesForbidden, ExternalReferenceForbidden
from defusedxml.ElementTree import fromstring

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.layout import join_paragraphs


def extract_xml(data: bytes) -> Document:
    """The elements' text in document order; no pages."""
    return Document(join_paragraphs(_paragraphs(parse(data))))


def parse(data: bytes) -> Element:
    """The root element, or InputError with why the document is refused."""
    try:
        return fromstring(data, forbid_entities=False)
    except EntitiesForbidden as error:
        raise InputError(Stage.DECODE, f"XML entity {error.name!r} is of a kind not read") from None
    except ExternalReferenceForbidden as error:
        raise InputError(Stage.DECODE, f"it uses the external entity {error.sysid or error.pubid!r}, which is never "
                                   "fetched, so its text is not whole: not read") from None
    except DefusedXmlException as error:
        raise InputError(Stage.DECODE, f"XML refused: {error}") from None
    except ParseError as error:
        if "amplification" in str(error):
            raise InputError(Stage.DECODE, "its entities expand past the bound (100 times the document, past 8 MiB): "
                                       "not read") from None
        raise InputError(Stage.DECODE, f"not well-formed XML ({error})") from None


def _paragraphs(root: Element) -> Iterator[str]:
    lines: list[str] = []
    current = None
    for parent, text in _text_elements(root):
        if parent is not current and lines:
            yield "\n".join(lines)
            lines = []
        current = parent
        lines.append(text)
    if lines:
        yield "\n".join(lines)


def _text_elements(root: Element) -> Iterator[tuple[Element | None, str]]:
    """(parent, text) of each element with text of its own, in document order, no recursion."""
    stack: list[tuple[Element, Element | None]] = [(root, None)]
    while stack:
        element, parent = stack.pop()
        if _has_own_text(element):
            yield parent, " ".join("".join(element.itertext()).split())
        else:
            stack.extend((child, element) for child in reversed(element))


def _has_own_text(element: Element) -> bool:
    if element.text and not element.text.isspace():
        return True
    return any(child.tail and not child.tail.isspace() for child in element)
