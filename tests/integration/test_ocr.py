"""OCR (issue 43, docs/ocr.md): scanned PDF pages and, with --ocr on, image files become text rows.

The scans are made as a user's scanner makes them: a real PDF with real text (reportlab) is
rendered page by page at 200 dpi (PDFium, as a scanner would see it), saved as JPEG pages in a PDF
(Pillow's PDF writer: no text layer). The OCR's text is measured against the words the test put on
each page (word recall, a floor asserted); its speed is printed, never asserted. The OCR engine is
the real one (RapidOCR's PP-OCR models from its wheel), run with the network cut.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.errors import InputError
from gpucli.inputs.documents.ocr import MAX_PIXELS, layout, ocr_image
from gpucli.inputs.documents.ocr_pages import ocr_flags, pdf_document
from tests.helpers import ROOT

pytestmark = [pytest.mark.model, pytest.mark.slow]

PAGES = [
    ["The committee met on Tuesday to review the annual budget of the harbour authority.",
     "Revenue grew by twelve percent, while spending on research rose sharply this year.",
     "Several members asked whether the new laboratory would open before the winter."],
    ["The lighthouse keeper wrote every evening about the weather and the passing ships.",
     "Storms from the west closed the harbour for nine days in the coldest month.",
     "A detailed report on repairs to the pier will follow in the spring."],
]
IMAGE_PAGE = ["Invoices received after the first of March are paid within thirty days.",
              "Questions about payments go to the finance office on the second floor."]


def text_pdf(pages: list[list[str]]) -> bytes:
    """A PDF with a real text layer, one page per list of paragraphs (reportlab, 11 pt)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    for paragraphs in pages:
        pdf.setFont("Times-Roman", 11)
        y = 780
        for paragraph in paragraphs:
            for line in textwrap.wrap(paragraph, 80):
                pdf.drawString(60, y, line)
                y -= 15
            y -= 15
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def scanned(pdf: bytes) -> list:
    """Each page as a scanner gives it: greyscale pixels at 200 dpi (PIL images)."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    try:
        return [document[k].render(scale=200 / 72, grayscale=True).to_pil().convert("L") for k in range(len(document))]
    finally:
        document.close()


def image_pdf(images: list) -> bytes:
    """Images wrapped into a PDF without a text layer (JPEG pages, as scanner software writes them)."""
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", resolution=200, save_all=True, append_images=images[1:])
    return buffer.getvalue()


def mixed_pdf(text_page: list[str], scan) -> bytes:
    """Page 1 with a text layer, page 2 a scanned image only."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    pdf.setFont("Times-Roman", 11)
    pdf.drawString(60, 780, text_page[0])
    pdf.showPage()
    pdf.drawImage(ImageReader(scan), 0, 0, *A4)
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def recall(expected: str, got: str) -> float:
    """Word recall: the share of the page's words (with their counts) that OCR gave back."""
    want = Counter(re.findall(r"\w+", expected.lower()))
    have = Counter(re.findall(r"\w+", got.lower()))
    return sum(min(n, have[w]) for w, n in want.items()) / sum(want.values())


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("ocr")
    docs = root / "docs"
    docs.mkdir()
    pages = scanned(text_pdf(PAGES))
    (docs / "scan.pdf").write_bytes(image_pdf(pages))
    (docs / "mixed.pdf").write_bytes(mixed_pdf(PAGES[0], pages[1]))
    from PIL import Image

    (docs / "blank.pdf").write_bytes(image_pdf([Image.new("L", pages[0].size, 255)]))
    (docs / "note.txt").write_text("A plain note about lighthouses and harbours.", encoding="utf-8")
    images = root / "images"
    images.mkdir()
    (images / "invoice.png").write_bytes(png(scanned(text_pdf([IMAGE_PAGE]))[0]))
    (images / "broken.png").write_bytes(png(pages[0])[:5000])  # a truncated file
    (images / "note.txt").write_text("Another plain note.", encoding="utf-8")
    (docs / "invoice.png").write_bytes((images / "invoice.png").read_bytes())  # not an input without --ocr on
    return root


