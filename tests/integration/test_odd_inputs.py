"""Whole runs on the fake task over trees that used to break them: an output inside its own
input tree, a file named twice, names that are not UTF-8."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucli.output.ledger import Ledger
from tests.helpers import read_rows, run_fake

pytestmark = pytest.mark.slow


def rows(out: Path) -> list[dict]:
    if out.suffix == ".jsonl":
        return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return read_rows(out)


def failures(summary) -> list[dict]:
    return [json.loads(line) for line in Path(summary.failures_file).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_an_output_inside_the_input_tree_is_not_read_as_input(tree, name):
    root = tree({"doc.txt": "hello world\n"})
    out = root / name
    include = ("*.txt", "*.jsonl", "*.json", "*.sqlite", "*.parquet", "lock")  # everything the output holds
    for _ in range(2):
        summary = run_fake([root], out, include=include)
        assert (summary.exit_code, summary.failed, summary.inputs) == (0, 0, 1), failures(summary)
    assert [r["path"] for r in rows(out)] == ["doc.txt"]


def test_a_file_named_twice_is_one_input(tree, tmp_path):
    root = tree({"docs/a.txt": "alpha\n", "docs/b.txt": "beta\n"})
    os.symlink(root / "docs" / "a.txt", root / "docs" / "link-to-a.txt")
    out = tmp_path / "out.parquet"
    summary = run_fake([root / "docs", root / "docs" / "a.txt", root / "docs" / "b.txt"], out)
    assert (summary.inputs, summary.succeeded, summary.rows) == (2, 2, 2)
    assert sorted(r["path"] for r in rows(out)) == ["a.txt", "b.txt"]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_names_that_are_not_utf8_and_other_odd_names_are_inputs_and_rerun_unchanged(tmp_path, suffix):
    root = tmp_path / "in"
    root.mkdir()
    names = {b"caf\xe9.txt": b"latin one\n", b"bad \xff\xfe.txt": b"\xff\xfe not utf8 content",
             b"new\nline.txt": b"newline\n", "sp ace 中文.txt".encode(): b"cjk\n",
             b"d\xe9j\xe0/inner.txt": b"inner\n"}
    for raw, data in names.items():
        path = os.fsencode(root) + b"/" + raw
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    out = tmp_path / f"out{suffix}"
    first = run_fake([root], out)
    assert (first.succeeded, first.failed) == (4, 1)
    good = ["caf\\xe9.txt", "d\\xe9j\\xe0/inner.txt", "new\nline.txt", "sp ace 中文.txt"]
    assert sorted(r["path"] for r in rows(out)) == good
    assert [(f["path"], f["stage"]) for f in failures(first)] == [("bad \\xff\\xfe.txt", "decode")]
    state = Path(str(out) + ".gpucli")  # beside the output, whatever its kind
    ledger = Ledger(state)
    try:
        assert {p: k.status.stored for p, k in ledger.lookup(good + ["bad \\xff\\xfe.txt"]).items()} == \
            {**dict.fromkeys(good, "done"), "bad \\xff\\xfe.txt": "failed"}
    finally:
        ledger.close()
    again = run_fake([root], out, prune=True)
    assert (again.unchanged, again.succeeded, again.failed, again.pruned) == (4, 0, 1, 0)
    assert sorted(r["path"] for r in rows(out)) == good


def test_the_ray_engine_reads_names_that_are_not_utf8(ray_session, tmp_path):
    from tests.helpers import run_with

    root = tmp_path / "in"
    root.mkdir()
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"latin one\n")
    (root / "plain.txt").write_text("plain\n")
    out = tmp_path / "out.parquet"
    summary = run_with("ray", "tests.fake_task:FakeTask", [root], out)
    assert (summary.succeeded, summary.failed) == (2, 0), failures(summary)
    assert sorted(r["path"] for r in rows(out)) == ["caf\\xe9.txt", "plain.txt"]


def test_a_file_served_in_short_reads_is_read_whole(tmp_path, monkeypatch):
    """Network and FUSE file systems may return fewer bytes than asked before the end: the
    reader keeps reading up to the size the file had when opened."""
    import os as os_module

    from gpucli.core.records import Source
    from gpucli.engines import reader

    path = tmp_path / "a.txt"
    path.write_bytes(b"0123456789" * 100)
    real_read = os_module.read
    monkeypatch.setattr(reader.os, "read", lambda fd, n: real_read(fd, min(n, 7)))
    st = path.stat()
    data = reader._read_bytes(Source(0, "a.txt", str(path), st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino),
                              1 << 20)
    assert data == b"0123456789" * 100


def test_a_window_whose_tokens_map_to_no_characters_takes_the_full_offsets():
    from gpucli.tasks.text.tokens import _ends

    class Encoding:
        offsets = [(0, 0), (0, 3), (4, 6)]

        def __len__(self):
            return 3

        def token_to_chars(self, i):
            return None if i == 0 else self.offsets[i]

    assert _ends(Encoding()) == Encoding.offsets
