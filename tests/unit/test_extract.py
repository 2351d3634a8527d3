"""gpucli.inputs.extract: each format from a real file made by a real writer, and the bad documents.

No processes, no models: every document is written in memory (or under tmp_path) by the
library people make such files with, and read back through gpucli.inputs.extract.
"""

from __future__ import annotations

import ast
import io
import pickle
import re
import struct
import sys
import sysconfig
import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from gpucli.core.errors import InputError
from gpucli.inputs.extract import FORMATS, Document, Format, extract, extractor_versions, format_for, suffixes
from gpucli.inputs.extract._zip import MAX_UNCOMPRESSED

DATA = Path(__file__).resolve().parents[1] / "data" / "docs"
NAMES = ["pdf", "docx", "pptx", "odt", "odp", "epub", "html", "xml", "rtf", "ipynb", "eml"]


def refusal(fmt: str, data: bytes) -> str:
    """The reason extract() gives for a bad document (it must be an InputError at decode)."""
    with pytest.raises(InputError) as caught:
        extract(fmt, data)
    assert caught.value.stage == "decode"
    return str(caught.value)


def assert_tidy(text: str) -> None:
    """What a paragraph-aware chunker relies on: no whitespace soup."""
    assert text == text.strip()
    assert "\n\n\n" not in text
    assert not any(line != line.rstrip() for line in text.split("\n"))


# ---------------------------------------------------------------- the interface


def test_the_registry_has_one_format_per_name_with_lower_case_dotted_suffixes():
    assert list(FORMATS) == NAMES
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        assert fmt.suffixes and all(s.startswith(".") and s == s.lower() for s in fmt.suffixes)
    assert FORMATS["html"].suffixes == (".html", ".htm", ".xhtml")
    assert len(suffixes()) == len(set(suffixes())) == sum(len(f.suffixes) for f in FORMATS.values())


def test_format_for_goes_by_suffix_in_any_case_and_plain_text_is_none():
    assert format_for("report.PDF") is FORMATS["pdf"]
    assert format_for("a/b/page.XHTML") is FORMATS["html"]
    assert format_for("dir.pdf/notes.md") is None
    assert format_for("notes.txt") is None
    assert format_for(".pdf") is None  # a dot file has no suffix, as in pathlib


def test_the_package_imports_only_the_standard_library_at_module_level():
    tree = ast.parse((Path(__file__).parents[2] / "gpucli" / "inputs" / "extract" / "__init__.py").read_text())
    imported = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    stdlib_roots = set(sys.stdlib_module_names) | {"__future__"}
    assert {name for name in imported if name.split(".")[0] not in stdlib_roots} == {"gpucli.core.errors", "gpucli.core.stages"}


def test_extractor_versions_name_the_library_and_its_version_for_each_format():
    versions = extractor_versions()
    assert list(versions) == NAMES
    assert versions["pdf"].startswith("pypdfium2 ") and versions["html"].startswith("selectolax ")
    assert versions["eml"] == versions["ipynb"] == f"python {sys.version.split()[0]}"
    assert all(not v.endswith("not installed") for v in versions.values())


def test_page_at_is_one_based_and_none_without_pages():
    document = Document("one\n\ntwo\n\nthree", (0, 5, 10))
    assert [document.page_at(i) for i in (0, 3, 4, 5, 9, 10, 14)] == [1, 1, 1, 2, 2, 3, 3]
    assert Document("text").page_at(2) is None


def test_a_format_pickles_for_spawned_workers_and_still_extracts():
    fmt = pickle.loads(pickle.dumps(FORMATS["html"]))
    assert isinstance(fmt, Format)
    assert fmt.extract(b"<p>Hello</p>").text == "Hello"


def test_an_unknown_format_name_is_a_programming_error_not_an_input_error():
    with pytest.raises(ValueError, match="unknown document format 'doc'"):
        extract("doc", b"")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("data", [b"", b"\x00\x01\x02garbage\xff\xfe" * 50, b"PK\x03\x04truncated zip",
                                  b"%PDF-1.7\n%broken", b"{\\rtf1 {", b"<<<>>>&&&;;"])
def test_garbage_of_any_format_is_an_input_error_never_a_crash(name, data):
    try:
        document = extract(name, data)
    except InputError as error:
        assert error.stage == "decode" and str(error)
    else:  # lenient formats (HTML, RTF) may find some text: it is still tidy
        assert_tidy(document.text)


# ---------------------------------------------------------------- PDF


