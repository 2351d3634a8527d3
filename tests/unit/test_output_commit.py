"""The commit step (gpucli/output/commit.py) against a real output (Parquet parts, the SQLite
ledger, the failures file) on an event loop without processes: the loop never waits on a disk
sync, and the writer's thread reads nothing but the frozen Commit it was handed (issue 40)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from gpucli.core.progress import Counts
from gpucli.core.records import Failure, ReadChunk
from gpucli.core.summary import RunSummary
from gpucli.output.accounts import Accounts
from gpucli.output.ledger import Ledger
from gpucli.output.output import Output
from gpucli.output.settings import output_metadata, output_schema, output_settings
from gpucli.output.writer import Writer
from gpucli.tasks import TaskSpec
from tests.fake_task import FakeTask
from tests.helpers import block, make_accounts, outputs, sources

GUARD_S = 30.0  # how long the stuck sync waits for the loop before it gives up (a bug, then)


@pytest.fixture
def real_accounts(tmp_path):
    """Accounts over the fake task and a real, opened output in tmp_path."""
    task = FakeTask(TaskSpec("fake", "fake-model"))
    output = Output(str(tmp_path / "out.parquet"))
    metadata = output_metadata(task)
    output.open(output_schema(task), metadata, output_settings(task.spec, task, metadata))
    yield Accounts(task, output, RunSummary(task="fake", model="m"), Counts(), output_schema(task)), output
    output.close()


def ledger_rows(out: Path) -> dict[str, str]:
    db = sqlite3.connect(Path(f"{out}.gpucli") / "ledger.sqlite")
    try:
        return dict(db.execute("select path, status from files"))
    finally:
        db.close()


def test_the_loop_ends_failed_and_unchanged_inputs_while_the_writer_s_disk_sync_is_stuck(real_accounts, monkeypatch,
                                                                                       tmp_path):
    """The writer's thread is inside a ledger commit that does not end (a slow disk's sync, the
    ledger held meanwhile). The loop goes on handling events: 300 inputs whose batch failed and
    a read chunk of failed, skipped and unchanged inputs, each call returning while the sync is
    still stuck. Once the sync ends, every record is written, by the writer's thread."""
    accounts, output = real_accounts
    events: list[str] = []
    entered, release = threading.Event(), threading.Event()
    mark_done, mark_failed = Ledger.mark_done, Ledger.mark_failed
    ledger_threads: list[str] = []

    def stuck_sync(self, *args):
        with self._lock:  # a synchronous=full transaction holds the ledger while the disk syncs
            entered.set()
            synced = release.wait(GUARD_S)
            events.append("writer: synced" if synced else "writer: gave up waiting for the loop")
        return mark_done(self, *args)

    def failed(self, *args):
        ledger_threads.append(threading.current_thread().name)
        return mark_failed(self, *args)

    monkeypatch.setattr(Ledger, "mark_done", stuck_sync)
    monkeypatch.setattr(Ledger, "mark_failed", failed)
    found = sources(301)
    items = block([(i, 0) for i in range(301)])
    accounts.expect(found, items)

    async def scenario():
        writer = Writer(accounts, part_rows=1, flush_s=3600.0)
        writer.start()
        first = items.take(np.array([0]))
        accounts.outputs(first, outputs(first))
        writer.added()  # a part's worth: the writer's thread takes it, and its sync sticks
        assert await asyncio.to_thread(entered.wait, GUARD_S)
        accounts.fail_items(items.take(np.arange(1, 301)), "infer", "BOOM in batch")
        writer.added()
        accounts.read(ReadChunk(failures=[Failure("bad.txt", "decode", "not UTF-8"),
                                          Failure("link.txt", "skip", "a link that leaves the root")],
                                unchanged=sources(1), found=3))
        writer.added()
        events.append("loop: handled 302 failures, a skip and an unchanged input")
        release.set()
        await writer.close()

    asyncio.run(scenario())
    assert events == ["loop: handled 302 failures, a skip and an unchanged input", "writer: synced"]
    assert ledger_threads and all(name.startswith("gpucli-writer") for name in ledger_threads), ledger_threads
    summary = accounts.summary
    assert (summary.succeeded, summary.failed, summary.skipped) == (1, 301, 2)
    statuses = ledger_rows(Path(output.sink.target))
    assert statuses.pop("f0.txt") == "done" and statuses.pop("bad.txt") == "failed"
    assert statuses == {f"f{i}.txt": "failed" for i in range(1, 301)}
    records = [json.loads(line) for line in Path(output.failures.path).read_text().splitlines()]
    assert len(records) == 302 and {r["path"] for r in records} >= {"bad.txt", "link.txt", "f300.txt"}
    rows = ds.dataset(output.sink.target, format="parquet").to_table().column("path").to_pylist()
    assert rows == ["f0.txt"]


class Watched(dict):
    """The accounts' live dict of sources, noting each thread that reads or changes it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.threads: set[str] = set()

    def _seen(self) -> None:
        self.threads.add(threading.current_thread().name)

    def __getitem__(self, key):
        self._seen()
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._seen()
        super().__setitem__(key, value)

    def get(self, key, default=None):
        self._seen()
        return super().get(key, default)

    def pop(self, *args):
        self._seen()
        return super().pop(*args)

    def __iter__(self):
        self._seen()
        return super().__iter__()

    def __len__(self):
        self._seen()
        return super().__len__()


def test_the_writer_s_thread_never_touches_the_live_sources_only_the_commit_it_was_handed():
    accounts, output = make_accounts()
    accounts.states.sources = Watched()
    found = sources(40)
    items = block([(i, c) for i in range(40) for c in range(2)])
    accounts.expect(found, items)

    async def scenario():
        writer = Writer(accounts, part_rows=4, flush_s=3600.0)
        writer.start()
        for n in range(0, 80, 4):  # the loop goes on while parts are written
            event = items.take(np.arange(n, n + 4))
            accounts.outputs(event, outputs(event))
            writer.added()
            await asyncio.sleep(0)
        await writer.close()

    asyncio.run(scenario())
    assert accounts.summary.succeeded == 40 and len(output.sink.tables) > 1
    assert accounts.states.sources.threads == {threading.main_thread().name}, "only the loop's thread"


def test_a_commit_is_frozen_and_carries_the_inputs_it_commits():
    accounts, output = make_accounts()
    found = sources(3)
    items = block([(0, 0), (1, 0), (1, 1), (2, 0)])
    accounts.expect(found, items)
    accounts.outputs(items, outputs(items))
    commit = accounts.take_commit()
    accounts.states.sources.clear()  # the loop forgets them meanwhile: the commit needs none of it
    committed = accounts.write(commit)
    assert output.committed == [(["f0.txt", "f1.txt", "f2.txt"], [1, 2, 1], "part-00001")]
    assert committed.source_ids.tolist() == [0, 1, 2] and committed.rows == 4
    assert [s.path for s in commit.inputs] == ["f0.txt", "f1.txt", "f2.txt"] and commit.rows == (1, 2, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        commit.inputs = ()
    with pytest.raises(ValueError):
        commit.source_ids[0] = 7  # read-only: a copy of its own
