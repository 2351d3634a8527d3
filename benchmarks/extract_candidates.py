"""Which library should read PDFs and HTML for `gpucli embed`: speed and text quality side by side.

    pip install pypdfium2 pypdf pdfminer.six selectolax trafilatura html-text inscriptis lxml   # benchmark only
    python benchmarks/doc_corpus.py                # the corpus (see there; ~1 min, cached)
    python benchmarks/extract_candidates.py        # 3 interleaved rounds; --rounds N; --pdf-only / --html-only
    python benchmarks/extract_candidates.py --quick   # 1 round on a third of the files (a smoke test)

PDF (all permissive; PyMuPDF is AGPL-3.0, so not a candidate for a default dependency and not run):
pypdfium2 (Apache-2.0 / BSD-3, Google's PDFium), pypdf (BSD-3, pure Python), pdfminer.six (MIT, pure
Python). Each opens every PDF of the corpus, takes each page's text and closes it, in this one process
(one core); the libraries run one after another within a round (A B C, A B C, A B C) and the table
shows medians: pages per wall second and per CPU second of this process (the machine is shared; CPU
seconds move less with the load).

Quality. For the PDFs made from a known text (pdf/enscript: Courier; pdf/groff: typeset man pages),
against that text, on word tokens (lower case, runs of letters and digits): *recall* and *precision*
(multiset overlap: lost and spurious words; a ligature left as U+FB01 or two words run together count
as lost), and *order* (difflib's ratio on the two word sequences: reading order, columns, headers).
For every PDF: *dict* = the share of alphabetic tokens of 3+ letters found in /usr/share/dict/words
(apt-get install wamerican; words run together or split apart fall out of it), empty pages, `(cid:N)`
placeholders, U+FFFD, files that raised.

HTML: selectolax (MIT; Lexbor) with the walk gpucli means to use (drop script, style, noscript,
template, nav, header, footer, aside; block elements end a line, inline ones do not), the same walk
also dropping ARIA landmark roles (navigation, banner, contentinfo, search, complementary) and
hidden elements ("+roles"), trafilatura (Apache-2.0; main-content extraction), html-text (MIT; lxml)
and inscriptis (Apache-2.0; layout-aware). Quality against each page's main text, taken with lxml by
the page's own structure, not by any candidate: the element with role="main" (Sphinx, PyData, Node.js; Django: div#yui-main), else
the body less nav/header/footer/aside and the generators' navigation blocks (Texinfo div.header,
DocBook table.nav). *body recall* = share of the main text's words in the output; *boilerplate* =
share of the output's words that are not main text (menus, sidebars, footers); *leak* = per 1000
output words, tag or entity fragments beyond those the page shows as text, plus words found only in
the page's scripts and styles; *title* = share of pages whose heading (first h1-h6 of the main text, else <title>) appears in the
output word for word.

Writes the raw figures to CACHE/results-candidates.json; prints Markdown tables.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.doc_corpus import DEFAULT_CACHE, load

BENCH_PACKAGES = "pypdfium2 pypdf pdfminer.six selectolax trafilatura html-text inscriptis lxml"
WORD = re.compile(r"[^\W_]+")
ALPHA3 = re.compile(r"[^\W\d_]{3,}")
TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(\s[^<>]{0,200})?/?>|&(#\d+|#x[0-9a-fA-F]+|[A-Za-z]{2,8});")
SENT, PRE_NL = "\u2029", "\u2028"


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


# --------------------------------------------------------------------------------------------- PDF
def pdf_pypdfium2(path: str) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        pages = []
        for i in range(len(pdf)):
            page = pdf[i]
            textpage = page.get_textpage()
            pages.append(textpage.get_text_bounded())  # as gpucli.inputs.extract.pdf: all of Unicode, not UCS-2
            textpage.close()
            page.close()
        return pages
    finally:
        pdf.close()


def pdf_pypdf(path: str) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(path).pages]


def pdf_pdfminer(path: str) -> list[str]:
    from pdfminer.high_level import extract_text

    text = extract_text(path)
    return text.split("\f")[:-1] if text.endswith("\f") else text.split("\f")


PDF = {"pypdfium2": pdf_pypdfium2, "pypdf": pdf_pypdf, "pdfminer.six": pdf_pdfminer}
PDF_LICENSE = {"pypdfium2": "Apache-2.0 / BSD-3-Clause", "pypdf": "BSD-3-Clause", "pdfminer.six": "MIT"}


# -------------------------------------------------------------------------------------------- HTML
DROP = ["script", "style", "noscript", "template", "nav", "header", "footer", "aside"]
ROLES = ",".join(f'[role="{r}"]' for r in ("navigation", "banner", "contentinfo", "search", "complementary")) + \
    ',[hidden],[aria-hidden="true"]'
BLOCK = ("address,article,blockquote,body,caption,dd,details,dialog,div,dl,dt,fieldset,figcaption,figure,form,"
         "h1,h2,h3,h4,h5,h6,hr,li,main,ol,p,section,summary,table,tbody,thead,tfoot,tr,ul,br")


def html_selectolax(html: str, roles: bool = False) -> str:
    """The readable-text walk: unwanted elements dropped, block elements on their own lines."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    root = tree.body
    if root is None:
        return ""
    root.strip_tags(DROP, recursive=True)
    if roles:
        for node in root.css(ROLES):
            node.decompose()
    for node in root.css("pre"):
        node.replace_with(SENT + (node.text(deep=True) or "").replace("\n", PRE_NL) + SENT)
    for node in root.css(BLOCK):
        node.insert_before(SENT)
        node.insert_after(SENT)
    for node in root.css("td,th"):
        node.insert_after(" ")
    text = re.sub(r"\s+", " ", root.text(deep=True, separator="")).replace(PRE_NL, "\n")
    lines = (line.strip() for line in text.split(SENT))
    return "\n".join(line for line in lines if line)