def make_pdf(pages: list[list[str]], **canvas_options) -> bytes:
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, **canvas_options)
    for lines in pages:
        for number, line in enumerate(lines):
            pdf.drawString(72, 760 - 20 * number, line)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def test_pdf_text_is_read_page_by_page_and_each_offset_knows_its_page():
    pages = [["Chapter one", "The first page holds this line."],
             ["The second page, cafe and caf\u00e9."],
             ["Third page", "last words"]]
    document = extract("pdf", make_pdf(pages))
    assert document.text == ("Chapter one\nThe first page holds this line.\n\n"
                             "The second page, cafe and caf\u00e9.\n\n"
                             "Third page\nlast words")
    assert document.pages == (0, document.text.index("The second"), document.text.index("Third"))
    assert document.page_at(document.text.index("first page")) == 1
    assert document.page_at(document.text.index("second")) == 2
    assert document.page_at(len(document.text) - 1) == 3


def test_a_blank_pdf_page_adds_no_blank_lines_and_keeps_later_page_numbers_true():
    document = extract("pdf", make_pdf([["alpha"], [], ["gamma"]]))
    assert document.text == "alpha\n\ngamma"
    assert document.pages == (0, 7, 7)
    assert document.page_at(document.text.index("gamma")) == 3


def test_a_word_hyphenated_across_pdf_lines_is_joined_back():
    assert extract("pdf", make_pdf([["This is an exam-", "ple of a line break."]])).text == \
        "This is an example of a line break."


def test_a_pdf_of_2000_pages_is_read_with_every_page_numbered():
    document = extract("pdf", make_pdf([[f"page {n} of the long report"] for n in range(1, 2001)]))
    assert len(document.pages) == 2000
    assert document.page_at(document.text.index("page 1234 of")) == 1234
    assert document.text.endswith("page 2000 of the long report")


def test_an_encrypted_pdf_is_refused_because_it_needs_a_password():
    assert refusal("pdf", make_pdf([["secret plans"]], encrypt="hunter2")) == \
        "encrypted PDF: it needs a password; not read"


def test_a_pdf_with_only_an_owner_password_is_read():
    from reportlab.lib.pdfencrypt import StandardEncryption

    protected = make_pdf([["open to read"]], encrypt=StandardEncryption("", ownerPassword="owner", canCopy=0))
    assert extract("pdf", protected).text == "open to read"


def test_a_truncated_or_fake_pdf_is_refused_as_not_a_valid_pdf():
    pdf = make_pdf([["whole"]])
    assert refusal("pdf", pdf[: len(pdf) // 2]) == "not a valid PDF file (corrupt or truncated: PDFium cannot parse it)"
    assert refusal("pdf", b"<html>not a pdf</html>") == "not a valid PDF file (no %PDF- header)"


def test_a_scanned_pdf_without_a_text_layer_is_refused_not_ocred():
    from PIL import Image
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer)
    pdf.drawImage(ImageReader(Image.new("RGB", (60, 40), "gray")), 72, 600, 300, 200)
    pdf.rect(72, 72, 100, 100, fill=1)
    pdf.showPage()
    pdf.save()
    assert refusal("pdf", buffer.getvalue()) == "no text layer (a scanned PDF?); OCR is off: --ocr auto reads such pages (pip install 'gpucli[ocr]')"


# ---------------------------------------------------------------- zip containers


def docx_bytes(build) -> bytes:
    import docx

    document = docx.Document()
    build(document)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def deflated_zeros(name: str, mib: int) -> bytes:
    """A real zip bomb: `mib` MiB of zeros deflated from a generator (about 1,000x)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, archive.open(name, "w") as member:
        chunk = bytes(1 << 20)
        for _ in range(mib):
            member.write(chunk)
    return buffer.getvalue()


def declaring(data: bytes, size: int) -> bytes:
    """The one-member zip `data`, its member's uncompressed size declared as `size` (headers patched)."""
    patched = bytearray(data)
    struct.pack_into("<I", patched, 22, size)  # local header at offset 0
    struct.pack_into("<I", patched, patched.rfind(b"PK\x01\x02") + 24, size)  # central directory
    return bytes(patched)


@pytest.mark.parametrize("name", ["docx", "pptx", "odt", "odp", "epub"])
def test_a_zip_format_that_is_not_a_zip_says_so(name):
    assert refusal(name, b"This is plain text named like a document.") == \
        f"not a valid {name.upper()} file (not a zip archive)"


@pytest.mark.parametrize("name", ["docx", "pptx"])
def test_a_password_protected_office_file_is_named_as_such(name):
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)  # Office wraps an encrypted package in OLE
    assert refusal(name, ole) == (f"not a valid {name.upper()} file (an OLE compound file: a password-protected "
                                  "document, or a legacy .doc/.ppt renamed); not read")


def test_a_zip_bomb_named_docx_is_refused_for_its_ratio_before_inflating():
    bomb = deflated_zeros("word/document.xml", 64)
    assert len(bomb) < 200_000
    reason = refusal("docx", bomb)
    assert reason.startswith("zip bomb refused: 'word/document.xml' declares 64 MiB from ")
    assert reason.endswith("the bound is 200x); nothing was inflated")