def embed(*args: str):
    result = CliRunner().invoke(app, ["embed", *args, "--json", "--quiet"])
    summary = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result, summary


def failures(summary: dict) -> dict[str, dict]:
    return {r["path"]: r for r in map(json.loads, Path(summary["failures_file"]).read_text().splitlines())}


def rows(out: Path) -> list[dict]:
    return ds.dataset(str(out), format="parquet").to_table().drop_columns(["embedding"]).to_pylist()


@pytest.fixture(scope="module")
def default_run(tree):
    out = tree / "out.parquet"
    return out, *embed(str(tree / "docs"), "--out", str(out), "--ocr", "auto")


def test_with_ocr_auto_scanned_pages_are_read_by_ocr_with_their_page_and_ocr_true(default_run):
    out, result, summary = default_run
    assert result.exit_code == 1, result.stderr  # blank.pdf
    # scan, mixed, blank, note, and the image: skipped without --ocr on (issue 52: every file is accounted for)
    assert summary["inputs"] == 5 and summary["skipped_by_reason"] == {"no reader for this type": 1}
    got = [r for r in rows(out) if r["path"] == "scan.pdf"]
    assert {r["page"] for r in got} == {1, 2} and all(r["ocr"] for r in got)
    for number, paragraphs in enumerate(PAGES, start=1):
        text = " ".join(r["text"] for r in got if r["page"] == number)
        score = recall(" ".join(paragraphs), text)
        print(f"page {number}: word recall {score:.3f}")
        assert score >= 0.9, text


def test_a_page_with_a_text_layer_is_never_ocrd_and_a_scanned_page_beside_it_is(default_run):
    out, _, _ = default_run
    got = {r["page"]: r for r in rows(out) if r["path"] == "mixed.pdf"}
    assert set(got) == {1, 2}
    assert got[1]["ocr"] is False and got[1]["text"] == PAGES[0][0]  # the text layer, exactly
    assert got[2]["ocr"] is True and recall(" ".join(PAGES[1]), got[2]["text"]) >= 0.9
    assert next(r for r in rows(out) if r["path"] == "note.txt")["ocr"] is False


def test_a_blank_scan_is_a_failure_record_not_invented_text(default_run):
    _, _, summary = default_run
    record = failures(summary)["blank.pdf"]
    assert record["stage"] == "decode"
    assert "no text layer" in record["error"] and "OCR found no text" in record["error"]


def test_another_ocr_setting_on_the_same_output_is_a_changed_setting(default_run):
    out, _, _ = default_run
    result, _ = embed(str(out.parent / "docs"), "--out", str(out), "--ocr", "off")
    assert result.exit_code == 2 and "options.ocr" in result.stderr


def test_ocr_off_keeps_a_scan_a_failure_record(tree):
    docs = tree / "off"
    docs.mkdir()
    (docs / "scan.pdf").write_bytes((tree / "docs" / "scan.pdf").read_bytes())
    result, summary = embed(str(docs), "--out", str(tree / "off.jsonl"), "--ocr", "off")
    assert result.exit_code == 1 and summary["failed"] == 1
    assert failures(summary)["scan.pdf"]["error"] == "no text layer (a scanned PDF?); OCR is off: --ocr auto reads such pages (pip install 'gpucli[ocr]')"
    (docs / "note.txt").write_text("A note.", encoding="utf-8")
    result, _ = embed(str(docs), "--out", str(tree / "off.parquet"), "--ocr", "off")
    assert "ocr" not in ds.dataset(str(tree / "off.parquet"), format="parquet").schema.names  # as before OCR


def test_ocr_on_reads_image_files_and_a_broken_one_is_a_failure_record(tree):
    out = tree / "images.parquet"
    result, summary = embed(str(tree / "images"), "--out", str(out), "--ocr", "on")
    assert result.exit_code == 1, result.stderr
    assert summary["inputs"] == 3 and summary["succeeded"] == 2
    assert failures(summary)["broken.png"]["stage"] == "decode"
    got = [r for r in rows(out) if r["path"] == "invoice.png"]
    assert got and all(r["ocr"] and r["page"] == 1 for r in got)
    assert recall(" ".join(IMAGE_PAGE), " ".join(r["text"] for r in got)) >= 0.9