def html_selectolax_roles(html: str) -> str:
    return html_selectolax(html, roles=True)


def html_trafilatura(html: str) -> str:
    import trafilatura

    return trafilatura.extract(html) or ""


def html_html_text(html: str) -> str:
    import html_text

    return html_text.extract_text(html)


def html_inscriptis(html: str) -> str:
    import inscriptis

    return inscriptis.get_text(html)


HTML = {"selectolax": html_selectolax, "selectolax+roles": html_selectolax_roles, "trafilatura": html_trafilatura,
        "html-text": html_html_text, "inscriptis": html_inscriptis}
HTML_LICENSE = {"selectolax": "MIT", "selectolax+roles": "MIT", "trafilatura": "Apache-2.0", "html-text": "MIT",
                "inscriptis": "Apache-2.0", "gpucli.inputs.extract": "MIT (selectolax)"}
try:  # gpucli's own walk (gpucli/inputs/extract/htmltext.py), where this checkout has it: the row to check it against
    from gpucli.inputs.extract.htmltext import html_to_text as _gpucli_html_to_text

    HTML["gpucli.inputs.extract"] = _gpucli_html_to_text
except ImportError:
    pass


def html_reference(raw: bytes) -> dict:
    """The page's main text and heading by its own structure (lxml), and the words only its scripts hold."""
    import lxml.html

    doc = lxml.html.document_fromstring(raw)
    script_words = Counter()
    for el in doc.xpath("//script|//style|//noscript|//template"):
        script_words.update(words(el.text_content() or ""))
        el.drop_tree()
    body = doc.find("body")
    shown = body.text_content() if body is not None else ""
    visible = set(words(shown))
    mains = doc.xpath('//*[@role="main"]') or doc.xpath('//div[@id="yui-main"]')  # the latter: Django's docs
    if mains:
        main = mains[0]
    else:
        main = body
        for el in main.xpath('.//nav|.//header|.//footer|.//aside|.//div[contains(concat(" ", @class, " "), '
                             '" header ")]|.//div[contains(@class, "nav-panel")]|.//table[@class="nav"]'
                             '|.//div[@class="navheader" or @class="navfooter"]'):
            el.drop_tree()
    heads = main.xpath(".//h1|.//h2|.//h3|.//h4|.//h5|.//h6")
    title = heads[0].text_content() if heads else (doc.findtext(".//title") or "")
    return {"words": words(main.text_content()), "title": words(title), "tags_shown": len(TAG.findall(shown)),
            "script_only": {w for w in script_words if w not in visible}}


