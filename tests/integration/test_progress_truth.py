"""Progress that tells the truth (issue 28, item 1), on real runs of the fake task: an input
counts when its results are back, before the part holding it is written (a sink held back);
the total is known, from the counting walk, before the reader's walk ends on a large tree;
the last line has nothing in flight; the summary's rates are per input and per row."""

from __future__ import annotations

import dataclasses
import io
import threading

import numpy as np
import pytest

from gpucli.core.config import RunConfig
from gpucli.core.progress import Counts, PlainProgress
from gpucli.engines.local.pipeline import run
from gpucli.output.accounts import Accounts
from tests.fake_task import FAKE
from tests.helpers import write_tree

HANG_GUARD_S = 60.0


class Recorder(PlainProgress):
    """A plain renderer into a buffer, printing at every update, that keeps a copy of each
    update's counts (the engine updates one object in place) and may watch for a condition."""

    def __init__(self, watch=None) -> None:
        super().__init__("fake", "words", every_s=0, stream=io.StringIO())
        self.seen: list[Counts] = []
        self.watch = watch

    def update(self, counts: Counts) -> None:
        self.seen.append(dataclasses.replace(counts))
        if self.watch is not None:
            self.watch(self.seen[-1])
        super().update(counts)

    @property
    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()


def config(root, out, **kw) -> RunConfig:
    return RunConfig(task=FAKE, paths=(str(root),), out=str(out), devices="cpu", workers_per_device=1, **kw)


def test_inputs_count_when_their_results_are_back_before_their_part_is_written(tmp_path, monkeypatch):
    root = write_tree(tmp_path / "in", {f"f{i:02d}.txt": f"line {i}\nanother {i}\n" for i in range(40)})
    part_inputs: list[int] = []
    shown = threading.Event()  # the progress counted the held part's inputs while none was durable
    real_write = Accounts.write

    def held_write(self, part):
        if not part_inputs:
            part_inputs.append(len(np.unique(part.source_ids)))
            shown.wait(HANG_GUARD_S)  # the sink is slow: the first part waits for the progress
        return real_write(self, part)

    def watch(counts: Counts) -> None:
        if part_inputs and counts.done == 0 and counts.finished >= part_inputs[0]:
            shown.set()

    monkeypatch.setattr(Accounts, "write", held_write)
    progress = Recorder(watch)
    summary = run(config(root, tmp_path / "out.parquet", part_rows=6), progress)
    assert summary.exit_code == 0 and summary.succeeded == 40
    assert shown.is_set(), "the progress never counted inputs whose part was still being written"
    counted = next(c for c in progress.seen if c.done == 0 and c.finished >= part_inputs[0])
    assert counted.back >= part_inputs[0] and counted.rows_back > 0
    last = progress.seen[-1]
    assert last.ended and (last.finished, last.done, last.total) == (40, 40, 40)


def test_the_total_is_known_before_the_walk_ends_and_the_last_line_has_nothing_in_flight(tmp_path):
    files = {f"d{i % 40:02d}/f{i:04d}.txt": f"word {i}\n" for i in range(2000)}
    root = write_tree(tmp_path / "in", files)
    counted = tmp_path / "counted"  # reading waits until the total showed: the reader's walk stalls meanwhile

    def watch(counts: Counts) -> None:
        if counts.total == 2000 and not counted.exists():
            counted.write_text("the total showed")

    progress = Recorder(watch)
    out = tmp_path / "out.parquet"
    options = {"read_waits_for": str(counted), "sleep_ms": 5}  # ~1.3 s of batches: lines with an ETA
    summary = run(config(root, out, queue_items=32, task_options=options), progress)  # the walk waits for the model
    assert summary.exit_code == 0 and summary.inputs == 2000
    early = [c for c in progress.seen if not c.walk_done and c.total == 2000 and c.found < 2000]
    assert early, "the counting walk's total never showed while the reader's walk went on"
    assert any("/~2000 inputs" in line and "ETA" in line for line in progress.lines), progress.lines[-5:]
    last = progress.lines[-1]
    assert "2000/2000 inputs (2000 written), 0 failed, 0 skipped, 2000 rows" in last, last
    for running in ("in flight", "queue", "ETA"):
        assert running not in last, last
    assert sum(1 for line in progress.lines if "2000/2000 inputs (2000 written)" in line) == 1, "the end once"


def test_the_summary_s_rates_are_per_input_and_per_row(tmp_path):
    root = write_tree(tmp_path / "in", {f"f{i}.txt": "one\ntwo\nthree\n" for i in range(12)})
    summary = run(config(root, tmp_path / "out.parquet", progress="off"))
    data = summary.to_dict()
    assert (data["inputs"], data["rows"]) == (12, 36)
    assert data["inputs_per_s"] == pytest.approx(12 / summary.elapsed_s, rel=0.01)
    assert data["rows_per_s"] == pytest.approx(36 / summary.elapsed_s, rel=0.01)
    assert data["items_per_s"] == pytest.approx(36 / summary.elapsed_s, rel=0.01), "items: the fake task's lines"
