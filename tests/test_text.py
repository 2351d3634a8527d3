"""Text decoding and the reader's edge cases (no model needed)."""

from __future__ import annotations

import os

import pytest

from gpucli.errors import InputError
from gpucli.tasks._text import decode_text
from gpucli.walk import WalkFilter, walk

ZH = "深度学习是机器学习的一个分支，它使用多层神经网络来学习数据的表示。"


@pytest.mark.parametrize("data,expected", [
    (b"plain ascii", "plain ascii"),
    ("naïve café".encode(), "naïve café"),
    ("\ufeffwith bom".encode("utf-8"), "with bom"),
    ("utf16 text, enough of it to tell".encode("utf-16"), "utf16 text, enough of it to tell"),
    (ZH.encode("gbk"), ZH),
    (ZH.encode("gb18030"), ZH),
    ("繁體中文的文字，用來測試大五碼的編碼偵測是否正確。".encode("big5"), "繁體中文的文字，用來測試大五碼的編碼偵測是否正確。"),
])
def test_decodes_common_encodings(data, expected):
    assert decode_text(data) == expected


@pytest.mark.parametrize("data", [
    os.urandom(2048),
    bytes(range(256)) * 8,
    b"\x89PNG\r\n\x1a\n" + os.urandom(500),
    b"\x7fELF\x02\x01\x01" + b"\x00" * 200,
])
def test_binary_content_is_refused(data):
    with pytest.raises(InputError) as err:
        decode_text(data)
    assert err.value.stage == "decode" and "binary" in str(err.value)


def test_walk_filters_and_skips(tmp_path):
    for rel in ("a.txt", "b.md", "c.jpg", "sub/d.txt", ".hidden/e.txt", "sub/.f.txt", "odd name ü.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    os.symlink(tmp_path / "sub", tmp_path / "loop")  # a directory link inside the root: walked once
    found = [f.source.path for f in walk([str(tmp_path)], WalkFilter((".txt",))) if f.source]
    assert found == ["a.txt", "odd name ü.txt", "sub/d.txt"]
    md = [f.source.path for f in walk([str(tmp_path)], WalkFilter((".txt",), include=("*.md",))) if f.source]
    assert md == ["b.md"]
    no_sub = [f.source.path for f in walk([str(tmp_path)], WalkFilter((".txt",), exclude=("sub/*",))) if f.source]
    assert no_sub == ["a.txt", "odd name ü.txt"]


def test_symlink_loop_is_a_failure_record(tmp_path):
    os.symlink(tmp_path / "b.txt", tmp_path / "a.txt")
    os.symlink(tmp_path / "a.txt", tmp_path / "b.txt")
    records = [f.failure for f in walk([str(tmp_path)], WalkFilter((".txt",)))]
    assert [(r.path, r.stage) for r in records] == [("a.txt", "read"), ("b.txt", "read")]
    assert all("loop" in r.error for r in records)
