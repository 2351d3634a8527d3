"""The commit step in real local runs (issue 40): when a part is due, and where the ledger and
the failures file are written — never on the event loop, whatever fails."""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from gpucli.output.ledger import Ledger
from gpucli.output.output import FailureLog
from tests.helpers import expected_rows, parquet_rows, run_fake

pytestmark = pytest.mark.slow


def parts(out: Path) -> list[str]:
    return sorted(name for name in os.listdir(out) if name.startswith("part-"))


def test_a_text_of_tens_of_thousands_of_chunks_beside_small_files_writes_a_few_parts(tree, tmp_path):
    """The long text's last line is its cheapest item, so it goes last in its sorted window
    (engines/batching.py), after the small files that share the window: those complete one
    pool event after another while the long text, 20,000 rows held, is still open. Its held
    rows made each such event write a part of a few rows (a Parquet file and a synced ledger
    transaction); only rows of complete inputs make a part due."""
    files = {"long.txt": "".join(f"line {i} of the long text\n" for i in range(20_000)) + "end\n"}
    files.update({f"small/s{i:03d}.txt": f"small text {i}\n" for i in range(300)})
    root = tree(files)
    out = tmp_path / "out.parquet"
    summary = run_fake([root], out, {"sleep_ms": 1}, batch_size=8, workers_per_device=1)  # a batch an event
    assert summary.exit_code == 0 and summary.succeeded == 301 and summary.rows == 20_301
    assert parquet_rows(out) == expected_rows(root)
    assert len(parts(out)) <= 3, parts(out)


def test_every_record_of_a_run_with_failures_skips_and_unchanged_inputs_is_written_off_the_loop(
        tree, tmp_path, monkeypatch):
    """Ledger transactions (inputs done, failed, unchanged, forgotten) and failure records are
    disk writes with syncs: all of them run in the writer's thread, none on the event loop's
    (which runs the pipeline here, in the test's main thread); the counts stay the same."""
    threads: dict[str, set[str]] = {}

    def noted(cls, name):
        real = getattr(cls, name)

        def call(self, *args, **kwargs):
            threads.setdefault(name, set()).add(threading.current_thread().name)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, call)

    for cls, name in ((Ledger, "mark_done"), (Ledger, "mark_failed"), (Ledger, "mark_unchanged"),
                      (Ledger, "forget"), (FailureLog, "add")):
        noted(cls, name)
    files: dict[str, str | bytes] = {f"bad/b{i:03d}.txt": b"\xff\xfe not text" for i in range(150)}
    files.update({f"good/g{i:03d}.txt": f"good {i}\nmore {i}\n" for i in range(60)})
    files["boom.txt"] = "BOOM\n"
    root = tree(files)
    out = tmp_path / "out.parquet"
    first = run_fake([root], out, batch_size=1, part_rows=20, workers_per_device=1)
    assert (first.succeeded, first.failed, first.failed_known) == (60, 151, 0)
    assert {"mark_done", "mark_failed", "add"} <= set(threads)
    (root / "good" / "g000.txt").touch()  # same content, a new mtime: unchanged, its stat recorded
    os.utime(root / "good" / "g000.txt", ns=(1, 1))
    (root / "good" / "g001.txt").unlink()
    (root / "good" / "g001.txt").symlink_to(tmp_path)  # a link that leaves the root: a skip record
    second = run_fake([root], out, batch_size=1, part_rows=20, workers_per_device=1)
    assert (second.unchanged, second.failed, second.failed_known) == (59, 151, 151)
    assert {"mark_unchanged", "forget"} <= set(threads), threads
    assert all(name.startswith("gpucli-writer") for names in threads.values() for name in names), threads
    assert parquet_rows(out) == Counter((f"good/g{i:03d}.txt", chunk, f"{word} {i}") for i in range(60) if i != 1
                                        for chunk, word in enumerate(("good", "more")))
