"""OCR (issue 43, docs/ocr.md): pages/s and word recall on scanned English pages.

    python benchmarks/ocr.py                  # 10 pages, 9 to 12 pt, one process (one core)
    python benchmarks/ocr.py --pages 20 --cli # also `gpucli embed` on the scans, end to end

The pages are made as a scanner makes them: a real PDF with real text (reportlab, Times 9-12 pt,
A4), each page rendered at 200 dpi in greyscale (PDFium) and wrapped into a PDF of JPEG pages with
no text layer (Pillow). Recall is the share of each page's words (with their counts) that OCR gave
back, against the page's own text layer; speed is `ocr_pdf_pages` on one core (what one extraction
child does), after one warm-up page. With --cli, `gpucli embed` runs on the scanned PDF (its read
stage OCRs in one child per core) and its read stage gives pages/s end to end.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

WORDS = ("river mountain ledger quarterly engine harbour violet summer archive copper lantern meadow signal "
         "timber orbit canvas falcon garden measure pocket silver thunder committee budget research winter "
         "laboratory report department figures members engineers").split()


def text_pdf(pages: int, seed: int = 1) -> bytes:
    """`pages` A4 pages of English-like sentences, font size cycling 9, 10, 11, 12 pt."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    rng = random.Random(seed)
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    for number in range(pages):
        size = 9 + number % 4
        pdf.setFont("Times-Roman", size)
        text = " ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(40))
        y = 800.0
        for line in textwrap.wrap(text, int(95 * 10 / size)):
            if y < 60:
                break
            pdf.drawString(50, y, line)
            y -= size * 1.4
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def scan(pdf: bytes) -> tuple[bytes, list[str]]:
    """The PDF as a scan (JPEG pages, no text layer), and each page's own text."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    images, texts = [], []
    for k in range(len(document)):
        page = document[k]
        texts.append(page.get_textpage().get_text_bounded())
        images.append(page.render(scale=200 / 72, grayscale=True).to_pil().convert("L"))
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", resolution=200, save_all=True, append_images=images[1:])
    return buffer.getvalue(), texts


def recall(expected: str, got: str) -> float:
    want = Counter(re.findall(r"\w+", expected.lower()))
    have = Counter(re.findall(r"\w+", got.lower()))
    return sum(min(n, have[w]) for w, n in want.items()) / max(1, sum(want.values()))


def one_core(data: bytes, texts: list[str]) -> None:
    from gpucli.inputs.documents.ocr import ocr_pdf_pages, version

    ocr_pdf_pages(data, [0])  # the engine loads once per process
    start = time.perf_counter()
    got = ocr_pdf_pages(data, list(range(len(texts))))
    elapsed = time.perf_counter() - start
    scores = [recall(want, have) for want, have in zip(texts, got)]
    print(json.dumps({"engine": version(), "pages": len(texts), "pages_per_s_one_core": round(len(texts) / elapsed, 2),
                      "recall_mean": round(sum(scores) / len(scores), 4), "recall_min": round(min(scores), 4),
                      "recall_by_page": [round(s, 3) for s in scores]}))


def end_to_end(data: bytes, pages: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "scans"
        root.mkdir()
        (root / "scan.pdf").write_bytes(data)
        done = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(root), "--out", f"{tmp}/out.parquet",
                               "--json", "--progress", "off"], capture_output=True, text=True)
        summary = json.loads(done.stdout)
        read = summary["stage_seconds"]["read"]
        print(json.dumps({"cli_pages": pages, "cli_rows": summary["rows"], "cli_elapsed_s": summary["elapsed_s"],
                          "cli_read_s": read, "cli_pages_per_s_read": round(pages / read, 2) if read else None}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--cli", action="store_true", help="also gpucli embed on the scanned PDF")
    args = parser.parse_args()
    data, texts = scan(text_pdf(args.pages))
    one_core(data, texts)
    if args.cli:
        end_to_end(data, args.pages)


if __name__ == "__main__":
    main()
