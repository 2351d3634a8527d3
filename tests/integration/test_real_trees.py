"""Real trees, read right (issue 52), with the real default model: each file's text is its true text
(or one failure that says how to name its encoding), chunks end on grapheme boundaries, and a
script the model cannot read is caught. Files come from real writers: Python's codecs and its own
Lib/test/cjkencodings, and small samples of Debian's translated man pages in tests/data/scripts."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.records import Source
from gpucli.tasks import TaskSpec, create_task

pytestmark = [pytest.mark.model, pytest.mark.slow]
CJK = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"


def embed_task(**options):
    task = create_task(TaskSpec("embed", "minilm", options))
    task.open()
    return task


@pytest.fixture(scope="module")
def task():
    task = embed_task()
    yield task
    task.close_reading()


def texts_and_failures(task, files: dict[str, bytes]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Each file's rows' texts in order, and each failed file's reason."""
    sources = [Source(i, name, name) for i, name in enumerate(files)]
    block, failures = task.prepare_many(sources, list(files.values()))
    texts: dict[str, list[str]] = {}
    if block is not None:
        for sid, text in zip(block.source_ids.tolist(), block.meta["text"]):
            texts.setdefault(sources[sid].path, []).append(text)
    return texts, {f.path: f.error for f in failures}


def test_latin_1_and_escape_encoded_files_are_embedded_as_their_true_text(task):
    files = {"menu.txt": "Café crème brûlée, twice.\n".encode("latin-1"),
             "greeting.txt": ("Grüße aus Köln\n" + "A plain line of English text.\n" * 6).encode("latin-1"),
             "jp.txt": (CJK / "iso2022_jp.txt").read_bytes()}
    texts, failures = texts_and_failures(task, files)
    assert texts["menu.txt"] == ["Café crème brûlée, twice."]
    assert texts["greeting.txt"][0].startswith("Grüße aus Köln")
    assert "jp.txt" in failures and "Japanese" in failures["jp.txt"]  # its true text, which minilm cannot read
    assert "$N3+H" not in json.dumps(texts)


def test_an_undecidable_file_is_one_failure_naming_encoding_and_named_it_is_read(task):
    data = (CJK / "big5hkscs.txt").read_bytes()
    _, failures = texts_and_failures(task, {"hk.txt": data})
    assert "encoding could not be determined" in failures["hk.txt"] and "--encoding" in failures["hk.txt"]
    named = embed_task(encoding=("*.txt=big5hkscs",), allow_unknown_tokens=True)
    try:
        texts, failures = texts_and_failures(named, {"hk.txt": data})
    finally:
        named.close_reading()
    assert failures == {}
    assert "".join(texts["hk.txt"]).endswith("ê\u0304")  # the combining macron no token covers is kept


def test_the_last_chunk_keeps_a_combining_mark_the_tokenizer_strips(task):
    """minilm strips accents: U+0304 has no token, and the chunk ended before it."""
    text = "A note on the letter e with two marks: ê\u0304"
    texts, failures = texts_and_failures(task, {"mark.txt": text.encode()})
    assert failures == {} and texts["mark.txt"] == [text]