@pytest.mark.parametrize("name", ["docx", "pptx", "odt", "odp", "epub"])
def test_a_zip_declaring_1_gib_is_refused_for_its_size_before_inflating(name):
    bomb = declaring(deflated_zeros("content.xml", 1), 1 << 30)
    assert zipfile.ZipFile(io.BytesIO(bomb)).infolist()[0].file_size == 1 << 30
    assert refusal(name, bomb) == ("zip bomb refused: its members declare 1,024 MiB uncompressed "
                                   f"(the bound is {MAX_UNCOMPRESSED >> 20} MiB); nothing was inflated")


def test_a_zip_that_is_not_a_docx_inside_is_refused_with_the_librarys_reason():
    reason = refusal("docx", zip_of({"hello.txt": b"hi"}))
    assert reason.startswith("not a valid DOCX file (") and reason.endswith(")")


# ---------------------------------------------------------------- DOCX and PPTX


def test_docx_reads_headings_paragraphs_lists_and_tables_in_document_order():
    def build(document):
        document.add_heading("Annual report", 0)
        paragraph = document.add_paragraph("Sales grew in ")
        paragraph.add_run("every").bold = True
        paragraph.add_run(" region.")
        document.add_heading("Regions", level=1)
        document.add_paragraph("North", style="List Bullet")
        document.add_paragraph("South", style="List Bullet")
        table = document.add_table(rows=2, cols=2)
        for row, values in enumerate([("Region", "Growth"), ("North", "12%")]):
            for column, value in enumerate(values):
                table.cell(row, column).text = value
        document.add_paragraph("After the table.")

    document = extract("docx", docx_bytes(build))
    assert document.text == ("Annual report\n\nSales grew in every region.\n\nRegions\n\n"
                             "North\nSouth\n\nRegion\tGrowth\nNorth\t12%\n\nAfter the table.")
    assert document.pages == () and document.page_at(0) is None


def test_a_merged_docx_cell_is_read_once():
    def build(document):
        table = document.add_table(rows=1, cols=3)
        table.cell(0, 0).text, table.cell(0, 2).text = "wide", "narrow"
        table.cell(0, 0).merge(table.cell(0, 1))

    assert extract("docx", docx_bytes(build)).text == "wide\tnarrow"


def test_a_docx_without_text_is_refused_as_empty():
    assert refusal("docx", docx_bytes(lambda document: None)) == "no text in this DOCX file"


def test_pptx_slides_are_pages_with_titles_bullets_and_tables():
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    first.shapes.title.text = "Plan"
    body = first.placeholders[1].text_frame
    body.text = "Hire"
    body.add_paragraph().text = "Ship"
    presentation.slides.add_slide(presentation.slide_layouts[6])  # an empty slide
    third = presentation.slides.add_slide(presentation.slide_layouts[5])
    third.shapes.title.text = "Numbers"
    table = third.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(2)).table
    for (row, column), value in {(0, 0): "Q1", (0, 1): "Q2", (1, 0): "10", (1, 1): "20"}.items():
        table.cell(row, column).text = value
    buffer = io.BytesIO()
    presentation.save(buffer)

    document = extract("pptx", buffer.getvalue())
    assert document.text == "Plan\n\nHire\nShip\n\nNumbers\n\nQ1\tQ2\n10\t20"
    assert document.pages == (0, document.text.index("Numbers"), document.text.index("Numbers"))
    assert document.page_at(document.text.index("Ship")) == 1
    assert document.page_at(document.text.index("Q2")) == 3


# ---------------------------------------------------------------- OpenDocument


def test_odt_reads_headings_spans_lists_tables_and_spacing_in_order():
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, LineBreak, List, ListItem, P, S, Span, Tab

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Minutes"))
    paragraph = P(text="We met on ")
    paragraph.addElement(Span(text="Monday"))
    paragraph.addText(" and agreed.")
    document.text.addElement(paragraph)
    items = List()
    for word in ("alpha", "beta"):
        item = ListItem()
        item.addElement(P(text=word))
        items.addElement(item)
    document.text.addElement(items)
    table = Table()
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for values in (("Name", "Vote"), ("Ann", "yes")):
        row = TableRow()
        table.addElement(row)
        for value in values:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
    document.text.addElement(table)
    spaced = P(text="a")
    for element, text in ((S(c=3), "b"), (Tab(), "c"), (LineBreak(), "d")):
        spaced.addElement(element)
        spaced.addText(text)
    document.text.addElement(spaced)
    buffer = io.BytesIO()
    document.write(buffer)

    assert extract("odt", buffer.getvalue()).text == ("Minutes\n\nWe met on Monday and agreed.\n\nalpha\nbeta\n\n"
                                                      "Name\tVote\nAnn\tyes\n\na   b\tc\nd")


