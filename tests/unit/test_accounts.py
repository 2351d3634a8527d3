"""The accounting both engines share (gpucli/output/accounts.py), without processes or models: results
in, rows of complete inputs out, each input exactly once as rows or one failure record, and
the commit step (the sink first, then the ledger) that the local writer and the Ray driver use."""

from __future__ import annotations

import numpy as np

from gpucli.core.decision import Status
from gpucli.core.records import Failure, ReadChunk
from gpucli.output.accounts import Committed
from tests.helpers import block, make_accounts, outputs, sources


def test_an_input_is_complete_only_when_its_last_item_is_back_and_a_part_holds_complete_inputs_only():
    accounts, output = make_accounts()
    found = sources(2)
    everything = block([(0, 0), (0, 1), (1, 0)])
    accounts.expect(found, everything)
    first = everything.take(np.array([0, 2]))  # input 0's first item, input 1's only item
    accounts.outputs(first, outputs(first))
    assert accounts.status[0] == Status.OPEN and accounts.status[1] == Status.COMPLETE
    part = accounts.take_commit()
    assert part.table.column("path").to_pylist() == ["f1.txt"], "input 0 still waits for an item"
    assert accounts.backlog == 1
    second = everything.take(np.array([1]))
    accounts.outputs(second, outputs(second))
    rows = accounts.take_commit().table.to_pylist()
    assert [(r["path"], r["chunk"]) for r in rows] == [("f0.txt", 0), ("f0.txt", 1)], "in item order"
    assert rows[0]["size"] == 10 and rows[0]["digest"] == "d0", "the input's own columns"
    assert accounts.backlog == 0


def test_the_commit_step_writes_the_part_then_marks_it_in_the_ledger_then_counts_it_durable():
    accounts, output = make_accounts()
    found = sources(3)
    items = block([(0, 0), (1, 0), (1, 1), (2, 0)])
    accounts.expect(found, items)
    accounts.outputs(items, outputs(items))
    committed = accounts.write(accounts.take_commit())
    assert output.sink.calls == ["sink.write", "ledger.commit"], "durable first, then the ledger"
    assert output.committed == [(["f0.txt", "f1.txt", "f2.txt"], [1, 2, 1], "part-00001")]
    assert isinstance(committed, Committed) and committed.rows == 4
    assert accounts.summary.succeeded == 0, "not counted before it is durable on the loop"
    accounts.durable(committed)
    assert (accounts.summary.succeeded, accounts.summary.rows) == (3, 4)
    assert (accounts.status[:3] == Status.DONE).all() and accounts.unfinished() == 0


def test_a_failed_item_fails_its_input_once_and_drops_its_rows_already_buffered_and_late():
    accounts, output = make_accounts()
    found = sources(2)
    items = block([(0, 0), (0, 1), (0, 2), (1, 0)])
    accounts.expect(found, items)
    early = items.take(np.array([0, 3]))
    accounts.outputs(early, outputs(early))
    accounts.fail_items(items.take(np.array([1])), "infer", "BOOM in batch")
    late = items.take(np.array([2]))
    accounts.outputs(late, outputs(late))
    accounts.fail_items(items.take(np.array([2])), "infer", "again")  # a second failure of the same input
    commit = accounts.take_commit()
    assert commit.table.column("path").to_pylist() == ["f1.txt"]
    assert [(f.path, f.stage, f.error) for f in commit.failures] == [("f0.txt", "infer", "BOOM in batch")]
    assert f"{commit.failures[0].size}" == "10", "the failing content's stat, for the ledger"
    assert accounts.summary.failed == 1 and accounts.status[0] == Status.FAILED
    assert output.failures == [], "recorded by the commit step (the writer's thread), not on the loop"
    accounts.durable(accounts.write(commit))
    assert [f.path for f in output.failures] == ["f0.txt"]


def test_an_unusable_model_output_fails_only_the_inputs_of_its_batch():
    accounts, output = make_accounts()
    found = sources(2)
    items = block([(0, 0), (1, 0)])
    accounts.expect(found, items)
    good, bad = items.take(np.array([0])), items.take(np.array([1]))
    accounts.outputs_many([(good, outputs(good)), (bad, [{"words": "not a number", "embedding": None}])])
    commit = accounts.take_commit()
    assert [f.path for f in commit.failures] == ["f1.txt"]
    assert "unusable model output" in commit.failures[0].error
    assert commit.table.column("path").to_pylist() == ["f0.txt"]


def test_a_read_chunk_ends_its_failed_and_unchanged_inputs_hands_on_the_rest_and_the_next_commit_records_them():
    accounts, output = make_accounts()
    found = sources(4)
    output.known_failures.add("bad.txt")
    chunk = ReadChunk(sources=found[:2], block=block([(0, 0), (1, 0)]), found=5,
                      failures=[Failure("bad.txt", "decode", "not UTF-8"), Failure("link", "skip", "leaves the root")],
                      unchanged=found[2:])
    assert len(accounts.read(chunk)) == 2
    s = accounts.summary
    assert (accounts.counts.found, s.failed, s.skipped, s.unchanged) == (5, 1, 3, 2), "counted at once"
    assert output.failures == [] and output.unchanged_sources == [], "nothing written on the loop"
    commit = accounts.take_commit()
    assert commit.table is None and len(commit.source_ids) == 0, "no part: no input is complete"
    accounts.durable(accounts.write(commit))
    assert [f.path for f in output.failures] == ["bad.txt", "link"] and output.unchanged_sources == found[2:]
    assert s.failed_known == 1, "the ledger's answer: failed before, unchanged"
    assert accounts.take_commit() is None, "nothing left to record"
    assert accounts.read(ReadChunk(found=0)) is None, "nothing to run"


def test_inputs_no_result_came_back_for_become_failure_records():
    accounts, output = make_accounts()
    found = sources(3)
    items = block([(0, 0), (1, 0), (2, 0)])
    accounts.expect(found, items)
    done = items.take(np.array([0]))
    accounts.outputs(done, outputs(done))
    accounts.durable(accounts.write(accounts.take_commit()))
    accounts.lost("no result came back")
    assert sorted(f.path for f in accounts.take_commit().failures) == ["f1.txt", "f2.txt"]
    assert accounts.unfinished() == 0 and accounts.summary.succeeded == 1


def test_the_counts_the_progress_shows_are_the_summary_s():
    accounts, _ = make_accounts()
    found = sources(1)
    items = block([(0, 0), (0, 1)])
    accounts.expect(found, items)
    accounts.outputs(items, outputs(items))
    accounts.durable(accounts.write(accounts.take_commit()))
    counts = accounts.counts_now()
    assert (counts.done, counts.rows, counts.items, counts.cost) == (1, 2, 2, 4)
