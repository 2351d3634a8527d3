"""Text decoding and the reader's edge cases (no model needed)."""

from __future__ import annotations

import os

import pytest

from gpucli.core.errors import InputError
from gpucli.inputs.scope import WalkFilter
from gpucli.inputs.text import decode_text
from gpucli.inputs.walk import walk

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


@pytest.mark.parametrize("data, expected", [
    (b"\x1b[1;31mError:\x1b[0m the disk is full.\n", "Error: the disk is full.\n"),  # SGR colours
    (b"\x1b[38;5;208morange\x1b[m and \x1b[48;2;0;0;255mblue\x1b[0m\n", "orange and blue\n"),  # 256 / true colour
    (b"\x1b]0;window title\x07Text after a title.\n", "Text after a title.\n"),  # OSC, ended by BEL
    (b"\x1b]8;;https://example.org\x1b\\a link\x1b]8;;\x1b\\ here\n", "a link here\n"),  # OSC 8, ended by ST
    (b"N\x08NA\x08AM\x08ME\x08E\n     _\x08l_\x08s - list\n", "NAME\n     ls - list\n"),  # man page overstrikes
    (b"\x1b[2K\x1b[1GProgress 100%\r\n", "Progress 100%\r\n"),  # cursor moves
    ("caf\u00e9 \x1b[32mok\x1b[m".encode(), "café ok"),  # with non-ASCII text
    (b"tab\there\x0cform feed kept" + b"\x07 bell dropped" + b" and more words" * 10,
     "tab\there\x0cform feed kept bell dropped" + " and more words" * 10),  # one stray control in 180 chars
])
def test_escape_sequences_and_stray_controls_are_removed_not_a_reason_to_fail(data, expected):
    assert decode_text(data) == expected


def test_an_unterminated_title_sequence_costs_only_its_introducer():
    assert decode_text(b"\x1b]0;no end, then the whole rest of the text stays.") == \
        "0;no end, then the whole rest of the text stays."


def test_real_binaries_still_fail_with_escape_bytes_in_them():
    noise = bytes(range(1, 32)) * 200 + b"\x1b[0m" * 50  # control bytes well past 1%, a few escapes among them
    with pytest.raises(InputError, match="binary"):
        decode_text(noise)
    with pytest.raises(InputError, match="binary"):
        decode_text(os.urandom(5000))
