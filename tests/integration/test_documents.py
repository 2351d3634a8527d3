"""embed over a tree of documents (issue 26): PDF, DOCX, HTML and text side by side, with pages,
chunks at the text's boundaries, the unknown-token rule, and bad documents as failure records.
The files are made by real writers (reportlab, python-docx); the model is the real default one."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.records import Source
from gpucli.inputs.extract import extract
from gpucli.tasks import TaskSpec, create_task
from tests.helpers import SAMPLE

pytestmark = [pytest.mark.model, pytest.mark.slow]
DOCS = Path(__file__).resolve().parents[1] / "data" / "docs"

WORDS = ("planet orbit comet nebula gravity telescope asteroid galaxy meteor crater eclipse aurora solstice "
         "equinox quasar pulsar").split()


def sentences(seed: int, count: int) -> list[str]:
    """Plain English-like sentences (the default model reads them), different per seed."""
    out = []
    for i in range(count):
        words = [WORDS[(seed * 7 + i * 3 + k * 5) % len(WORDS)] for k in range(8 + (i % 5))]
        out.append(f"The {' '.join(words)} number {seed}-{i} ends here.")
    return out


def write_pdf(path: Path, pages: list[list[str]]) -> None:
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    style = getSampleStyleSheet()["BodyText"]
    story = []
    for number, paragraphs in enumerate(pages):
        if number:
            story.append(PageBreak())
        story.extend(Paragraph(p, style) for p in paragraphs)
    SimpleDocTemplate(str(path)).build(story)


def write_encrypted_pdf(path: Path) -> None:
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), encrypt="secret")
    c.drawString(72, 720, "Nobody reads this without the password.")
    c.save()


def write_scan_pdf(path: Path) -> None:
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path))
    c.rect(72, 72, 300, 500, fill=1)  # shapes, no text layer: what a scan looks like to a text extractor
    c.save()


def write_docx(path: Path, heading: str, paragraphs: list[str]) -> None:
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for p in paragraphs:
        document.add_paragraph(p)
    document.save(str(path))


LIGHTHOUSE = "Lighthouse keepers trimmed the wicks of their lamps and wound the clockwork every night."
HTML = """<!DOCTYPE html><html><head><title>Star charts</title>
<style>body { color: red } .x::after { content: "STYLE" }</style>
<script>var tracking = "SCRIPT"; document.write("<p>SCRIPT</p>");</script></head>
<body><nav><a href="/">NAVIGATION</a></nav>
<p>Sailors used <b>star charts</b> &amp; a sextant to find their latitude at sea.</p>
<p>The pole star stays nearly still above the north, so its height gives the latitude
<div>an unclosed paragraph and a div that never ends
"""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A tree with a three-page PDF long enough to chunk, a DOCX, an HTML page, coloured text,
    Chinese text, symbols only, and three bad PDFs; embedded once with the default model."""
    root = tmp_path_factory.mktemp("mixed") / "docs"
    root.mkdir()
    pages = [sentences(page, 22) for page in range(3)]  # each fits its page
    pages[2].insert(11, LIGHTHOUSE)  # something to search for on page 3
    write_pdf(root / "paper.pdf", pages)
    write_docx(root / "notes.docx", "Field notes", sentences(9, 4))
    (root / "charts.html").write_text(HTML, encoding="utf-8")
    (root / "build.log").write_bytes(b"\x1b[1;32mok\x1b[0m the build passed.\n\x1b[33mwarning:\x1b[0m one test "
                                     b"was skipped.\n")
    (root / "zh.txt").write_text((SAMPLE / "zh" / "giant_panda.txt").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "symbols.txt").write_text("★ → ✓ ☃ 42 + 7 = 49", encoding="utf-8")
    (root / "broken.pdf").write_bytes((root / "paper.pdf").read_bytes()[:600])
    write_encrypted_pdf(root / "locked.pdf")
    write_scan_pdf(root / "scan.pdf")
    (root / "fake.docx").write_bytes(b"this is not a zip archive at all")
    levels = "".join(f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10))  # a billion laughs
    (root / "laughs.xml").write_text(f'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">{levels}]>'
                                     '<lolz>&lol9;</lolz>', encoding="utf-8")
    out = root.parent / "out.parquet"
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--json", "--quiet"])
    return root, out, result


def rows_of(out: Path) -> list[dict]:
    return ds.dataset(str(out), format="parquet").to_table().drop_columns(["embedding"]).to_pylist()


