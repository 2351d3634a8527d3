"""The script rule (gpucli/tasks/text/scripts.py) on real multilingual text: how many texts in a script
the default model (all-MiniLM-L6-v2, English) does not read are caught, and how many English texts
are wrongly refused (target 0).

The texts are Debian's man pages: the translated ones under /usr/share/man/LANG (`apt-get install
manpages-ru manpages-uk manpages-el manpages-ja manpages-zh manpages-de manpages-fr ...`) and the
English ones under /usr/share/man/man*, each page's text with roff requests and escapes dropped;
and /usr/share/doc's plain-text files (README, NEWS, copyright...), English nearly all. Latin-script
languages (German, French...) are listed too: the rule is about scripts, and an English model reads
their letters (docs/languages.md says what that means).

    python benchmarks/scripts.py [--pages 200]
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpucli.tasks.text.scripts import ScriptRule

MAN = Path("/usr/share/man")
DOC = Path("/usr/share/doc")
ROFF = re.compile(r"\\f[BIRP]|\\f\(..|\\\(..|\\\[[^]]*\]|\\[-&e|^%]|\\s[+-]?\d|\\\*.")


def man_text(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    lines = [ROFF.sub("", line) for line in raw.splitlines() if line and not line.startswith((".", "'"))]
    text = "\n".join(line for line in lines if line.strip())
    return text if len(text) > 200 else None


def doc_texts(limit: int) -> list[str]:
    texts = []
    for path in sorted(DOC.glob("*/*")):
        if path.is_file() and not path.suffix and path.stat().st_size < 1 << 20:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            texts.append(text)
            if len(texts) == limit:
                break
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200, help="man pages per language, at most")
    args = parser.parse_args()
    rule = ScriptRule.of("minilm", None)
    langs = sorted(p.name for p in MAN.iterdir() if p.is_dir() and not p.name.startswith("man"))
    rows: list[tuple[str, int, int]] = []
    for lang in ["en"] + langs:
        pages = sorted((MAN if lang == "en" else MAN / lang).glob("man[1-8]/*.gz"))[: args.pages]
        texts = [t for t in map(man_text, pages) if t is not None]
        caught = sum(1 for t in texts if rule.refusal(t) is not None)
        rows.append((lang, len(texts), caught))
    docs = doc_texts(args.pages * 5)
    doc_caught = Counter(rule.refusal(t) is not None for t in docs)
    print("| man pages of | texts | refused by the script rule |")
    print("|---|---|---|")
    for lang, count, caught in rows:
        print(f"| {lang} | {count} | {caught} ({caught / count:.0%}) |" if count else f"| {lang} | 0 | - |")
    print(f"| /usr/share/doc plain text (English nearly all) | {len(docs)} | {doc_caught[True]} |")


if __name__ == "__main__":
    main()
