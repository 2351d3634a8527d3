"""A corpus of real documents for the extraction benchmarks (extract_candidates.py, extract_bench.py).

    python benchmarks/doc_corpus.py                 # build (or reuse) ~/.cache/gpucli-bench/docs, print its path
    python benchmarks/doc_corpus.py --cache DIR     # elsewhere (or GPUCLI_BENCH_DOCS=DIR)
    python benchmarks/doc_corpus.py --force         # rebuild every file

Nothing is downloaded and nothing lands in the repository. Built idempotently (a file already
there is kept; `manifest.json` lists what the tree holds):

  CACHE/pdf/enscript/NAME.pdf   real English text (the Python docs' reST sources from python3.11-doc,
                                the licences in /usr/share/common-licenses) set in Courier by
                                `enscript -B --word-wrap | ps2pdf` (Ghostscript)
  CACHE/pdf/groff/NAME.pdf      man pages typeset by `groff -man -Tpdf` (gropdf: Times, justified,
                                hyphenation off), the typical look of a typeset document
  CACHE/pdf/debian/NAME.pdf     PDFs as Debian packages ship them (gunzipped), made by TeX, DocBook,
                                groff and others: bash-doc, bzip2, debian-policy, fontconfig,
                                libtasn1-doc, shared-mime-info, zlib1g-dev, groff-base
  CACHE/pdf-text/KIND/NAME.txt  the exact text each generated PDF was made from (quality scoring);
                                kept out of pdf/ so that `gpucli embed CACHE/pdf` reads PDFs only
  CACHE/html/ORIGIN/...html     real HTML pages shipped by Debian doc packages: Sphinx's classic theme
                                (python3.11-doc, debian-policy), Django's own theme (python-django-doc),
                                the PyData theme with navbars, sidebars and scripts (python-scipy-doc),
                                Node.js's API docs (nodejs), DocBook (valgrind), Texinfo (libffi-dev)

Tools: `apt-get install -y enscript ghostscript groff` (groff-base alone has no PDF output) and,
for more of the corpus, `apt-get install -y python3.11-doc bash-doc debian-policy python-django-doc
python-scipy-doc wamerican` (wamerican: the word list of extract_candidates.py's 'dict' column).
A missing tool or package is named with the package to install; the rest is built without it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("GPUCLI_BENCH_DOCS", Path.home() / ".cache" / "gpucli-bench" / "docs"))
PYDOC = Path("/usr/share/doc/python3.11/html")
MANIFEST_VERSION = 1

# Text set in Courier by enscript + ps2pdf: (name, source file, Debian package).
ENSCRIPT_TEXTS = [
    *((f"py-{p.replace('/', '-')}", PYDOC / "_sources" / f"{p}.rst.txt", "python3.11-doc") for p in (
        "tutorial/classes", "tutorial/controlflow", "tutorial/datastructures", "tutorial/errors",
        "tutorial/inputoutput", "tutorial/modules", "tutorial/floatingpoint", "howto/logging", "howto/regex",
        "howto/sorting", "howto/unicode", "howto/functional")),
    ("gpl-3", Path("/usr/share/common-licenses/GPL-3"), "base-files"),
    ("apache-2.0", Path("/usr/share/common-licenses/Apache-2.0"), "base-files"),
    ("mpl-2.0", Path("/usr/share/common-licenses/MPL-2.0"), "base-files"),
]
# Man pages typeset by groff -Tpdf (each from the package that ships it).
MAN_PAGES = ["grep", "find", "gzip", "sed", "tar", "ssh", "dpkg", "apt-get", "man", "less", "make", "git",
             "python3"]  # curl (88 pages) left out: a few hundred pages in all
# PDFs that ship in Debian packages: (name, path, package).
DEBIAN_PDFS = [
    ("bash", "/usr/share/doc/bash-doc/bash.pdf", "bash-doc"),
    ("bzip2-manual", "/usr/share/doc/bzip2/manual.pdf.gz", "bzip2"),
    ("fhs-3.0", "/usr/share/doc/debian-policy/fhs/fhs-3.0.pdf.gz", "debian-policy"),
    ("fontconfig-user", "/usr/share/doc/fontconfig/fontconfig-user.pdf.gz", "fontconfig"),
    ("libtasn1", "/usr/share/doc/libtasn1-doc/libtasn1.pdf", "libtasn1-doc"),
    ("shared-mime-info-spec", "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf", "shared-mime-info"),
    ("zlib-crc-doc", "/usr/share/doc/zlib1g-dev/crc-doc.1.0.pdf.gz", "zlib1g-dev"),
    ("groff-mom-pdf", "/usr/share/doc/groff-base/examples/mom/mom-pdf.pdf.gz", "groff-base"),
    ("groff-mom-sample-docs", "/usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz", "groff-base"),
    ("groff-mom-slide-demo", "/usr/share/doc/groff-base/examples/mom/slide-demo.pdf.gz", "groff-base"),
    ("groff-pdfmark", "/usr/share/doc/groff-base/pdf/pdfmark.pdf.gz", "groff-base"),
    ("groff-automake", "/usr/share/doc/groff-base/pdf/automake.pdf.gz", "groff-base"),
]
# HTML pages: (origin, directory, names or globs, how many at most, Debian package).
HTML_SETS = [
    ("python3.11-doc", PYDOC, ["tutorial/*.html", "howto/*.html", "library/functions.html", "library/os.path.html",
                               "library/re.html", "library/json.html", "library/pathlib.html",
                               "library/itertools.html", "library/collections.html", "library/argparse.html"],
     30, "python3.11-doc"),
    ("debian-policy", Path("/usr/share/doc/debian-policy/policy.html"), ["*.html"], 26, "debian-policy"),
    ("nodejs", Path("/usr/share/doc/nodejs/api"), ["*.html"], 20, "nodejs"),
    ("valgrind", Path("/usr/share/doc/valgrind/html"), ["*.html"], 20, "valgrind"),
    ("libffi", Path("/usr/share/doc/libffi8/html"), ["*.html"], 20, "libffi-dev"),
    ("django", Path("/usr/share/doc/python-django-doc/html"), ["topics/*.html", "topics/*/*.html", "howto/*.html"],
     25, "python-django-doc"),
    ("scipy", Path("/usr/share/doc/python-scipy-doc/html"), ["tutorial/*.html", "tutorial/*/*.html"], 20,
     "python-scipy-doc"),
]
NODE_SKIP = {"all.html", "index.html"}  # all.html is every page at once (8 MB)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def have(cmd: str) -> bool:
    return shutil.which(cmd) is not None


def build(cache: Path = DEFAULT_CACHE, force: bool = False) -> dict:
    """Build what is missing under `cache`; return the manifest (also written to manifest.json)."""
    cache.mkdir(parents=True, exist_ok=True)
    missing: list[str] = []
    pdfs = _enscript(cache, force, missing) + _groff(cache, force, missing) + _debian(cache, force, missing)
    html = _html(cache, force, missing)
    _count_pages(cache, pdfs)
    _prune(cache, {cache / e["path"] for e in pdfs + html} | {cache / e["source"] for e in pdfs if e["source"]})
    manifest = {"version": MANIFEST_VERSION, "root": str(cache), "pdf": pdfs, "html": html, "missing": missing,
                "pages": sum(p.get("pages") or 0 for p in pdfs)}
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest


def load(cache: Path = DEFAULT_CACHE) -> dict:
    """The manifest, building the corpus first where it is not there yet."""
    path = cache / "manifest.json"
    if path.exists():
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("version") == MANIFEST_VERSION and all(
                (cache / e["path"]).exists() for e in manifest["pdf"] + manifest["html"]):
            return manifest
    return build(cache)


def _fresh(path: Path, force: bool) -> bool:
    return force or not path.exists() or path.stat().st_size == 0


def _enscript(cache: Path, force: bool, missing: list[str]) -> list[dict]:
    if not (have("enscript") and have("ps2pdf")):
        missing.append("enscript/ps2pdf: apt-get install -y enscript ghostscript (no Courier PDFs built)")
        log("doc_corpus: " + missing[-1])
        return []
    out = []
    for name, src, package in ENSCRIPT_TEXTS:
        if not src.exists():
            missing.append(f"{src}: apt-get install -y {package}")
            continue
        pdf, txt = cache / "pdf" / "enscript" / f"{name}.pdf", cache / "pdf-text" / "enscript" / f"{name}.txt"
        if _fresh(pdf, force) or not txt.exists():
            pdf.parent.mkdir(parents=True, exist_ok=True)
            txt.parent.mkdir(parents=True, exist_ok=True)
            # enscript reads Latin-1: the source kept is exactly the text that was set
            text = src.read_text(encoding="utf-8", errors="replace").encode("latin-1", "replace").decode("latin-1")
            txt.write_text(text, encoding="latin-1")
            ps = subprocess.run(["enscript", "-B", "-q", "--word-wrap", "--encoding=latin1", "-p", "-", str(txt)],
                                capture_output=True, check=True).stdout
            subprocess.run(["ps2pdf", "-", str(pdf)], input=ps, capture_output=True, check=True)
        out.append({"path": str(pdf.relative_to(cache)), "kind": "enscript", "source": str(txt.relative_to(cache)),
                    "origin": f"{src} ({package})"})
    return out


def _groff(cache: Path, force: bool, missing: list[str]) -> list[dict]:
    probe = subprocess.run(["groff", "-Tpdf"], input=b".TH X 1\nx\n", capture_output=True) if have("groff") else None
    if probe is None or probe.returncode != 0 or not probe.stdout.startswith(b"%PDF"):
        missing.append("groff -Tpdf: apt-get install -y groff (groff-base has no gropdf; no typeset man pages built)")
        log("doc_corpus: " + missing[-1])
        return []
    out = []
    for page in MAN_PAGES:
        where = subprocess.run(["man", "-w", page], capture_output=True, text=True) if have("man") else None
        if where is None or where.returncode != 0:
            missing.append(f"man page {page}: not installed (man-db and the package of {page})")
            continue
        src = Path(where.stdout.strip().splitlines()[0])
        pdf, txt = cache / "pdf" / "groff" / f"{page}.pdf", cache / "pdf-text" / "groff" / f"{page}.txt"
        if _fresh(pdf, force) or not txt.exists():
            pdf.parent.mkdir(parents=True, exist_ok=True)
            txt.parent.mkdir(parents=True, exist_ok=True)
            raw = gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes()
            roff = b".nh\n" + raw  # no hyphenation, so the source text and the PDF break no word
            pdf.write_bytes(_run(["groff", "-man", "-Tpdf", "-rHY=0"], roff))
            # the same page as text: grotty without overstriking (-c -b -o -u), one long page (-rcR=1)
            text = _run(["groff", "-man", "-Tutf8", "-rHY=0", "-rcR=1", "-P-cbou"], roff).decode("utf-8")
            # mdoc pages (ssh) hyphenate all the same: words broken at a line end are joined again
            txt.write_text(re.sub(r"(\w)\u2010\n\s*([a-z])", r"\1\2", text), encoding="utf-8")
        out.append({"path": str(pdf.relative_to(cache)), "kind": "groff", "source": str(txt.relative_to(cache)),
                    "origin": f"{src} (groff -man -Tpdf)"})
    return out


def _run(cmd: list[str], data: bytes) -> bytes:
    proc = subprocess.run(cmd, input=data, capture_output=True)
    if proc.returncode != 0 or not proc.stdout:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-500:]!r}")
    return proc.stdout


def _debian(cache: Path, force: bool, missing: list[str]) -> list[dict]:
    out, seen = [], set()
    for name, src, package in DEBIAN_PDFS:
        path = Path(src)
        if not path.exists():
            missing.append(f"{src}: apt-get install -y {package}")
            continue
        dest = cache / "pdf" / "debian" / f"{name}.pdf"
        if _fresh(dest, force):
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            dest.write_bytes(data)
        digest = hashlib.sha1(dest.read_bytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        out.append({"path": str(dest.relative_to(cache)), "kind": "debian", "source": None,
                    "origin": f"{src} ({package})"})
    return out


def _html(cache: Path, force: bool, missing: list[str]) -> list[dict]:
    out = []
    for origin, root, patterns, most, package in HTML_SETS:
        if not root.is_dir():
            missing.append(f"{root}: apt-get install -y {package} (no {origin} HTML)")
            continue
        files: list[Path] = []
        for pattern in patterns:
            for f in sorted(root.glob(pattern)):
                if f not in files and f.name not in NODE_SKIP and f.stat().st_size > 2000:
                    files.append(f)
        for f in files[:most]:
            dest = cache / "html" / origin / f.relative_to(root)
            if _fresh(dest, force):
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest)
            out.append({"path": str(dest.relative_to(cache)), "origin": origin, "bytes": dest.stat().st_size})
    return out


def _prune(cache: Path, keep: set[Path]) -> None:
    """Files left from an older list of sources go, so that the tree is what the manifest says."""
    for top in ("pdf", "pdf-text", "html"):
        for f in sorted((cache / top).rglob("*")) if (cache / top).is_dir() else []:
            if f.is_file() and f not in keep:
                f.unlink()


def _count_pages(cache: Path, pdfs: list[dict]) -> None:
    try:
        import pypdfium2 as pdfium
    except ImportError:
        log("doc_corpus: pip install pypdfium2 to count pages (the manifest leaves them out)")
        return
    for entry in pdfs:
        doc = pdfium.PdfDocument(str(cache / entry["path"]))
        entry["pages"] = len(doc)
        doc.close()


def summary(manifest: dict) -> str:
    kinds: dict[str, list[int]] = {}
    for e in manifest["pdf"]:
        kinds.setdefault(e["kind"], []).append(e.get("pages") or 0)
    lines = [f"{manifest['root']}"]
    for kind, pages in kinds.items():
        lines.append(f"  pdf/{kind}: {len(pages)} PDFs, {sum(pages)} pages")
    by_origin: dict[str, int] = {}
    for e in manifest["html"]:
        by_origin[e["origin"]] = by_origin.get(e["origin"], 0) + 1
    lines.append(f"  html: {len(manifest['html'])} pages ({', '.join(f'{o} {n}' for o, n in by_origin.items())}), "
                 f"{sum(e['bytes'] for e in manifest['html']) / 2**20:.1f} MB")
    lines += [f"  missing: {m}" for m in manifest["missing"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where to build (default {DEFAULT_CACHE})")
    parser.add_argument("--force", action="store_true", help="rebuild every file")
    args = parser.parse_args()
    manifest = build(args.cache, force=args.force)
    log(summary(manifest))
    if not manifest["pdf"]:
        log("doc_corpus: no PDF at all: apt-get install -y enscript ghostscript groff")
        return 1
    print(args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
