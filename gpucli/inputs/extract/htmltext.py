"""HTML and XHTML -> readable text with selectolax's lexbor parser (MIT; a C HTML5 parser: an
unclosed tag, a stray </p>, a bare '&' are repaired the way browsers repair them). What even a
browser would show as markup or hide with the rest of the page (an unclosed <title>, <script>
or comment, a '<' in text, an unclosed <form> or <nav>) is mended first (_htmlrepair.py).

What is not the page's own text goes first: script, style, noscript, template, svg, nav,
aside, form, iframe, the head (its <title> is kept as the first paragraph), elements whose ARIA
role is a site's chrome (navigation, banner, contentinfo, search, complementary) or that the page
hides, and a header or footer that belongs to the page rather than to an article or section. Then one walk over the
DOM: block elements (p, div, h1-h6, section, blockquote, table...) end a paragraph, li / dt /
dd / tr / br end a line, td / th are separated by a tab, and inline elements (b, i, a, span,
code, em...) add nothing, so "This is <b>bold</b> text" stays one sentence. Whitespace is
collapsed as a browser does, except in <pre>. Entities are decoded by the parser.
Also used for EPUB chapters and HTML-only e-mails.
"""

from __future__ import annotations

import codecs
import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

from gpucli.inputs.extract import Document
from gpucli.inputs.extract._htmlrepair import repair
from gpucli.inputs.extract.layout import PARAGRAPH, join_paragraphs, tidy
from gpucli.inputs.text import decode_text

REMOVED = ["script", "style", "noscript", "template", "svg", "nav", "aside", "form", "iframe", "object",
           "embed", "canvas", "head"]
# ARIA landmarks that are a site's chrome, and what the page hides: on 159 real documentation pages
# (benchmarks/RESULTS-docs.md) boilerplate 4.0% -> 0.9% of the words, body recall unchanged (0.996)
LANDMARKS = ", ".join([f'[role="{role}"]' for role in ("navigation", "banner", "contentinfo", "search",
                                                          "complementary")] + ["[hidden]", '[aria-hidden="true"]'])
# generated manuals' page navigation (`_navigation`)
TEXINFO_NAVIGATION = "div.header, div.nav-panel"
DOCBOOK_NAVIGATION = "div.navheader, div.navfooter"
NAV_WORDS = re.compile(r"(?:Next|Previous|Prev|Up|Forward|Back|Contents)\s*:")
PAGE_PARTS = ("header", "footer")  # removed unless inside one of KEEPS_PARTS: there they are content
KEEPS_PARTS = {"article", "section", "main"}
CHROME = ("nav", "aside", "form", "noscript")  # of REMOVED: dropped unless they hold the page's MAIN content
MAIN = 'main, article, [role="main"]'
# dropped with their subtree, but not when the page leaves one open: it holds the rest of the page
SUBTREES = frozenset({"noscript", "template", "svg", "nav", "aside", "form", "object", "canvas", *PAGE_PARTS})
PARAGRAPH_TAGS = {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "main", "blockquote",
                  "ul", "ol", "dl", "table", "caption", "figure", "figcaption", "address", "details", "summary",
                  "fieldset", "legend", "hr", "header", "footer", "center", "hgroup", "dialog", "menu", "body"}
LINE_TAGS = {"li", "dt", "dd", "tr", "br", "option"}
CELL_TAGS = {"td", "th"}
_SPACES = re.compile(r"\s+")
# XHTML (EPUB chapters, .xhtml) may self-close any element: <title/>, <script src="a.js"/>,
# <a id="x"/>. An HTML parser reads <title/> as an open <title> whose text is the rest of the
# file, so such tags are expanded (<title></title>) first, where the document is XML.
_XML_LIKE = re.compile(r"\A\s*<\?xml|<html[^>]+xmlns=[\"']http://www\.w3\.org/1999/xhtml", re.IGNORECASE)
_SELF_CLOSED = re.compile(r"<([A-Za-z][\w:.-]*)(\s[^<>]*?)?/>")
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_:.+-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.+-]+)["']""")
# what browsers do with these labels (the WHATWG encoding standard)
_BROWSER_CODECS = {"iso-8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252", "us-ascii": "cp1252",
                   "ascii": "cp1252", "utf-16": "utf-8", "utf-16le": "utf-8", "utf-16be": "utf-8"}


def extract_html(data: bytes) -> Document:
    """The readable text of an HTML or XHTML page; no pages."""
    return Document(html_to_text(decode_html(data)))


def decode_html(data: bytes) -> str:
    """A BOM, else the <meta charset> (or <?xml encoding?>) when it decodes, else UTF-8 or a guess."""
    if data.startswith(_BOMS):
        return decode_text(data)
    declared = _declared_encoding(data[:4096])
    if declared:
        try:
            return data.decode(_BROWSER_CODECS.get(declared.lower(), declared))
        except (LookupError, UnicodeDecodeError):
            pass  # a wrong label is common: the bytes decide
    return decode_text(data)


def _declared_encoding(head: bytes) -> str | None:
    match = _XML_ENCODING.match(head) or _META_CHARSET.search(head)
    return match.group(1).decode("ascii") if match else None