def test_odp_slides_are_pages():
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import MasterPage, PageLayout
    from odf.text import P

    presentation = OpenDocumentPresentation()
    layout = PageLayout(name="layout")
    presentation.automaticstyles.addElement(layout)
    master = MasterPage(name="master", pagelayoutname=layout)
    presentation.masterstyles.addElement(master)
    for lines in (["Welcome", "to the talk"], [], ["Questions?"]):
        page = Page(masterpagename=master)
        presentation.presentation.addElement(page)
        frame = Frame(width="20cm", height="5cm", x="1cm", y="1cm")
        page.addElement(frame)
        box = TextBox()
        frame.addElement(box)
        for line in lines:
            box.addElement(P(text=line))
    buffer = io.BytesIO()
    presentation.write(buffer)

    document = extract("odp", buffer.getvalue())
    assert document.text == "Welcome\n\nto the talk\n\nQuestions?"
    assert document.pages == (0, 22, 22)
    assert document.page_at(document.text.index("Questions")) == 3


MEETING_NOTES = ("Harbour Committee Minutes\n\nAda Writer\n\nAttendance\n\n"
                 "The committee met on Monday in the old boathouse; see the harbour site.\n\n"
                 "Ann Lee, chair\nBo Chen, treasurer\nBo also keeps the tide tables.\n"
                 "Approve the budget\nRepair the north pier\n\nBudget\n\nItem\tCost\nPaint\t120\nRope\t45\n\n"
                 "The pier must be safe before the summer regatta.\n\ntotal = 120 + 45\n\n"
                 "The lighthouse keeper sent apologies.")


def test_an_odt_made_by_pandoc_is_read_whole_in_document_order():
    """pandoc indents its XML (office:body's first child is white space, not office:text) and
    declares namespaces after line ends: odfpy's loader read both of pandoc's ODTs as empty."""
    document = extract("odt", (DATA / "meeting-notes.pandoc.odt").read_bytes())
    assert document.text == MEETING_NOTES  # the footnote is left out, as LibreOffice's are
    assert document.pages == ()


def test_an_odt_made_by_libreoffice_reads_sections_indexes_and_text_boxes_in_order():
    text = extract("odt", (DATA / "field-report.libreoffice.odt").read_bytes()).text
    assert text == ("Field Report\n\nField Report\n\nFindings\n\nFindings\n\n"  # the heading, the index's body
                    "The survey counted forty-two seals on the north beach.\n\n"
                    "A second paragraph  with two extra spaces.\n\n"
                    "Sidebar: the weather was calm.\n\n"  # the text box anchored in it: a paragraph of its own
                    "Seals rested on the rocks\nmostly grey seals\nGulls nested nearby\n\n"
                    "Signed,\nThe survey team")
    for left_out in ("Counted at low tide", "Please add the date", "Running header", "Contents"):
        assert left_out not in text


def test_an_odp_made_by_libreoffice_has_a_page_per_slide_and_no_speaker_notes():
    document = extract("odp", (DATA / "tide-talk.libreoffice.odp").read_bytes())
    assert document.text == ("Tide Tables\n\nHarbour committee, spring\n\nAgenda\n\nApprove the budget\n"
                             "Repair the north pier\n\nCosts\n\nPaint\t120\nRope\t45\n\nQuestions?\n\n"
                             "Write to the harbour master.")
    text = document.text
    assert document.pages == (0, text.index("Agenda"), text.index("Costs"), text.index("Costs"), text.index("Questions"))
    assert "Speaker note" not in text


def test_a_password_protected_odt_is_named_as_such():
    assert refusal("odt", (DATA / "locked.libreoffice.odt").read_bytes()) == "encrypted ODT: it needs a password; not read"


def test_odt_white_space_collapses_and_shapes_in_a_paragraph_are_paragraphs_of_their_own():
    """ODF's rule (white space in character data is one space; text:s, text:tab, text:line-break
    are kept) whatever the writer's line breaks; python-odf writes the text as it is given."""
    from odf.draw import Frame, TextBox
    from odf.opendocument import OpenDocumentText
    from odf.text import P, Span

    document = OpenDocumentText()
    paragraph = P(text="  Wrapped by\n   the writer ")
    paragraph.addElement(Span(text=" across  a span."))
    frame = Frame(width="5cm", height="2cm", anchortype="as-char")
    box = TextBox()
    box.addElement(P(text="Caption in a box."))
    frame.addElement(box)
    paragraph.addElement(frame)
    paragraph.addText(" After the box.")
    document.text.addElement(paragraph)
    buffer = io.BytesIO()
    document.write(buffer)

    assert extract("odt", buffer.getvalue()).text == "Wrapped by the writer across a span. After the box.\n\nCaption in a box."


