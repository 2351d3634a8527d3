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