def contains(seq: list[str], sub: list[str]) -> bool:
    if not sub:
        return True
    n = len(sub)
    return any(seq[i:i + n] == sub for i in range(len(seq) - n + 1) if seq[i] == sub[0])


# --------------------------------------------------------------------------------------------- runs
def timed(fn, items: list[tuple[str, object]]) -> tuple[float, float, dict, dict]:
    """Run fn on every item; wall and CPU seconds, outputs and errors by key."""
    outs, errors = {}, {}
    w0, c0 = time.perf_counter(), time.process_time()
    for key, arg in items:
        try:
            outs[key] = fn(arg)
        except Exception as exc:  # noqa: BLE001 - a failure is a figure here
            errors[key] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return time.perf_counter() - w0, time.process_time() - c0, outs, errors


def pdf_quality(manifest: dict, cache: Path, outs: dict, errors: dict, dictionary: set[str] | None) -> dict:
    q: dict = {}
    for kind in ("enscript", "groff", "debian", "all"):
        entries = [e for e in manifest["pdf"] if kind in ("all", e["kind"])]
        if not entries:
            continue
        pages = sum(e["pages"] for e in entries)
        texts = {e["path"]: outs.get(e["path"], []) for e in entries}
        allt = "\n".join("\n".join(t) for t in texts.values())
        row = {"files": len(entries), "pages": pages, "failed_files": sum(e["path"] in errors for e in entries),
               "empty_pages": sum(1 for t in texts.values() for p in t if not p.strip())
               + sum(e["pages"] for e in entries if e["path"] in errors),
               "chars_per_page": round(len(allt) / max(pages, 1)), "cid": len(re.findall(r"\(cid:\d+\)", allt)),
               "fffd": allt.count("\ufffd")}
        if dictionary is not None:
            alpha = ALPHA3.findall(allt.lower())
            row["dict"] = sum(w in dictionary for w in alpha) / max(len(alpha), 1)
        if kind in ("enscript", "groff"):
            hit = src_n = out_n = 0
            ratio_w = 0.0
            for e in entries:
                src = words((cache / e["source"]).read_text(encoding="utf-8" if kind == "groff" else "latin-1"))
                got = words("\n".join(texts[e["path"]]))
                hit += sum((Counter(src) & Counter(got)).values())
                src_n += len(src)
                out_n += len(got)
                ratio_w += difflib.SequenceMatcher(None, src, got, autojunk=False).ratio() * len(src)
            row.update(recall=hit / max(src_n, 1), precision=hit / max(out_n, 1), order=ratio_w / max(src_n, 1))
        q[kind] = row
    return q