def test_an_opendocument_without_content_xml_says_so():
    assert refusal("odt", zip_of({"mimetype": b"application/vnd.oasis.opendocument.text"})) == \
        "not a valid ODT file (no content.xml in the zip)"


# ---------------------------------------------------------------- EPUB


def write_book(path: Path) -> None:
    """Two chapters with ebooklib, added to the manifest in reverse: the spine gives the order."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("test-book")
    book.set_title("A Small Book")
    book.set_language("en")
    chapters = []
    for number, body in ((1, "<p>It was a <i>dark</i> night.</p>"), (2, "<p>Morning came &amp; went.</p>")):
        chapter = epub.EpubHtml(title=f"Chapter {number}", file_name=f"chapter_{number}.xhtml", lang="en")
        chapter.content = f"<h1>Chapter {number}</h1>{body}"
        chapters.append(chapter)
    for chapter in reversed(chapters):
        book.add_item(chapter)
    book.toc = tuple(chapters)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    epub.write_epub(str(path), book)


def test_epub_chapters_are_read_in_spine_order_without_the_navigation(tmp_path):
    write_book(tmp_path / "book.epub")
    document = extract("epub", (tmp_path / "book.epub").read_bytes())
    assert document.text == "Chapter 1\n\nIt was a dark night.\n\nChapter 2\n\nMorning came & went."
    assert document.pages == ()


ENCRYPTION_XML = """<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" xmlns:enc="http://www.w3.org/2001/04/xmlenc#">
 <enc:EncryptedData><enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
  <enc:CipherData><enc:CipherReference URI="EPUB/chapter_1.xhtml"/></enc:CipherData></enc:EncryptedData>
</encryption>"""


def test_an_epub_with_encrypted_chapters_is_refused_as_drm(tmp_path):
    path = tmp_path / "book.epub"
    write_book(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("META-INF/encryption.xml", ENCRYPTION_XML)
    assert refusal("epub", path.read_bytes()) == \
        "encrypted EPUB (DRM): its chapters cannot be read without the key; not read"


def test_an_epub_with_only_obfuscated_fonts_is_read(tmp_path):
    path = tmp_path / "book.epub"
    write_book(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("META-INF/encryption.xml", ENCRYPTION_XML.replace("EPUB/chapter_1.xhtml", "EPUB/font.otf"))
    assert extract("epub", path.read_bytes()).text.startswith("Chapter 1\n\nIt was a dark night.")


def test_an_epub_without_its_container_file_is_refused():
    assert refusal("epub", zip_of({"mimetype": b"application/epub+zip"})) == \
        "not a valid EPUB file (no META-INF/container.xml in the zip)"


# ---------------------------------------------------------------- HTML


PAGE = b"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>The  Page &amp; its Title</title>
<style>p { color: red }</style><script>document.write("<p>not text</p>")</script></head>
<body>
<header><nav><a href="/">Home</a> | <a href="/about">About</a></nav><div>Site banner</div></header>
<article>
<header><h1>Real heading</h1></header>
<p>This is <b>bold</b> text with <a href="#x">a link</a>, caf&eacute; &lt;tag&gt; &#8364;5&nbsp;now.</p>
<ul><li>one</li><li>two <em>items</em></li></ul>
<pre>  code line 1
    indented   line</pre>
<table><tr><th>Name</th><th>Age</th></tr><tr><td>Ann</td><td>31</td></tr></table>
<p>Line one<br>Line two</p>
<noscript>Please enable JavaScript</noscript><aside>Advertisement</aside>
<form><label>Search</label><input value="q"></form><iframe src="x"></iframe>
<svg><text>chart label</text></svg><template><p>hidden</p></template>
</article>
<footer>Copyright 2026</footer>
<div>An unclosed paragraph <p>then an open p with a <span>span that never ends
"""


def test_html_keeps_the_readable_text_and_drops_scripts_styles_and_page_furniture():
    document = extract("html", PAGE)
    assert document.text == (
        "The Page & its Title\n\n"
        "Real heading\n\n"
        "This is bold text with a link, caf\u00e9 <tag> \u20ac5 now.\n\n"
        "one\ntwo items\n\n"
        "  code line 1\n    indented   line\n\n"
        "Name\tAge\nAnn\t31\n\n"
        "Line one\nLine two\n\n"
        "An unclosed paragraph\n\n"
        "then an open p with a span that never ends")
    assert document.pages == ()
    for dropped in ("not text", "Home", "banner", "enable JavaScript", "Advertisement", "Search", "chart label",
                    "hidden", "Copyright", "color"):
        assert dropped not in document.text


def test_xhtml_self_closed_tags_do_not_swallow_the_page():
    page = (b'<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><head><title/>'
            b'<script src="a.js"/></head><body><p>Hello</p><a id="x"/><p>world<br/>again</p><div/><p>end</p>'
            b"</body></html>")
    assert extract("html", page).text == "Hello\n\nworld\nagain\n\nend"


