"""`--watch`'s policies on plain data, without processes: changes held per path until quiet
(gpucli/inputs/changes.py), the passes' plan and report (gpucli/engines/passes.py), the walk of
what changed (gpucli/inputs/changed_walk.py), what the watcher drops (gpucli/inputs/watcher.py),
and the ledger's answers a watch asks for (gpucli/output/ledger.py). The clock and the stat are
given, so that nothing here waits on time except the one watcher thread, on a deadline."""

from __future__ import annotations

import os
import queue
import stat
from pathlib import Path

import pytest

from gpucli.core.config import RunConfig
from gpucli.core.errors import UsageError
from gpucli.core.records import MOVED_IN_READ, Failure, Item, ReadChunk, Source
from gpucli.core.stages import Stage
from gpucli.engines.passes import Pass, PassKind, PassReport, Rescans, Totals, rescan_every, without_moved
from gpucli.engines.reader import read_chunk
from gpucli.inputs.changed_walk import changed_keys, walk_changed
from gpucli.inputs.changes import Change, FileStat, PendingChanges, split_young
from gpucli.inputs.scope import WalkFilter, WalkReport
from gpucli.inputs.walk import walk_blocks
from gpucli.inputs.watcher import Changed, TreeWatcher
from gpucli.output.ledger import Ledger
from gpucli.tasks import Task, TaskSpec

QUIET = 0.5
A = FileStat(stat.S_IFREG, 10, 1_000, 7)
A_GREW = FileStat(stat.S_IFREG, 20, 2_000, 7)


def still(stats: dict[str, FileStat | None]):
    """A `look` that answers from a table: the file system as the test says it is."""
    return lambda path: stats.get(path)


# --- held until quiet -------------------------------------------------------------------------
def test_a_path_is_ready_only_once_no_event_came_for_the_quiet_interval():
    pending = PendingChanges(100)
    pending.add([Change("/t/a.txt", A)], now=0.0)
    assert pending.ready(0.4, QUIET, still({"/t/a.txt": A})) == []
    assert pending.next_quiet(QUIET) == pytest.approx(0.5)
    assert pending.ready(0.5, QUIET, still({"/t/a.txt": A})) == [Change("/t/a.txt", A)]
    assert len(pending) == 0, "taken out once ready"


def test_events_coalesce_per_path_with_the_time_of_the_last_one():
    pending = PendingChanges(100)
    for i in range(1000):  # a file written in 1000 pieces: one entry, quiet from its last write
        pending.add([Change("/t/a.txt", A)], now=i * 0.001)
    assert len(pending) == 1
    assert pending.ready(0.999 + 0.49, QUIET, still({"/t/a.txt": A})) == []
    assert [c.path for c in pending.ready(0.999 + 0.5, QUIET, still({"/t/a.txt": A}))] == ["/t/a.txt"]


def test_a_file_whose_size_changed_without_an_event_waits_the_quiet_interval_again():
    """A writer on a network file system may send no event: the stat says it is still moving."""
    pending = PendingChanges(100)
    pending.add([Change("/t/a.txt", A)], now=0.0)
    assert pending.ready(1.0, QUIET, still({"/t/a.txt": A_GREW})) == []
    assert len(pending) == 1
    assert pending.ready(1.4, QUIET, still({"/t/a.txt": A_GREW})) == []
    assert pending.ready(1.5, QUIET, still({"/t/a.txt": A_GREW})) == [Change("/t/a.txt", A_GREW)]


def test_a_deleted_path_is_ready_as_gone_and_one_that_came_back_waits_again():
    pending = PendingChanges(100)
    pending.add([Change("/t/gone.txt", None), Change("/t/back.txt", None)], now=0.0)
    ready = pending.ready(1.0, QUIET, still({"/t/back.txt": A}))
    assert ready == [Change("/t/gone.txt", None)]
    assert pending.ready(1.5, QUIET, still({"/t/back.txt": A})) == [Change("/t/back.txt", A)]


def test_a_save_by_rename_is_one_change_of_the_file():
    """An editor writes a temporary and renames it over the file: the file's path changes once
    (the watcher drops the hidden temporary: see the watcher's test below)."""
    pending = PendingChanges(100)
    pending.add([Change("/t/a.txt", None)], now=0.0)  # the old file renamed away or unlinked ...
    pending.add([Change("/t/a.txt", A_GREW)], now=0.01)  # ... and the temporary renamed over it
    assert pending.ready(0.6, QUIET, still({"/t/a.txt": A_GREW})) == [Change("/t/a.txt", A_GREW)]