def html_quality(refs: dict, outs: dict, errors: dict) -> dict:
    hit = ref_n = out_n = leaks = titles = empty = 0
    per_origin: dict[str, list[float]] = {}
    for key, ref in refs.items():
        text = outs.get(key, "")
        got = words(text)
        h = sum((Counter(ref["words"]) & Counter(got)).values())
        hit, ref_n, out_n = hit + h, ref_n + len(ref["words"]), out_n + len(got)
        # tags and entities beyond those the page shows as text (Node.js's docs show `<string>`)
        leaks += max(0, len(TAG.findall(text)) - ref["tags_shown"]) + sum(w in ref["script_only"] for w in got)
        titles += contains(got, ref["title"])
        empty += len(got) < 10
        per_origin.setdefault(key.split("/")[1], []).append(h / max(len(ref["words"]), 1))
    n = len(refs)
    return {"pages": n, "failed": len(errors), "empty": empty, "recall": hit / max(ref_n, 1),
            "boilerplate": 1 - hit / max(out_n, 1), "leak_per_1k": 1000 * leaks / max(out_n, 1), "title": titles / n,
            "recall_by_origin": {o: statistics.mean(v) for o, v in per_origin.items()},
            "words_out": out_n, "words_ref": ref_n}


def load_dictionary() -> set[str] | None:
    path = Path("/usr/share/dict/words")
    if not path.exists():
        print("extract_candidates: no /usr/share/dict/words (apt-get install -y wamerican): no 'dict' column",
              file=sys.stderr)
        return None
    return {w.strip().lower() for w in path.read_text(encoding="utf-8", errors="replace").splitlines()}