def test_a_title_repeated_as_the_first_heading_is_given_once():
    assert extract("html", b"<title>Tides</title><h1>Tides</h1><p>Twice a day.</p>").text == "Tides\n\nTwice a day."


def test_html_inline_elements_do_not_break_a_sentence():
    assert extract("html", b"<p>This is <b>bold</b> text, <i>it</i><code>al</code>ic and <span>one</span>.</p>").text \
        == "This is bold text, italic and one."


def test_html_table_cells_are_tab_separated_and_an_empty_cell_keeps_its_column():
    table = b"<table><tr><th>Name</th><th>Age</th></tr><tr><td></td><td>31</td></tr><tr><td> </td><td></td></tr></table>"
    assert extract("html", table).text == "Name\tAge\n\t31"


def test_html_in_a_declared_legacy_charset_is_decoded_by_its_meta_tag():
    page = '<html><head><meta charset="windows-1251"></head><body><p>Привет, мир</p></body></html>'
    assert extract("html", page.encode("cp1251")).text == "Привет, мир"
    latin = '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><p>Grüße – ok</p>'
    assert extract("html", latin.encode("cp1252")).text == "Grüße – ok"  # as browsers: latin-1 means cp1252


def test_html_with_a_bom_is_decoded_by_it():
    assert extract("html", "<p>ünïcödé</p>".encode("utf-16")).text == "ünïcödé"


def test_html_nested_ten_thousand_deep_is_walked_without_recursion():
    page = b"<body>" + b"<div><span>deep " * 10_000 + b"end"
    text = extract("html", page).text
    assert text.startswith("deep\n\ndeep") and text.endswith("deep end")


def test_an_html_page_with_only_scripts_has_no_text():
    assert refusal("html", b"<html><head><script>x()</script></head><body><nav>menu</nav></body></html>") == \
        "no text in this HTML file"


def test_binary_content_named_html_is_refused():
    assert refusal("html", bytes(range(256)) * 20).startswith("binary content, not text")


@pytest.mark.parametrize("opened", ["<title>Notes", "<textarea>draft", "<script>var x = 1;", "<style>p { }",
                                    "<xmp>", "<iframe src=x>", "<noembed>", "<noframes>", "<plaintext>", "<!-- note"])
def test_an_element_of_raw_text_never_closed_ends_at_the_next_tag_and_no_markup_is_text(opened):
    """The HTML5 parser reads such content as text up to its own end tag: an unclosed <title>
    made the page its title, markup and all; an unclosed <script> hid the page."""
    page = (f"<html><head>{opened}<body><div class=x><p>Hello <b>bold</b> <a href='#'>link</a>"
            "<table><tr><td>a<td>b</table><span>end").encode()
    text = extract("html", page).text
    assert "<" not in text
    assert text.endswith("Hello bold link\n\na\tb\n\nend")


def test_script_and_title_written_self_closed_in_html_do_not_swallow_the_page():
    page = b'<html><head><title/><script src="a.js"/><style/></head><body><p>Body text</p><script>x()</script>'
    assert extract("html", page).text == "Body text"


def test_a_less_than_sign_that_starts_no_element_is_text():
    page = (b"<p>if x<y then swap; 3<4 and a < b</p><pre>#include <stdio.h>\nList<String> names;</pre>"
            b"<p>Mail <ann@example.org> today.</p><p>Word<o:p></o:p> kept</p><my-card>Card</my-card>")
    assert extract("html", page).text == ("if x<y then swap; 3<4 and a < b\n\n#include <stdio.h>\nList<String> names;\n\n"
                                          "Mail <ann@example.org> today.\n\nWord kept\n\nCard")


@pytest.mark.parametrize("tag, opened", [("nav", "<nav><a href=/>Home</a>"), ("form", "<form><input name=q>"),
                                         ("noscript", "<noscript>Use JavaScript"), ("aside", "<aside><p>Ad"),
                                         ("header", "<header><p>Site"), ("div", '<div role="navigation"><a>Home</a>')])
def test_chrome_the_page_never_closes_does_not_take_the_rest_of_the_page_with_it(tag, opened):
    page = f"<html><body>{opened}<main><h1>Tides</h1><p>The moon pulls the sea.</p></main></body></html>"
    assert extract("html", page.encode()).text.endswith("Tides\n\nThe moon pulls the sea.")
    closed = page.replace("<main>", f"</{tag}><main>")
    assert extract("html", closed.encode()).text == "Tides\n\nThe moon pulls the sea."  # closed, it is dropped