def test_the_oldest_change_goes_first_and_a_young_one_does_not_hold_it_back():
    pending = PendingChanges(100)
    pending.add([Change("/t/old.txt", A)], now=0.0)
    pending.add([Change("/t/new.txt", A)], now=0.4)
    assert [c.path for c in pending.ready(0.6, QUIET, still({"/t/old.txt": A, "/t/new.txt": A}))] == ["/t/old.txt"]
    assert pending.next_quiet(QUIET) == pytest.approx(0.9)


def test_memory_stays_bounded_under_an_event_storm_and_says_the_tree_must_be_walked():
    pending = PendingChanges(max_paths=1000)
    for i in range(5000):  # a git checkout of another branch
        pending.add([Change(f"/t/f{i}.txt", A)], now=0.0)
        assert len(pending) <= 1000
    assert pending.overflowed
    pending.clear()
    assert not pending.overflowed and len(pending) == 0


def test_a_whole_walk_holds_files_written_within_the_quiet_interval():
    now_ns, quiet_ns = 10 * 10**9, 5 * 10**8
    old = Source(0, "old.txt", "/t/old.txt", 3, now_ns - 2 * quiet_ns)
    young = Source(1, "young.txt", "/t/young.txt", 3, now_ns - quiet_ns // 2)
    exempt = Source(2, "quiet.txt", "/t/quiet.txt", 3, now_ns + 10**9)  # an mtime in the future: quiet already
    bucket = Source(3, "obj.txt", "s3://b/obj.txt", 3, now_ns)  # an object in a bucket is whole
    failure = Failure("bad.txt", Stage.READ, "cannot stat")
    kept, held = split_young([old, young, exempt, bucket, failure], now_ns, quiet_ns, frozenset({"/t/quiet.txt"}))
    assert kept == [old, exempt, bucket, failure] and held == [young]


# --- the read after the walk ---------------------------------------------------------------------
class _Lines(Task):
    name = "lines"

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        return [Item(source.id, 0, data.decode(), 1, {})]


def _walked(path: Path) -> Source:
    st = path.stat()
    return Source(0, path.name, str(path), st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino)


def test_a_file_rewritten_between_walk_and_read_keeps_the_stat_of_what_was_read(tmp_path: Path):
    """Its rows and its ledger entry are of the content read: an older stat beside newer bytes
    would pass the next version off as unchanged, or keep the wrong size in the rows."""
    path = tmp_path / "a.txt"
    path.write_text("a long first version\n")
    source = _walked(path)
    path.write_text("short\n")  # the same inode, rewritten
    os.utime(path, ns=(source.mtime_ns + 10**9, source.mtime_ns + 10**9))
    chunk = read_chunk([source], _Lines(TaskSpec("lines", "none")), 2**20)
    assert chunk.sources == [source] and (source.size, source.mtime_ns) == (6, path.stat().st_mtime_ns)


def test_a_file_gone_or_replaced_between_walk_and_read_is_marked_as_moved(tmp_path: Path):
    gone, replaced = tmp_path / "gone.txt", tmp_path / "replaced.txt"
    for path in (gone, replaced):
        path.write_text("first\n")
    sources = [_walked(gone), _walked(replaced)]
    sources[1].id = 1
    gone.unlink()
    (tmp_path / ".replaced.swp").write_text("second\n")
    os.replace(tmp_path / ".replaced.swp", replaced)  # an editor's save: a new inode under the old name
    chunk = read_chunk(sources, _Lines(TaskSpec("lines", "none")), 2**20)
    assert [(f.path, f.cause) for f in chunk.failures] == [("gone.txt", MOVED_IN_READ),
                                                           ("replaced.txt", MOVED_IN_READ)]


# --- passes -------------------------------------------------------------------------------------
def test_rescans_come_every_interval_and_at_least_every_poll_once_events_stop():
    rescans = Rescans(600.0)
    rescans.walked(100.0)
    assert not rescans.due(699.0) and rescans.due(700.0)
    assert rescans.until(400.0) == pytest.approx(300.0)
    rescans.at_least_every(60.0)
    assert rescans.due(160.0)
    never = Rescans(0.0)
    assert not never.due(10**9) and never.until(0.0) == float("inf")
    never.at_least_every(60.0)
    assert never.every_s == 60.0
    assert rescan_every(urls=True, rescan_s=600.0, poll_s=30.0) == 30.0
    assert rescan_every(urls=False, rescan_s=600.0, poll_s=30.0) == 600.0


def test_a_pass_says_what_it_did_in_one_json_line_and_one_log_line():
    report = PassReport(3, PassKind.CHANGES, 4, Totals(found=3, succeeded=2, failed=1, rows=5, removed=1),
                        pending=7, seconds=0.1234)
    line = report.line()
    assert line == {"event": "pass", "pass": 3, "kind": "changes", "changed": 4, "inputs": 3, "succeeded": 2,
                    "failed": 1, "unchanged": 0, "skipped": 0, "removed": 1, "rows": 5, "pending": 7,
                    "seconds": 0.123}
    assert report.text().startswith("pass 3 (4 change(s)): 3 input(s), 2 written, 1 failed")
    assert report.worth_saying
    probe = PassReport(4, PassKind.CHANGES, 1, Totals(), pending=0, seconds=0.0)
    assert not probe.worth_saying, "an editor's probe file come and gone says nothing"
    assert Pass(1, PassKind.START).walks_all and not Pass(2, PassKind.CHANGES).walks_all


def test_an_input_gone_or_replaced_between_walk_and_read_is_no_failure_in_a_watch():
    moved = Failure("a.txt", Stage.READ, "cannot open: No such file or directory", cause=MOVED_IN_READ)
    other = Failure("b.txt", Stage.READ, "empty file (0 bytes)")
    chunk = without_moved(ReadChunk(failures=[moved, other], found=5))
    assert chunk.failures == [other] and chunk.found == 4


def test_watch_is_refused_with_what_cannot_keep_an_output_in_step():
    for setting, said in (({"engine": "ray"}, "--engine ray"), ({"dry_run": True}, "--dry-run"),
                          ({"limit": 5}, "--limit")):
        with pytest.raises(UsageError, match=f"--watch does not go with {said}"):
            RunConfig(task="embed", paths=("x",), watch=True, **setting)
    with pytest.raises(UsageError, match="--watch-debounce-ms must be positive"):
        RunConfig(task="embed", paths=("x",), watch=True, watch_debounce_ms=0)


# --- the walk of what changed -----------------------------------------------------------------
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for rel in ("a.txt", "sub/b.txt", "sub/deeper/c.txt", "sub/skip.png", ".hidden/h.txt", "sub/.h.txt",
                "other/x.txt", "sub/old.jsonl", "sub/old.jsonl.gpucli/ledger.sqlite", "sub/old.failures.jsonl",
                "made/v.parquet/_gpucli/ledger.sqlite", "made/v.parquet/notes.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"text of {rel}\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    os.symlink(tmp_path / "outside.txt", root / "sub" / "leaves.txt")
    return root


def _found(blocks) -> dict[str, str]:
    """path -> what the walk made of it: 'input' or the failure's stage."""
    return {e.path: "input" if isinstance(e, Source) else e.stage.value for block in blocks for e in block}


def test_the_walk_of_changed_paths_yields_what_the_whole_walk_yields_for_them(tree: Path):
    flt = WalkFilter((".txt",))
    whole = _found(walk_blocks([str(tree)], flt))
    every_path = [str(p) for p in tree.rglob("*")]
    assert _found(walk_changed([str(tree)], flt, [], every_path)) == whole
    assert "sub/.h.txt" not in whole and ".hidden/h.txt" not in whole and whole["sub/leaves.txt"] == "skip"
    assert not any(path.startswith(("sub/old", "made/")) for path in whole), "another gpucli output is no input"


def test_a_changed_directory_is_walked_whole_and_a_hidden_or_gone_one_yields_nothing(tree: Path):
    flt = WalkFilter((".txt",))
    assert set(_found(walk_changed([str(tree)], flt, [], [str(tree / "sub")]))) == {
        "sub/b.txt", "sub/deeper/c.txt", "sub/leaves.txt"}
    assert _found(walk_changed([str(tree)], flt, [], [str(tree / ".hidden" / "h.txt"), str(tree / "gone.txt"),
                                                      str(tree / "nowhere" / "x.txt")])) == {}


def test_the_walk_of_changes_leaves_out_the_output_and_names_rows_as_the_run_does(tree: Path, tmp_path: Path):
    flt = WalkFilter((".txt",))
    found = _found(walk_changed([str(tree / "sub"), str(tree / "other")], flt, [str(tree / "other" / "x.txt")],
                                [str(tree / "sub" / "b.txt"), str(tree / "other" / "x.txt")]))
    assert found == {"sub/b.txt": "input"}, "relative to the roots' common directory; the output never read"


def test_an_unlistable_directory_is_reported_so_nothing_under_it_is_pruned(tree: Path, monkeypatch):
    real = os.scandir

    def refusing(path="."):
        if str(path).endswith("sub"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(os, "scandir", refusing)
    report = WalkReport()
    found = _found(walk_changed([str(tree)], WalkFilter((".txt",)), [], [str(tree / "sub" / "b.txt")], report))
    assert found == {"sub": "read"} and report.complete
    assert not report.may_prune("sub/b.txt") and report.may_prune("a.txt")


def test_changed_paths_are_named_as_rows_only_under_roots_that_are_there(tree: Path, tmp_path: Path):
    assert changed_keys([str(tree / "sub" / "b.txt"), str(tree / "sub")], [str(tree)]) == ["sub/b.txt", "sub"]
    assert changed_keys([str(tmp_path / "gone" / "x.txt")], [str(tmp_path / "gone")]) == []


def test_an_emptied_root_prunes_nothing(tmp_path: Path):
    root = tmp_path / "mount"
    root.mkdir()
    report = WalkReport()
    list(walk_changed([str(root)], WalkFilter((".txt",)), [], [str(root / "a.txt")], report))
    assert not report.may_prune("a.txt"), "an unmounted share looks like an empty directory"


# --- the watcher ----------------------------------------------------------------------------------
def test_the_watcher_drops_hidden_names_and_the_output_and_keeps_the_rest(tmp_path: Path):
    root, out = tmp_path / "docs", tmp_path / "docs" / "out.parquet"
    root.mkdir()
    watcher = TreeWatcher([str(root), str(tmp_path / "lone.txt")], [str(out)], lambda message: None)
    assert watcher.wanted(str(root / "a" / "b.txt")) and watcher.wanted(str(root))
    assert not watcher.wanted(str(root / ".git" / "index")) and not watcher.wanted(str(root / ".a.txt.swp"))
    assert not watcher.wanted(str(out / "part-00001.parquet")) and not watcher.wanted(str(out))
    assert watcher.wanted(str(tmp_path / "lone.txt")) and not watcher.wanted(str(tmp_path / "other.txt"))


def test_the_watcher_thread_delivers_a_written_file_with_its_stat(tmp_path: Path):
    got: queue.Queue = queue.Queue()
    watcher = TreeWatcher([str(tmp_path)], [], got.put)
    watcher.start()
    try:
        target = tmp_path / "new.txt"
        deadline_s = 30.0  # a hang guard: events come within a few hundred ms
        while True:  # the thread arms its watch after it starts: write until an event says it saw one
            target.write_text("hello\n")
            try:
                message = got.get(timeout=min(1.0, deadline_s))
                break
            except queue.Empty:
                deadline_s -= 1.0
                assert deadline_s > 0, "no event within 30 s"
        assert isinstance(message, Changed)
        change = next(c for c in message.changes if c.path == str(target))
        assert change.stat is not None and change.stat.size == 6
    finally:
        watcher.stop()


# --- the ledger's answers -----------------------------------------------------------------------
def _source(path: str, size: int = 5) -> Source:
    return Source(0, path, "/" + path, size, 1, digest=f"d-{path}-{size}")


def test_a_later_pass_redoing_an_input_makes_its_rows_of_an_earlier_pass_stale(tmp_path: Path):
    ledger = Ledger(tmp_path)
    try:
        ledger.mark_done([_source("a.txt")], [1], "part-00001.parquet")  # the first pass of a new output
        ledger.next_pass()
        ledger.mark_done([_source("a.txt", 6)], [1], "part-00002.parquet")
        assert ledger.stale() == {"part-00001.parquet": {"a.txt"}}
    finally:
        ledger.close()


def test_the_inputs_at_and_under_changed_paths_that_a_walk_did_not_see_are_unseen(tmp_path: Path):
    ledger = Ledger(tmp_path)
    try:
        paths = ["a.txt", "d/x.txt", "d/e/y.txt", "d0.txt", "dd/z.txt", "keep.txt"]
        ledger.mark_done([_source(p) for p in paths], [1] * len(paths), "part-00001.parquet")
        ledger.mark_seen(["d/x.txt"])
        assert sorted(ledger.unseen_at(["a.txt", "d"], ["d"])) == ["a.txt", "d/e/y.txt"]
        ledger.clear_seen()
        assert sorted(ledger.unseen_at([], ["d"])) == ["d/e/y.txt", "d/x.txt"]
    finally:
        ledger.close()


def test_docs_watch_shows_the_pass_line_and_the_bound_the_code_has():
    import json
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "watch.md").read_text(encoding="utf-8")
    shown = json.loads(re.search(r"```json\n(.*?)\n```", text, re.DOTALL).group(1))
    line = PassReport(12, PassKind.CHANGES, 3, Totals(found=3), pending=0, seconds=0.0).line()
    assert set(shown) == set(line) and shown["event"] == line["event"]
    assert {kind.value for kind in PassKind} == set(re.findall(r"`(start|changes|rescan)`", text))
    bound = re.search(r"past `watch_pending_max` paths \(default ([\d,]+)", text).group(1)
    assert int(bound.replace(",", "")) == RunConfig(task="embed", paths=("x",)).watch_pending_max
