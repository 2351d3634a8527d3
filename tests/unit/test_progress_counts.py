"""The numbers the progress shows, without processes (issue 28, item 1): an input counts when its
results are back, apart from what is durable; the counting walk's total equals the walk's own,
with the same filters and rules, and stops when asked."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from gpucli.core.decision import Status
from gpucli.inputs.scope import WalkFilter, WalkReport
from gpucli.inputs.walk import count_inputs, walk_blocks
from tests.helpers import block, make_accounts, outputs, sources, unlistable

TXT = WalkFilter((".txt",))


def complete_in_status(accounts) -> int:
    return int((accounts.status == Status.COMPLETE).sum())


def test_an_input_counts_as_back_before_its_part_is_durable_and_as_done_after():
    accounts, _ = make_accounts()
    found = sources(3)
    items = block([(0, 0), (0, 1), (1, 0), (2, 0)])
    accounts.expect(found, items)
    first = items.take(np.array([0, 2]))  # input 0 half back, input 1 whole
    accounts.outputs(first, outputs(first))
    counts = accounts.counts_now()
    assert (counts.back, counts.done, counts.finished, counts.rows_back) == (1, 0, 1, 2)
    assert accounts.open_inputs() == 2
    rest = items.take(np.array([1, 3]))
    accounts.outputs(rest, outputs(rest))
    committed = accounts.write(accounts.take_commit())
    counts = accounts.counts_now()
    assert (counts.back, counts.done, counts.finished) == (3, 0, 3), "written by the sink, not yet durable here"
    accounts.durable(committed)
    counts = accounts.counts_now()
    assert (counts.back, counts.done, counts.finished, counts.rows, counts.rows_back) == (0, 3, 3, 4, 0)
    assert accounts.complete == complete_in_status(accounts) == 0 and accounts.open_inputs() == 0


def test_an_input_back_then_failed_counts_once_as_failed():
    accounts, _ = make_accounts()
    found = sources(2)
    items = block([(0, 0), (1, 0)])
    accounts.expect(found, items)
    accounts.outputs(items, outputs(items))
    assert accounts.complete == complete_in_status(accounts) == 2
    accounts.fail_items(items.take(np.array([0])), "infer", "a retried batch failed")
    accounts.lost("no result came back")  # the other, complete but never written
    counts = accounts.counts_now()
    assert (counts.back, counts.failed, counts.finished) == (0, 2, 2)
    assert accounts.complete == complete_in_status(accounts) == 0


def test_at_the_end_only_what_was_written_counts_and_nothing_is_in_flight():
    accounts, _ = make_accounts()
    found = sources(2)
    items = block([(0, 0), (1, 0)])
    accounts.expect(found, items)
    accounts.outputs(items, outputs(items))
    counts = accounts.counts_now()
    counts.ended = True  # an interrupt before the part was written
    assert (counts.finished, counts.shown_rows) == (0, 0)


# --- the counting walk ---------------------------------------------------------------------------

def walked(roots, flt=TXT, exclude=()) -> int:
    """The walk's entries and the files it passed over (issue 52: both are counted ahead)."""
    report = WalkReport()
    return sum(len(b) for b in walk_blocks([str(r) for r in roots], flt, exclude, report)) + report.passed_over


def test_the_count_is_the_walk_s_with_its_filters_links_hidden_files_and_outputs(tree, tmp_path):
    root = tree({"a.txt": "a", "b.md": "b", ".hidden.txt": "h", "sub/c.txt": "c", "sub/.git/d.txt": "d",
                 "deep/er/e.TXT": "e", "caf\u00e9.txt": "x", "out.parquet/part-0.parquet": b"p",
                 "out.parquet/_gpucli/ledger.sqlite": b"l", "out.failures.jsonl": ""})
    os.symlink(root / "a.txt", root / "link.txt")  # the same file twice: counted once
    os.symlink(tmp_path, root / "outside")  # a directory outside the root: one skip record
    os.symlink(root / "gone.txt", root / "dangling.txt")  # a failure record
    os.mkfifo(root / "pipe.txt")  # a failure record, never opened
    for flt in (TXT, WalkFilter((".txt",), exclude=("sub/*",)), WalkFilter((".txt",), include=("*.md", "c.*")),
                WalkFilter(())):
        assert count_inputs([str(root)], flt) == walked([root], flt), flt
    assert count_inputs([str(root)], TXT) == 8  # 7 entries and b.md, passed over


def test_the_count_leaves_out_what_the_walk_excludes_and_counts_unlistable_directories_once(tree, monkeypatch):
    root = tree({"a.txt": "a", "out.jsonl": "{}", "locked/b.txt": "b", "two/c.txt": "c"})
    exclude = [str(root / "out.jsonl"), str(root / "two")]
    unlistable(monkeypatch, root / "locked")
    flt = WalkFilter((".txt", ".jsonl"))
    assert count_inputs([str(root)], flt, exclude) == walked([root], flt, exclude) == 2  # a.txt, locked's record


def test_the_count_of_overlapping_roots_and_a_file_root_is_the_walk_s(tree):
    root = tree({"a.txt": "a", "sub/b.txt": "b", "sub/c.txt": "c"})
    roots = [root, root / "sub", root / "sub" / "b.txt"]
    assert count_inputs([str(r) for r in roots], TXT) == walked(roots) == 3


def test_the_count_stops_when_asked(tree):
    root = tree({f"d{i}/f.txt": "x" for i in range(5)})
    stop = threading.Event()
    stop.set()
    assert count_inputs([str(root)], TXT, stop=stop) is None
    assert count_inputs([str(root)], TXT, stop=threading.Event()) == 5


@pytest.mark.parametrize("limit,expected", [(0, 6), (4, 4), (10, 6)])
def test_the_job_s_count_ahead_is_within_limit_and_only_when_progress_shows(tree, tmp_path, monkeypatch, limit,
                                                                           expected):
    import io
    import time
    from types import SimpleNamespace

    import gpucli.engines.run_inputs
    from gpucli.core.config import RunConfig
    from gpucli.core.progress import PlainProgress, Progress
    from gpucli.engines.job import Job
    from tests.fake_task import FAKE

    calls = []
    monkeypatch.setattr(gpucli.engines.run_inputs, "count_inputs", lambda *a: calls.append(a) or gpucli.inputs.walk.count_inputs(*a))
    root = tree({f"f{i}.txt": "x" for i in range(6)})
    for progress, shown in ((Progress("fake"), False), (PlainProgress("fake", stream=io.StringIO()), True)):
        calls.clear()
        job = Job(RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "o.parquet"), limit=limit), progress)
        job.output = SimpleNamespace(walk_exclusions=lambda: [str(root / "f5.txt")] if limit == 4 else [])
        job.count_ahead()
        end = time.monotonic() + 60  # a hang guard
        while shown and job.counts.expected is None and time.monotonic() < end:
            time.sleep(0.01)
        assert len(calls) == shown and job.counts.expected == (expected if shown else None)