def test_a_real_page_with_every_end_tag_removed_gives_all_its_words_and_no_markup():
    """pandoc's page without one end tag (</title>, </style>, </p>, </a>, </header>...)."""
    page = (DATA / "meeting-notes.pandoc.html").read_bytes()
    whole = extract("html", page).text
    text = extract("html", re.sub(rb"</[A-Za-z][^>]*>", b"", page)).text
    assert "<" not in text and "{" not in text  # no tags, no style sheet
    assert set(whole.split()) <= set(text.split())


def test_a_real_page_cut_at_any_length_gives_only_its_own_words_and_no_markup():
    page = (DATA / "meeting-notes.pandoc.html").read_bytes()
    whole = extract("html", page).text
    open_header = extract("html", page.replace(b"</header>", b"")).text  # a cut inside it leaves it open
    words_of_page = set(whole.split()) | set(open_header.split())
    for cut in range(0, len(page), 7):
        try:
            text = extract("html", page[:cut]).text
        except InputError:  # cut before the first word
            continue
        assert "<" not in text, (cut, text)
        words = text.split()
        assert set(words[:-1]) <= words_of_page, cut  # the last word may be cut short
    assert whole.endswith("She was on duty that night.\u21a9\ufe0e")


# ---------------------------------------------------------------- XML


