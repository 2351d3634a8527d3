"""Digests remembered by a file's identity (gpucli/models/digests.py, issue 34): a worker need not hash
90 MB at every start, and a changed file is never taken for the one that was hashed."""

from __future__ import annotations

import hashlib
import os
import time

from gpucli.models import digests


def old(path, seconds: float = 60.0) -> None:
    """Times as if written a while ago (a file newer than RACY_S is never remembered)."""
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_digest_is_remembered_and_not_recomputed(tmp_path, monkeypatch):
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights" * 1000)
    old(f)
    time.sleep(0.01)
    monkeypatch.setattr(digests, "RACY_S", 0.0)  # ctime cannot be set back: let the file count as old
    first = digests.file_sha256(f, tmp_path / "cache")
    assert first == hashlib.sha256(f.read_bytes()).hexdigest()
    assert len(list((tmp_path / "cache" / "digests").iterdir())) == 1
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert digests.file_sha256(f, tmp_path / "cache") == first
    assert str(f) not in map(str, opened)  # the memo answered: the file itself was not read


def test_a_rewrite_a_touch_or_a_copy_is_hashed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(digests, "RACY_S", 0.0)
    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 100)
    digests.file_sha256(f, tmp_path / "cache")
    st = f.stat()
    f.write_bytes(b"b" * 100)  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime: the ctime still tells
    assert digests.file_sha256(f, tmp_path / "cache") == hashlib.sha256(b"b" * 100).hexdigest()
    copy = tmp_path / "copy.bin"
    copy.write_bytes(b"c" * 100)
    assert digests.file_sha256(copy, tmp_path / "cache") == hashlib.sha256(b"c" * 100).hexdigest()


def test_a_file_changed_just_now_is_not_remembered(tmp_path):
    """git's racy rule: a write within the clock tick of the hash would leave the times as they were."""
    f = tmp_path / "w.bin"
    f.write_bytes(b"fresh")
    assert digests.file_sha256(f, tmp_path / "cache") == hashlib.sha256(b"fresh").hexdigest()
    assert not (tmp_path / "cache" / "digests").exists()


def test_a_cache_that_cannot_be_written_only_costs_the_hash(tmp_path, monkeypatch):
    monkeypatch.setattr(digests, "RACY_S", 0.0)
    f = tmp_path / "w.bin"
    f.write_bytes(b"x" * 10)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory would be")
    assert digests.file_sha256(f, blocker) == hashlib.sha256(b"x" * 10).hexdigest()


def test_a_damaged_memo_is_hashed_again_not_trusted(tmp_path, monkeypatch):
    """A memo of 64 characters that is no digest (a disk error, another tool's file) would make a
    sound install look corrupt: it is ignored and the file hashed."""
    monkeypatch.setattr(digests, "RACY_S", 0.0)
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    right = digests.file_sha256(f, tmp_path / "cache")
    (memo,) = (tmp_path / "cache" / "digests").iterdir()
    memo.write_text("z" * 64, encoding="ascii")
    assert digests.file_sha256(f, tmp_path / "cache") == right