def test_encoding_per_glob_from_the_command_line(tmp_path):
    root = tmp_path / "tree"
    (root / "legacy").mkdir(parents=True)
    ru = "Съешь же ещё этих мягких французских булок, да выпей чаю.\n"
    (root / "legacy" / "a.txt").write_bytes("Naïve … señor\n".encode("cp1252"))
    (root / "b.txt").write_text("Plain UTF-8 text, café.\n", encoding="utf-8")
    (root / "c.txt").write_bytes(ru.encode("koi8_r"))
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--encoding", "legacy/*=cp1252",
                                      "--allow-unknown-tokens", "--progress", "off", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["path"]: r["text"] for r in ds.dataset(out).to_table(columns=["path", "text"]).to_pylist()}
    assert rows == {"legacy/a.txt": "Naïve … señor", "b.txt": "Plain UTF-8 text, café.", "c.txt": ru.strip()}


SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "scripts"


def test_a_russian_man_page_is_refused_by_the_english_default_and_read_when_allowed(task):
    """It was embedded by minilm, exit 0, no warning: its Cyrillic tokenizes into known pieces."""
    files = {name: (SCRIPTS / name).read_bytes() for name in ("ru-cat.1.txt", "el-diff3.1.txt", "en-cat.1.txt",
                                                             "de-cat.1.txt")}
    texts, failures = texts_and_failures(task, files)
    assert set(failures) == {"ru-cat.1.txt", "el-diff3.1.txt"}
    assert "mostly Cyrillic" in failures["ru-cat.1.txt"] and "mostly Greek" in failures["el-diff3.1.txt"]
    assert set(texts) == {"en-cat.1.txt", "de-cat.1.txt"}
    allowed = embed_task(allow_other_scripts=True)
    try:
        texts, failures = texts_and_failures(allowed, files)
    finally:
        allowed.close_reading()
    assert failures == {} and len(texts) == 4


def test_the_summary_counts_them_as_texts_in_a_language_the_model_does_not_read(tmp_path):
    root = tmp_path / "man"
    root.mkdir()
    for name in ("ru-cat.1.txt", "en-cat.1.txt"):
        (root / name).write_bytes((SCRIPTS / name).read_bytes())
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(tmp_path / "o.parquet"), "--progress", "off",
                                      "--json"])
    assert result.exit_code == 1
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["succeeded"], summary["failed"], summary["unknown_tokens"]) == (1, 1, 1)


# --- every file accounted for -------------------------------------------------------------------------

def doc_tree(root: Path, outside: Path) -> Path:
    """A tree like /usr/share/doc: plain text, extensionless text and a binary, compressed files (written
    by Python's gzip, bz2 and lzma and by zstandard), an image, a file over the size limit, a directory
    --exclude names, and a link that leaves the root."""
    import bz2
    import gzip
    import lzma
    import shutil

    import zstandard

    (root / "pkg" / "nodejs").mkdir(parents=True)
    (root / "pkg" / "a.txt").write_text("A short note about the package.\n")
    (root / "pkg" / "README").write_text("This package provides a small command line tool.\n")
    (root / "pkg" / "AUTHORS").write_text("Written by the maintainers of the tool.\n")
    shutil.copy(shutil.which("true"), root / "pkg" / "tool")  # an extensionless binary (ELF)
    (root / "pkg" / "changelog.gz").write_bytes(gzip.compress(b"Version 1.2 fixed the parser.\n"))
    (root / "pkg" / "NEWS.txt.bz2").write_bytes(bz2.compress(b"The news of this release.\n"))
    (root / "pkg" / "guide.md.xz").write_bytes(lzma.compress(b"# Guide\n\nRead the manual first.\n"))
    (root / "pkg" / "notes.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(b"Notes kept in zstd.\n"))
    (root / "pkg" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    (root / "pkg" / "big.txt").write_text("word " * 5000)  # 25 KB, over --max-file-mb 0.01
    (root / "pkg" / "nodejs" / "index.txt").write_text("Left out by --exclude nodejs.\n")
    (outside / "elsewhere.txt").write_text("outside the root\n")
    (root / "pkg" / "link.txt").symlink_to(outside / "elsewhere.txt")
    return root


def test_every_file_found_is_read_or_counted_as_skipped_by_reason(tmp_path):
    (tmp_path / "outside").mkdir()
    root = doc_tree(tmp_path / "doc", tmp_path / "outside")
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--exclude", "nodejs", "--max-file-mb",
                                      "0.01", "--progress", "off", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    rows = {r["path"]: r["text"] for r in ds.dataset(out).to_table(columns=["path", "text"]).to_pylist()}
    assert rows == {"pkg/a.txt": "A short note about the package.",
                    "pkg/README": "This package provides a small command line tool.",
                    "pkg/AUTHORS": "Written by the maintainers of the tool.",
                    "pkg/changelog.gz": "Version 1.2 fixed the parser.", "pkg/NEWS.txt.bz2": "The news of this release.",
                    "pkg/guide.md.xz": "# Guide\n\nRead the manual first.", "pkg/notes.txt.zst": "Notes kept in zstd."}
    assert summary["skipped_by_reason"] == {"no reader for this type": 2, "excluded": 1, "too large": 1,
                                            "link outside the root": 1}
    assert (summary["inputs"], summary["succeeded"], summary["failed"], summary["skipped"]) == (12, 7, 0, 5)
    assert "5 skipped (2 no reader for this type" in result.stderr


def test_dry_run_lists_every_skipped_file_with_its_reason(tmp_path):
    (tmp_path / "outside").mkdir()
    root = doc_tree(tmp_path / "doc", tmp_path / "outside")
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(tmp_path / "o.parquet"), "--exclude", "nodejs",
                                      "--dry-run"])
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    skips = {line["path"]: line["reason"] for line in lines if line["action"] == "skip"}
    assert skips["pkg/tool"] == skips["pkg/logo.png"] == "no reader for this type"
    assert skips["pkg/nodejs/index.txt"] == "excluded"
    assert "leaves the root" in skips["pkg/link.txt"]
    assert {line["path"] for line in lines if line["action"] == "run"} >= {"pkg/README", "pkg/changelog.gz"}


def test_an_exclude_that_matches_nothing_says_so_and_gitignore_patterns_match_directories(tmp_path):
    root = tmp_path / "t"
    for rel in ("nodejs/a.txt", "x/api/b.txt", "c.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("Some plain English text.\n")
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(tmp_path / "o.parquet"), "--exclude",
                                      "nodejs/", "--exclude", "api", "--exclude", "vendor", "--progress", "off",
                                      "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["succeeded"], summary["skipped_by_reason"]) == (1, {"excluded": 2})
    assert "--exclude 'vendor' matched no file" in result.stderr
    assert "'nodejs/' matched" not in result.stderr and "'api' matched" not in result.stderr


def test_a_compressed_bomb_and_a_broken_archive_are_one_failure_each(tmp_path):
    import gzip

    root = tmp_path / "t"
    root.mkdir()
    (root / "zeros.txt.gz").write_bytes(gzip.compress(b"\0" * (64 << 20)))
    (root / "cut.txt.gz").write_bytes(gzip.compress(b"Some text that is cut short.\n" * 100)[:-30])
    (root / "ok.txt").write_text("Fine.\n")
    result = CliRunner().invoke(app, ["embed", str(root), "--out", str(tmp_path / "o.parquet"), "--progress", "off",
                                      "--json", "--max-file-mb", "512"])
    assert result.exit_code == 1
    failures = {r["path"]: r["error"] for r in map(json.loads, Path(json.loads(
        result.stdout.strip().splitlines()[-1])["failures_file"]).read_text().splitlines())}
    assert "bomb" in failures["zeros.txt.gz"] and "ends early" in failures["cut.txt.gz"]