def html_to_text(html: str, keep_title: bool = True) -> str:
    """Paragraphs of the page's readable text, separated by blank lines; the <title> first
    unless `keep_title` is False (an EPUB chapter's title repeats its heading)."""
    if _XML_LIKE.search(html[:4096]):
        html = _SELF_CLOSED.sub(_expand, html)
    html, open_ones = repair(html, SUBTREES)  # what would show markup as text or hide the rest
    tree = LexborHTMLParser(html)
    title = tree.css_first("title") if keep_title else None
    title_text = " ".join(title.text().split()) if title is not None else ""
    _remove_boilerplate(tree, open_ones)
    body = tree.body if tree.body is not None else tree.root
    text = _TextWriter().walk(body) if body is not None else ""
    if text == title_text or text.startswith(title_text + "\n"):
        title_text = ""  # the page opens with its title as a heading: once is enough
    return join_paragraphs([title_text, text])


def _expand(tag: re.Match) -> str:
    name = tag.group(1)
    return tag.group(0) if name.lower() in VOID_TAGS else f"<{name}{tag.group(2) or ''}></{name}>"


def _remove_boilerplate(tree: LexborHTMLParser, open_ones: set[str]) -> None:
    """Drop what is not the page's own text. Chrome that the page leaves open (a kind in
    `open_ones`, or an element that holds the page's main content: a missing </div> put the
    article inside a role="navigation" div) loses its tags only, not its text."""
    tree.strip_tags([tag for tag in REMOVED if tag not in open_ones and tag not in CHROME], recursive=True)
    if open_ones:
        tree.unwrap_tags(sorted(open_ones))
    chrome = [tag for tag in CHROME if tag not in open_ones]
    _drop([node for node in tree.css(", ".join([*chrome, LANDMARKS])) if node.css_first(MAIN) is None])
    parts = [part for part in PAGE_PARTS if part not in open_ones]
    _drop([node for node in (tree.css(", ".join(parts)) if parts else ())
           if not _inside(node, KEEPS_PARTS) and node.css_first(MAIN) is None])
    _drop(_navigation(tree))


def _navigation(tree: LexborHTMLParser) -> list[LexborNode]:
    """The navigation generated manuals put on every page: Texinfo's "Next: ..., Previous: ..., Up: ..."
    (div.header, div.nav-panel; it began chunk 0 of every page of libffi's manual) and
    DocBook XSL's navheader / navfooter tables."""
    found = list(tree.css(DOCBOOK_NAVIGATION))
    found += [node for node in tree.css(TEXINFO_NAVIGATION) if NAV_WORDS.match(node.text(strip=True))]
    return found


def _drop(nodes: list[LexborNode]) -> None:
    """Remove each node with its subtree; one inside another gone already is left alone."""
    gone: set[int] = set()
    for node in nodes:
        if not _inside_any(node, gone):
            gone.add(node.mem_id)
            node.decompose()


def _inside_any(node: LexborNode, ids: set[int]) -> bool:
    parent = node.parent
    while ids and parent is not None:
        if parent.mem_id in ids:
            return True
        parent = parent.parent
    return False


def _inside(node: LexborNode, tags: set[str]) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag in tags:
            return True
        parent = parent.parent
    return False


class _TextWriter:
    """Collects inline text into cells, lines and paragraphs as the walk enters and leaves nodes."""

    def __init__(self) -> None:
        self.paragraphs: list[str] = []
        self.lines: list[str] = []
        self.cells: list[str] = []
        self.inline: list[str] = []

    def walk(self, root: LexborNode) -> str:
        """Depth first without recursion (a page of 10,000 unclosed <div>s nests 10,000 deep).
        About 0.7 us a node in Python: a 5 MB page of 610,000 nodes walks in 0.44 s, six times its
        parse in C (0.07 s); a 100 KB page in about 10 ms."""
        node = root.first_child
        while node is not None:
            tag = node.tag
            if tag == "-text":
                self.inline.append(node.text_content or "")
            elif self._enter(node, tag):
                child = node.first_child
                if child is not None:
                    node = child
                    continue
                self._leave(tag)
            node = self._next(node, root)
        self.end_paragraph()
        return PARAGRAPH.join(self.paragraphs)

    def _next(self, node: LexborNode, root: LexborNode) -> LexborNode | None:
        """The node after `node`'s subtree, leaving each ancestor that ends; None at root's end."""
        following = node.next
        while following is None:
            node = node.parent
            if node is None or node.mem_id == root.mem_id:
                return None
            self._leave(node.tag)
            following = node.next
        return following

    def _enter(self, node: LexborNode, tag: str) -> bool:
        """Handle the start of element `node`; True when its children are to be walked."""
        if tag == "pre":
            self.end_paragraph()
            self.paragraphs.append(tidy(node.text(deep=True)))
            return False
        if tag in PARAGRAPH_TAGS:
            self.end_paragraph()
        elif tag in LINE_TAGS:
            self.end_line()
        return not tag.startswith("-")  # comments, doctype

    def _leave(self, tag: str) -> None:
        if tag in PARAGRAPH_TAGS:
            self.end_paragraph()
        elif tag in LINE_TAGS:
            self.end_line()
        elif tag in CELL_TAGS:
            self.end_cell(keep_empty=True)

    def end_cell(self, keep_empty: bool = False) -> None:
        text = _SPACES.sub(" ", "".join(self.inline)).strip()
        self.inline.clear()
        if text or keep_empty:
            self.cells.append(text)

    def end_line(self) -> None:
        self.end_cell()
        line = "\t".join(self.cells).rstrip()  # a leading empty cell keeps its tab: columns stay put
        self.cells.clear()
        if line.strip():
            self.lines.append(line)

    def end_paragraph(self) -> None:
        self.end_line()
        if self.lines:
            self.paragraphs.append("\n".join(self.lines))
            self.lines.clear()