def test_a_mixed_tree_gives_rows_for_documents_and_one_record_per_bad_one(mixed):
    root, out, result = mixed
    assert result.exit_code == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == 11 and summary["succeeded"] == 5 and summary["failed"] == 6
    assert summary["unknown_tokens"] == 1
    records = {r["path"]: r for r in map(json.loads, Path(summary["failures_file"]).read_text().splitlines())}
    assert set(records) == {"zh.txt", "broken.pdf", "locked.pdf", "scan.pdf", "fake.docx", "laughs.xml"}
    assert "not a zip" in records["fake.docx"]["error"] and "expand past the bound" in records["laughs.xml"]["error"]
    assert records["zh.txt"]["stage"] == "preprocess" and "unknown to the model" in records["zh.txt"]["error"]
    assert "multilingual-e5-small" in records["zh.txt"]["error"]
    assert "password" in records["locked.pdf"]["error"]
    assert "no text layer" in records["scan.pdf"]["error"] and "OCR" in records["scan.pdf"]["error"]
    assert records["broken.pdf"]["stage"] == "decode"
    assert {r["path"] for r in rows_of(out)} == {"paper.pdf", "notes.docx", "charts.html", "build.log", "symbols.txt"}


def test_pdf_rows_carry_their_page_and_slice_the_extracted_text(mixed):
    root, out, _ = mixed
    rows = sorted((r for r in rows_of(out) if r["path"] == "paper.pdf"), key=lambda r: r["chunk"])
    doc = extract("pdf", (root / "paper.pdf").read_bytes())
    assert len(rows) > 3 and [r["chunk"] for r in rows] == list(range(len(rows)))
    assert [r["page"] for r in rows] == sorted(r["page"] for r in rows) and {r["page"] for r in rows} == {1, 2, 3}
    for r in rows:
        assert doc.text[r["char_start"]:r["char_end"]] == r["text"]
        assert doc.page_at(r["char_start"]) == r["page"] == doc.page_at(r["char_end"] - 1)  # all of it on its page
    others = [r for r in rows_of(out) if r["path"] != "paper.pdf"]
    assert all(r["page"] is None for r in others)


def test_no_chunk_starts_or_ends_inside_a_word(mixed):
    _, out, _ = mixed
    rows = sorted((r for r in rows_of(out) if r["path"] == "paper.pdf"), key=lambda r: r["chunk"])
    doc_text = extract("pdf", (mixed[0] / "paper.pdf").read_bytes()).text
    for r in rows:
        before = doc_text[r["char_start"] - 1] if r["char_start"] else " "
        after = doc_text[r["char_end"]] if r["char_end"] < len(doc_text) else " "
        assert not (before.isalnum() and r["text"][0].isalnum()), r["text"][:30]
        assert not (after.isalnum() and r["text"][-1].isalnum()), r["text"][-30:]
    ends = [r["text"].rstrip()[-1] for r in rows[:-1]]
    assert ends.count(".") >= len(ends) - 1  # a sentence ends within every window's last tokens here


def test_html_is_its_readable_text_and_the_title(mixed):
    _, out, _ = mixed
    [row] = [r for r in rows_of(out) if r["path"] == "charts.html"]
    text = row["text"]
    assert text.startswith("Star charts")
    assert "Sailors used star charts & a sextant" in text and "never ends" in text
    for leak in ("SCRIPT", "STYLE", "NAVIGATION", "<", "&amp;", "color"):
        assert leak not in text


def test_colour_codes_are_removed_not_a_failure(mixed):
    _, out, _ = mixed
    [row] = [r for r in rows_of(out) if r["path"] == "build.log"]
    assert row["text"] == "ok the build passed.\nwarning: one test was skipped."


def test_an_input_of_symbols_and_numbers_is_not_refused_by_the_language_rule(mixed):
    _, out, _ = mixed
    assert [r["text"] for r in rows_of(out) if r["path"] == "symbols.txt"] == ["★ → ✓ ☃ 42 + 7 = 49"]


def test_the_parts_name_each_formats_extractor_and_its_version(mixed):
    _, out, _ = mixed
    meta = pq.read_schema(next(out.glob("part-*.parquet"))).metadata
    extractors = json.loads(meta[b"gpucli.extractors"])
    assert extractors["pdf"].startswith("pypdfium2 ") and extractors["docx"].startswith("python-docx ")
    assert extractors["html"].startswith("selectolax ")