def test_a_file_that_is_no_image_is_a_failure_record_naming_it_not_an_object_of_ours(tree):
    """Pillow names the file object it was handed: the record said "cannot identify image file
    <_io.BytesIO object at 0x7f...>" (issue 46); it names the input."""
    odd = tree / "odd-images"
    odd.mkdir()
    (odd / "notes.png").write_text("a text file with an image's name", encoding="utf-8")
    (odd / "header.png").write_bytes(png(scanned(text_pdf([IMAGE_PAGE]))[0])[:6])  # cut inside the signature
    result, summary = embed(str(odd), "--out", str(tree / "odd.parquet"), "--ocr", "on")
    assert result.exit_code == 1 and summary["failed"] == 2, result.stderr
    records = failures(summary)
    for name in ("notes.png", "header.png"):
        assert records[name]["stage"] == "decode"
        assert records[name]["error"] == ("not a valid image file (UnidentifiedImageError: cannot identify image "
                                          f"file '{name}')"), records[name]


def test_without_ocr_on_an_image_is_not_an_input_and_with_it_is_read_as_ocr(tree):
    def formats(*flags: str) -> dict[str, str]:
        result = CliRunner().invoke(app, ["embed", str(tree / "docs"), "--out", str(tree / "dry.parquet"),
                                          "--dry-run", *flags])
        return {r["path"]: r["format"] for r in map(json.loads, result.stdout.splitlines()) if "format" in r}

    assert "invoice.png" not in formats()
    assert formats("--ocr", "on")["invoice.png"] == "ocr"


def test_ocr_runs_offline_from_the_models_in_its_wheel(tree):
    """No socket opens and RapidOCR's downloader is never called while the engine loads and reads."""
    script = f"""
import socket, sys, time
def refuse(*args, **kwargs):
    raise AssertionError("OCR tried the network")
socket.socket.connect = refuse
socket.create_connection = refuse
import rapidocr.utils.download_file as download
download.DownloadFile.run = classmethod(refuse)
from gpucli.inputs.documents.ocr import ocr_pdf_pages
data = open({str(tree / 'docs' / 'scan.pdf')!r}, "rb").read()
ocr_pdf_pages(data, [0])
start = time.perf_counter()
texts = ocr_pdf_pages(data, [0, 1])
print(f"{{2 / (time.perf_counter() - start):.2f}} pages/s", file=sys.stderr)
print(len(texts), all(texts))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "True"]
    print("OCR on one core:", done.stderr.strip())


def test_an_image_too_large_to_ocr_is_refused_before_it_is_decoded():
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("1", (9000, 9000), 1).save(buffer, format="PNG")  # 81 MP, a few KB
    with pytest.raises(InputError, match=f"at most {MAX_PIXELS:,}"):
        ocr_image(buffer.getvalue())


def test_layout_joins_boxes_into_lines_and_starts_a_paragraph_at_a_wide_gap():
    def box(left: float, top: float, width: float = 50, height: float = 20):
        return [[left, top], [left + width, top], [left + width, top + height], [left, top + height]]

    boxes = np.asarray([box(100, 10), box(10, 12), box(10, 40), box(10, 100)], dtype=np.float32)
    assert layout(boxes, ["world", "hello", "next line", "new paragraph"]) == \
        "hello world\nnext line\n\nnew paragraph"


def test_row_flags_follow_the_pages_ocr_read():
    flags = ocr_flags(np.asarray([7, 7, 8, 9]), np.asarray([1, 2, 2, 0]), {7: (2,), 8: (2,)})
    assert flags.tolist() == [False, True, True, False]


def test_a_pdf_with_nothing_to_read_says_what_was_tried():
    with pytest.raises(InputError, match="OCR needs rapidocr"):
        pdf_document([None], {}, "OCR needs rapidocr: pip install 'gpucli[ocr]'")
    with pytest.raises(InputError, match="no pages"):
        pdf_document([], {}, None)
    doc = pdf_document(["", None, "Text layer."], {1: "Read by OCR."}, None)
    assert doc.ocr_pages == (2,) and doc.page_at(doc.text.index("Read")) == 2
