"""The encoding detector (gpucli/inputs/encodings.py) on texts whose truth is known: precision
(files decoded to a text that is not the truth: target 0) and recall (files decoded to the truth).

The corpus:
- Python's own test data, Lib/test/cjkencodings/: each file beside its UTF-8 truth (Big5,
  Big5-HKSCS, CP949, EUC-JP, EUC-JIS-X-0213, EUC-KR, GB2312, GBK, GB18030, HZ, ISO-2022-JP,
  ISO-2022-KR, Johab, Shift-JIS, Shift-JIS-X-0213);
- Debian's translated man pages (/usr/share/man/LANG, `apt-get install manpages-de manpages-fr
  manpages-es manpages-it manpages-pt manpages-nl manpages-pl manpages-cs manpages-hu manpages-ro
  manpages-ru manpages-uk`): their UTF-8 text (roff requests dropped) is the truth, written in
  the legacy code pages of the language (Western: cp1252, latin-1, iso8859-15, mac_roman, cp850;
  Central-European: cp1250, iso8859-2; Cyrillic: cp1251, koi8-r / koi8-u, cp866, iso8859-5), at
  three sizes: a page (its first 4 KB), a paragraph (~400 characters holding a letter beyond
  ASCII) and a line (one line holding one). A text the code page cannot hold is left out.

    python benchmarks/encodings.py [--pages 12] [--skip 12] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import sysconfig
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpucli.core.errors import InputError
from gpucli.inputs.encodings import decode

CJK = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
MAN = Path("/usr/share/man")
GROUPS = {
    "Western": (("de", "fr", "es", "it", "pt", "nl"), ("cp1252", "latin_1", "iso8859_15", "mac_roman", "cp850")),
    "Central-European": (("pl", "cs", "hu", "ro"), ("cp1250", "iso8859_2")),
    "Cyrillic": (("ru", "uk"), ("cp1251", "koi8_r", "koi8_u", "cp866", "iso8859_5")),
}
ROFF = re.compile(r"\\f[BIRP]|\\\(..|\\[-&e|^]|\\s[+-]?\d")


def man_texts(lang: str, pages: int, skip: int = 0) -> list[str]:
    """The text of `pages` man pages of LANG holding a letter beyond ASCII, after the first `skip`."""
    texts = []
    for path in sorted((MAN / lang).glob("man*/*.gz")):
        try:
            raw = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        lines = [ROFF.sub("", line) for line in raw.splitlines() if line and not line.startswith((".", "'"))]
        text = "\n".join(line for line in lines if line.strip()) + "\n"
        if not text.isascii():
            texts.append(text)
        if len(texts) == skip + pages:
            break
    return texts[skip:]


def pieces(text: str) -> dict[str, str]:
    """A page, a paragraph and a line of `text`, each holding a letter beyond ASCII."""
    page = text[:4000].rsplit("\n", 1)[0] + "\n"
    lines = [line for line in text.splitlines() if not line.isascii() and len(line) >= 20]
    out = {"page": page}
    if lines:
        out["line"] = lines[0] + "\n"
        at = text.index(lines[0])
        out["paragraph"] = text[max(0, at - 200): at + 200].split("\n", 1)[-1].rsplit("\n", 1)[0] + "\n"
    return out


def corpus(pages: int, skip: int = 0) -> list[tuple[str, str, str, bytes, str]]:
    """(group, size, encoding, bytes, truth) for every sample."""
    rows = []
    for path in sorted(CJK.glob("*.txt")):
        if path.name.endswith("-utf8.txt"):
            continue
        truth = (CJK / f"{path.stem}-utf8.txt").read_text(encoding="utf-8")
        rows.append(("CJK (cjkencodings)", "file", path.stem, path.read_bytes(), truth))
    for group, (langs, encodings) in GROUPS.items():
        for lang in langs:
            for text in man_texts(lang, pages, skip):
                for size, piece in pieces(text).items():
                    for encoding in encodings:
                        try:
                            rows.append((group, size, encoding, piece.encode(encoding), piece))
                        except UnicodeEncodeError:
                            continue
    return rows


def charset_normalizer_best(data: bytes) -> str:
    """What gpucli did before issue 52: UTF-8, else charset-normalizer's best guess."""
    from charset_normalizer import from_bytes

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None:
        raise InputError("decode", "binary content")
    return data.decode(best.encoding)


def measure(rows: list[tuple[str, str, str, bytes, str]], decode=decode) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = defaultdict(lambda: {"files": 0, "right": 0, "wrong": 0, "refused": 0})
    wrong = []
    for group, size, encoding, data, truth in rows:
        try:
            text = decode(data)
            outcome = "right" if text == truth else "wrong"
        except InputError:
            outcome = "refused"
        for key in (f"{group} / {size}", f"{group} / {size} / {encoding}", "all"):
            table[key]["files"] += 1
            table[key][outcome] += 1
        if outcome == "wrong":
            wrong.append((group, size, encoding, truth[:60]))
    for sample in wrong[:20]:
        print("WRONG", *sample, file=sys.stderr)
    return dict(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=12, help="man pages per language")
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N pages of each language (the "
                                                              "12 the rules were tuned on: a held-out measure)")
    parser.add_argument("--before", action="store_true", help="measure the detector gpucli had before issue 52 "
                                                                 "(charset-normalizer's best guess) instead")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--by-encoding", action="store_true", help="a row per encoding too")
    args = parser.parse_args()
    if not any((MAN / lang).is_dir() for lang in GROUPS["Western"][0]):
        print("no translated man pages: apt-get install manpages-de manpages-fr manpages-ru ... (see the doc)",
              file=sys.stderr)
    table = measure(corpus(args.pages, args.skip), charset_normalizer_best if args.before else decode)
    if args.json:
        print(json.dumps(table, indent=1))
        return
    print("| texts | files | right | wrong (precision) | refused | recall |")
    print("|---|---|---|---|---|---|")
    for key in sorted(table, key=lambda k: (k == "all", k)):
        if key.count(" / ") == 2 and not args.by_encoding:
            continue
        row = table[key]
        print(f"| {key} | {row['files']} | {row['right']} | {row['wrong']} | {row['refused']} | "
              f"{row['right'] / row['files']:.1%} |")
    print(f"\nload average {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