def test_dry_run_shows_the_format_each_input_is_read_as(mixed):
    root, out, _ = mixed
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--dry-run"])
    formats = {line["path"]: line["format"] for line in map(json.loads, result.stdout.splitlines())}
    assert formats["paper.pdf"] == "pdf" and formats["notes.docx"] == "docx" and formats["charts.html"] == "html"
    assert formats["build.log"] == formats["zh.txt"] == "text"


def test_search_prints_the_page_of_a_pdf_hit(mixed):
    _, out, _ = mixed
    query = "who wound the clockwork and trimmed lamp wicks in a lighthouse"
    result = CliRunner().invoke(app, ["search", query, "--in", str(out), "-k", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert hits[0]["path"] == "paper.pdf" and "clockwork" in hits[0]["text"] and hits[0]["page"] in (2, 3)
    plain = CliRunner().invoke(app, ["search", query, "--in", str(out), "-k", "1"])
    assert plain.stdout.splitlines()[1].split("\t")[1:4] == ["paper.pdf", str(hits[0]["chunk"]), str(hits[0]["page"])]


def test_rerun_is_incremental_and_prune_removes_a_deleted_documents_rows(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    write_pdf(root / "a.pdf", [sentences(1, 3), sentences(2, 3)])
    write_docx(root / "b.docx", "B", sentences(3, 2))
    (root / "c.txt").write_text(" ".join(sentences(4, 2)), encoding="utf-8")
    out = tmp_path / "out.parquet"
    args = ["embed", str(root), "--out", str(out), "--json", "--quiet"]
    first = json.loads(CliRunner().invoke(app, args).stdout)
    assert first["succeeded"] == 3 and first["exit_code"] == 0
    again = json.loads(CliRunner().invoke(app, args).stdout)
    assert again["unchanged"] == 3 and again["succeeded"] == 0
    (root / "a.pdf").unlink()
    write_docx(root / "b.docx", "B changed", sentences(5, 2))
    pruned = json.loads(CliRunner().invoke(app, args + ["--prune"]).stdout)
    assert pruned["pruned"] == 1 and pruned["succeeded"] == 1 and pruned["exit_code"] == 0
    rows = rows_of(out)
    assert {r["path"] for r in rows} == {"b.docx", "c.txt"}
    assert any("B changed" in r["text"] for r in rows)


def test_a_2000_page_pdf_is_extracted_and_chunked_with_its_pages(tmp_path):
    """Bounded: the extraction child holds one page at a time, the chunks carry pages 1..2000."""
    from reportlab.pdfgen import canvas

    path = tmp_path / "long.pdf"
    c = canvas.Canvas(str(path))
    for page in range(2000):
        c.drawString(72, 720, f"Page {page + 1} holds one short sentence about orbits.")
        c.showPage()
    c.save()
    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    try:
        block, failures = task.prepare_many([Source(0, "long.pdf", str(path))], [path.read_bytes()])
    finally:
        task.documents.close()
    assert not failures
    pages = block.meta["page"].tolist()
    assert pages == list(range(1, 2001)) and "Page 2000 " in block.meta["text"][-1]  # a row per page, on it
    assert all(re.match(r"^(Page|\d|holds|one|short|sentence|about|orbits)", t) for t in block.meta["text"])


@pytest.fixture(scope="module")
def task():
    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    yield task
    task.documents.close()


def rows_on_pages(task, name: str, fmt: str, data: bytes) -> list[tuple[int, int, int, str]]:
    """(page, char_start, char_end, text) of each row `prepare_many` cuts, after checking that
    each lies on its page."""
    block, failures = task.prepare_many([Source(0, name, name)], [data])
    assert not failures
    doc = extract(fmt, data)
    rows = list(zip(block.meta["page"].tolist(), block.meta["char_start"].tolist(), block.meta["char_end"].tolist(),
                    block.meta["text"]))
    for page, start, end, _ in rows:
        assert doc.page_at(start) == page == doc.page_at(end - 1)
    return rows


def test_short_slides_that_fit_one_window_together_get_a_row_each(task):
    """A deck of short slides is one window of tokens: it was one row labelled slide 1."""
    from pptx import Presentation

    odp = (DOCS / "tide-talk.libreoffice.odp").read_bytes()  # LibreOffice's; slide 3 is empty
    assert [(page, text) for page, _, _, text in rows_on_pages(task, "talk.odp", "odp", odp)] == [
        (1, "Tide Tables\n\nHarbour committee, spring"), (2, "Agenda\n\nApprove the budget\nRepair the north pier"),
        (4, "Costs\n\nPaint\t120\nRope\t45"), (5, "Questions?\n\nWrite to the harbour master.")]
    deck = Presentation()
    for title in ("Plan", "Hire", "Ship", "Thanks"):
        deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = title
    buffer = io.BytesIO()
    deck.save(buffer)
    assert [(page, text) for page, _, _, text in rows_on_pages(task, "deck.pptx", "pptx", buffer.getvalue())] == [
        (1, "Plan"), (2, "Hire"), (3, "Ship"), (4, "Thanks")]


def test_pdf_pages_of_any_length_give_rows_that_never_cross_a_page(task, tmp_path):
    """Pages of 1 to 30 sentences: each page's rows run from its first character to its last."""
    path = tmp_path / "uneven.pdf"
    write_pdf(path, [sentences(1, 2), sentences(2, 30), sentences(3, 1), sentences(4, 9), sentences(5, 1)])
    doc = extract("pdf", path.read_bytes())
    rows = rows_on_pages(task, "uneven.pdf", "pdf", path.read_bytes())
    ends = [start - 2 for start in doc.pages[1:]] + [len(doc.text)]  # pages are joined by a blank line
    assert len(doc.pages) > 5  # the long page flowed over two
    for number, (start, end) in enumerate(zip(doc.pages, ends), 1):
        spans = [(a, b) for page, a, b, _ in rows if page == number]
        assert spans[0][0] == start and spans[-1][1] == end, number


def test_a_document_past_the_extraction_time_limit_is_a_failure_and_the_run_goes_on(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    write_pdf(root / "slow.pdf", [sentences(1, 3)])
    (root / "fine.txt").write_text("A plain note about tides.", encoding="utf-8")
    out = tmp_path / "out.parquet"
    # a millisecond: the child's first PDF alone imports PDFium, far longer than that
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--json", "--quiet",
                                      "--extract-timeout", "0.001"])
    assert result.exit_code == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["succeeded"] == 1 and summary["failed"] == 1
    [record] = map(json.loads, Path(summary["failures_file"]).read_text().splitlines())
    assert record["path"] == "slow.pdf" and record["stage"] == "decode" and "--extract-timeout" in record["error"]
    again = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--json", "--quiet"])
    assert again.exit_code == 0 and json.loads(again.stdout)["succeeded"] == 1  # the limit is no setting: no --full


@pytest.mark.processes  # a model loading in a thread holds the import lock the stop may need
def test_ctrl_c_while_a_document_is_in_its_extraction_child_exits_130_without_waiting_for_it(tmp_path):
    """The extraction children are killed with the reader: a stop never waits for a document. The
    child that extracts is frozen (SIGSTOP) before the Ctrl-C, so a stop that waited for it would
    wait forever (the communicate below is the hang guard); the run exits 130 and the frozen child
    does not outlive it. The child is found as the one process of the run under a memory cap."""
    import os
    import signal
    import subprocess
    import sys
    import time

    psutil = pytest.importorskip("psutil")
    from reportlab.pdfgen import canvas

    root = tmp_path / "docs"
    root.mkdir()
    c = canvas.Canvas(str(root / "big.pdf"))
    for page in range(6000):  # seconds of extraction: it is frozen long before it could end
        text = c.beginText(72, 720)
        for line in range(20):
            text.textLine(f"Page {page} line {line} says a few words about rivers, mountains and the sea.")
        c.drawText(text)
        c.showPage()
    c.save()
    proc = subprocess.Popen([sys.executable, "-m", "gpucli", "embed", str(root), "--out", str(tmp_path / "o.parquet"),
                             "--progress", "off", "--extract-timeout", "3600"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = _extraction_child(psutil, proc.pid, deadline=time.monotonic() + 120)
        child.suspend()
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    gone, alive = psutil.wait_procs([child], timeout=30)
    assert not alive, "the frozen extraction child outlived its run"


def _extraction_child(psutil, pid: int, deadline: float):
    """The run's extraction child: its process under an address-space cap (sandbox._cap_memory)."""
    import time

    while time.monotonic() < deadline:
        for process in psutil.Process(pid).children(recursive=True):
            try:
                if process.rlimit(psutil.RLIMIT_AS)[0] != psutil.RLIM_INFINITY:
                    return process
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.02)
    pytest.fail("no extraction child started within 120 s")