def check_imports(names: list[str]) -> None:
    missing = []
    for mod in names:
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        sys.exit(f"extract_candidates: missing {', '.join(missing)}: pip install {BENCH_PACKAGES}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds (default 3, --quick 1)")
    parser.add_argument("--quick", action="store_true", help="1 round, every third file")
    parser.add_argument("--pdf-only", action="store_true")
    parser.add_argument("--html-only", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    logging.disable(logging.WARNING)  # pypdf and pdfminer log every odd object; failures are counted instead
    warnings.simplefilter("ignore")
    manifest = load(args.cache)
    if args.quick:
        manifest = {**manifest, "pdf": manifest["pdf"][::3], "html": manifest["html"][::3]}
    from benchmarks.common import machine

    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
                    "load_before": os.getloadavg(), "rounds": rounds}
    if not args.html_only:
        check_imports(["pypdfium2", "pypdf", "pdfminer"])
        result["pdf"] = run_pdf(manifest, args.cache, rounds)
    if not args.pdf_only:
        check_imports(["selectolax", "trafilatura", "html_text", "inscriptis", "lxml"])
        result["html"] = run_html(manifest, args.cache, rounds)
    result["load_after"] = os.getloadavg()
    result["versions"] = versions()
    (args.cache / "results-candidates.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(report(result))
    print(f"\nraw: {args.cache / 'results-candidates.json'}", file=sys.stderr)
    return 0


def run_pdf(manifest: dict, cache: Path, rounds: int) -> dict:
    items = [(e["path"], str(cache / e["path"])) for e in manifest["pdf"]]
    pages = sum(e["pages"] for e in manifest["pdf"])
    dictionary = load_dictionary()
    for fn in PDF.values():  # imports and first-call set-up outside the timings
        fn(items[0][1])
    speed: dict[str, list[tuple[float, float]]] = {n: [] for n in PDF}
    quality = {}
    for r in range(rounds):
        for name, fn in PDF.items():
            wall, cpu, outs, errors = timed(fn, items)
            speed[name].append((wall, cpu))
            print(f"  pdf round {r + 1} {name}: {pages / wall:.1f} pages/s, {pages / cpu:.1f} pages/CPU-s, "
                  f"{len(errors)} failed; load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            if r == 0:
                quality[name] = pdf_quality(manifest, cache, outs, errors, dictionary)
                quality[name]["errors"] = errors
    return {"pages": pages, "files": len(items),
            "speed": {n: {"pages_per_s": statistics.median(pages / w for w, _ in v),
                          "pages_per_cpu_s": statistics.median(pages / c for _, c in v), "runs": v}
                      for n, v in speed.items()}, "quality": quality}


def run_html(manifest: dict, cache: Path, rounds: int) -> dict:
    raws = {e["path"]: (cache / e["path"]).read_bytes() for e in manifest["html"]}
    refs = {k: html_reference(v) for k, v in raws.items()}
    items = [(k, v.decode("utf-8", errors="replace")) for k, v in raws.items()]
    mb = sum(len(v) for v in raws.values()) / 2**20
    for fn in HTML.values():
        fn(items[0][1])
    speed: dict[str, list[tuple[float, float]]] = {n: [] for n in HTML}
    quality = {}
    for r in range(rounds):
        for name, fn in HTML.items():
            wall, cpu, outs, errors = timed(fn, items)
            speed[name].append((wall, cpu))
            print(f"  html round {r + 1} {name}: {len(items) / wall:.1f} pages/s; load {os.getloadavg()[0]:.2f}",
                  file=sys.stderr, flush=True)
            if r == 0:
                quality[name] = html_quality(refs, outs, errors)
                quality[name]["errors"] = errors
    return {"pages": len(items), "mb": mb,
            "speed": {n: {"pages_per_s": statistics.median(len(items) / w for w, _ in v),
                          "mb_per_s": statistics.median(mb / w for w, _ in v),
                          "pages_per_cpu_s": statistics.median(len(items) / c for _, c in v), "runs": v}
                      for n, v in speed.items()}, "quality": quality}


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for name in BENCH_PACKAGES.split():
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "absent"
    return out


def report(result: dict) -> str:
    lines = [f"{result['date']}; {result['machine']['cpu']}; load {result['load_before'][0]:.2f} -> "
             f"{result['load_after'][0]:.2f}; medians of {result['rounds']} interleaved round(s)"]
    if "pdf" in result:
        p = result["pdf"]
        lines += ["", f"PDF: {p['files']} files, {p['pages']} pages, one process (one core)", "",
                  "| library | licence | pages/s | pages/CPU-s | enscript recall / precision / order | "
                  "groff recall / precision / order | dict (all) | empty pages | failed files |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, s in p["speed"].items():
            q = p["quality"][name]

            def rpo(kind: str, q=q) -> str:
                k = q.get(kind)
                return f"{k['recall']:.3f} / {k['precision']:.3f} / {k['order']:.3f}" if k else "—"

            a = q["all"]
            lines.append(f"| {name} | {PDF_LICENSE[name]} | {s['pages_per_s']:.1f} | {s['pages_per_cpu_s']:.1f} | "
                         f"{rpo('enscript')} | {rpo('groff')} | {a.get('dict', float('nan')):.3f} | "
                         f"{a['empty_pages']} | {a['failed_files']} |")
        lines += ["", "| library | Debian PDFs: dict | chars/page | empty pages | (cid:N) | U+FFFD | failed |",
                  "|---|---|---|---|---|---|---|"]
        for name in p["speed"]:
            d = p["quality"][name].get("debian")
            if d:
                lines.append(f"| {name} | {d.get('dict', float('nan')):.3f} | {d['chars_per_page']} | "
                             f"{d['empty_pages']} | {d['cid']} | {d['fffd']} | {d['failed_files']} |")
    if "html" in result:
        h = result["html"]
        origins = list(next(iter(h["quality"].values()))["recall_by_origin"])
        lines += ["", f"HTML: {h['pages']} pages, {h['mb']:.1f} MB, one process (one core)", "",
                  "| library | licence | pages/s | MB/s | body recall | boilerplate | leak /1k words | title kept | "
                  "failed | recall by origin (" + ", ".join(origins) + ") |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, s in h["speed"].items():
            q = h["quality"][name]
            lines.append(f"| {name} | {HTML_LICENSE[name]} | {s['pages_per_s']:.1f} | {s['mb_per_s']:.2f} | "
                         f"{q['recall']:.3f} | {q['boilerplate']:.3f} | {q['leak_per_1k']:.2f} | {q['title']:.0%} | "
                         f"{q['failed']} | " + " / ".join(f"{q['recall_by_origin'][o]:.2f}" for o in origins) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