def test_xml_text_content_keeps_records_together_and_mixed_content_as_one_line():
    data = (b'<?xml version="1.0" encoding="UTF-8"?><library>'
            b"<book><title>Dune</title><author>Herbert</author></book>"
            b"<book><title>Emma</title><note>A <b>fine</b> novel &amp; more.</note><!-- a comment --></book>"
            b"</library>")
    assert extract("xml", data).text == "Dune\nHerbert\n\nEmma\nA fine novel & more."


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<lolz>&lol9;</lolz>"""


def test_billion_laughs_xml_is_refused_at_the_expansion_bound():
    assert refusal("xml", BILLION_LAUGHS) == ("its entities expand past the bound (100 times the document, past 8 "
                                              "MiB): not read")


def test_internal_entities_are_expanded_docbook_and_pythons_own_c14n_file():
    """Issue 52: `<!ENTITY product "gzip">` was refused as "a billion-laughs or external-entity (XXE) attack?"."""
    docbook = (b'<?xml version="1.0"?>\n<!DOCTYPE book PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" '
               b'"http://www.oasis-open.org/docbook/xml/4.5/docbookx.dtd" [\n<!ENTITY product "gzip">\n]>\n'
               b"<book><title>&product; manual</title><para>Use &product; to compress files.</para></book>")
    assert extract("xml", docbook).text == "gzip manual\nUse gzip to compress files."
    c14n = Path(sysconfig.get_paths()["stdlib"]) / "test" / "xmltestdata" / "c14n-20" / "inC14N5.xml"
    assert refusal("xml", c14n.read_bytes()) == ("it uses the external entity 'world.txt', which is never fetched, "
                                                 "so its text is not whole: not read")


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("TOP-SECRET-7f3a")
    return path


def test_xxe_naming_a_local_file_is_refused_and_the_file_never_read(secret_file):
    attack = (f'<?xml version="1.0"?><!DOCTYPE note [<!ENTITY xxe SYSTEM "{secret_file.as_uri()}">]>'
              "<note>before &xxe; after</note>").encode()
    reason = refusal("xml", attack)
    assert reason.startswith("it uses the external entity") and "never fetched" in reason
    assert "TOP-SECRET" not in reason


def test_xxe_through_a_parameter_entity_or_an_external_dtd_never_reads_the_file(secret_file):
    parameter = (f'<?xml version="1.0"?><!DOCTYPE note [<!ENTITY % remote SYSTEM "{secret_file.as_uri()}"> %remote;]>'
                 "<note>text</note>").encode()
    assert extract("xml", parameter).text == "text"  # the parameter entity is never fetched nor expanded
    external_dtd = f'<?xml version="1.0"?><!DOCTYPE note SYSTEM "{secret_file.as_uri()}"><note>text</note>'.encode()
    try:
        text = extract("xml", external_dtd).text
    except InputError as error:
        text = str(error)
    assert "TOP-SECRET" not in text


def test_malformed_xml_is_refused_with_the_parsers_position():
    assert refusal("xml", b"<a><b>text</a>").startswith("not well-formed XML (mismatched tag: line 1, column ")


# ---------------------------------------------------------------- RTF


def test_rtf_made_by_pandoc_reads_as_paragraphs_a_list_and_a_table():
    document = extract("rtf", (DATA / "field-notes.rtf").read_bytes())
    assert document.text == (
        "Field notes\n\n"
        "The river was high this spring, and the old bridge held.\n\n"
        "We counted three kinds of birds:\n\n"
        "\u2022\therons\n\u2022\tkingfishers\n\u2022\tcaf\u00e9 owls\n\n"
        "Day\tCount\nMonday\t12\nTuesday\t9\n\n"
        "Last paragraph, with an em dash \u2014 and \u201cquotes\u201d.")


def test_a_file_that_is_not_rtf_says_so():
    assert refusal("rtf", b"plain words") == "not a valid RTF file (it does not start with {\\rtf)"


# ---------------------------------------------------------------- notebooks


def test_a_notebook_gives_markdown_and_code_sources_in_order_without_outputs():
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Analysis\n\nWe load the data."),
        nbformat.v4.new_code_cell("import math\nprint(math.pi)",
                                  outputs=[nbformat.v4.new_output("stream", text="3.14159 OUTPUT")]),
        nbformat.v4.new_raw_cell("raw cell"),
        nbformat.v4.new_markdown_cell("Done."),
    ]
    document = extract("ipynb", nbformat.writes(notebook).encode())
    assert document.text == "# Analysis\n\nWe load the data.\n\nimport math\nprint(math.pi)\n\nDone."


def test_a_notebook_that_is_not_json_says_so():
    assert refusal("ipynb", b"{cells: [").startswith("not a valid Jupyter notebook file (not JSON: ")


# ---------------------------------------------------------------- e-mail


def make_mail(subject: str = "Quarterly numbers \u2014 caf\u00e9") -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = "Ann Lee <ann@example.com>"
    message["To"] = "bob@example.com"
    message["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    return message


def test_an_email_gives_its_headers_then_the_plain_text_without_attachments():
    message = make_mail()
    message.set_content("Hi Bob,\n\nThe numbers are in.\n\nAnn")
    message.add_alternative("<p>Hi Bob, the <b>HTML</b> copy</p>", subtype="html")
    message.add_attachment(b"ATTACHED secret text", maintype="text", subtype="plain", filename="notes.txt")
    message.add_attachment(b"%PDF-1.4 binary", maintype="application", subtype="pdf", filename="a.pdf")

    document = extract("eml", message.as_bytes())
    assert document.text == ("Subject: Quarterly numbers \u2014 caf\u00e9\nFrom: Ann Lee <ann@example.com>\n"
                             "To: bob@example.com\nDate: Tue, 01 Dec 2026 10:00:00 +0000\n\n"
                             "Hi Bob,\n\nThe numbers are in.\n\nAnn")


def test_an_html_only_email_is_read_through_the_html_extractor():
    message = make_mail("Newsletter")
    message.set_content("<html><body><p>Hello <i>there</i>.</p><script>track()</script></body></html>", subtype="html")
    assert extract("eml", message.as_bytes()).text.endswith("\n\nHello there.")


def test_bytes_without_headers_are_not_an_email():
    assert refusal("eml", b"just some words\nand more") == "not a valid e-mail file (no headers)"


def test_a_real_docx_damaged_mid_file_costs_that_file_with_the_librarys_reason():
    data = bytearray(docx_bytes(lambda document: document.add_paragraph("words " * 2000)))
    start = data.index(b"word/document.xml") + 40  # inside the deflated body of the member
    data[start:start + 64] = bytes(64)
    reason = refusal("docx", bytes(data))
    assert reason.startswith("not a valid DOCX file (") and len(reason) < 260


def test_html_landmarks_of_a_sites_chrome_and_hidden_elements_are_dropped():
    """Sphinx and PyData pages put navigation in div role="navigation", not <nav>."""
    page = (b'<html><head><title>Guide</title></head><body><div role="navigation">Previous | Next</div>'
            b'<div role="search"><p>Quick search</p></div><div role="banner">Site name</div>'
            b'<p hidden>Hidden note</p><span aria-hidden="true">icon</span>'
            b'<div role="main"><p>The body of the page.</p></div><div role="contentinfo">Copyright</div></body></html>')
    assert extract("html", page).text == "Guide\n\nThe body of the page."


def test_texinfo_navigation_is_dropped_from_every_page():
    """libffi's manual (GNU Texinfo 6.8's HTML, as Debian ships it): "Next: ... Up: ..." began every chunk 0."""
    page = (DATA / "libffi-the-basics.texinfo.html").read_bytes()
    text = extract("html", page).text
    assert text.startswith("The Basics (libffi: the portable foreign function interface library)\n\n2.1 The Basics")
    assert "Next:" not in text and "Up:" not in text
    assert "ffi_prep_cif" in text


def test_docbook_navigation_tables_are_dropped():
    html = (b"<html><body><div class='navheader'><table><tr><td>Prev</td><td>Chapter 2</td><td>Next</td></tr>"
            b"</table></div><div class='chapter'><p>The chapter's own text.</p></div>"
            b"<div class='navfooter'><table><tr><td>Prev</td><td>Home</td><td>Next</td></tr></table></div>"
            b"</body></html>")
    assert extract("html", html).text == "The chapter's own text."
