"""Identical content embedded once (gpucli/output/dedup.py), without processes or models: copies of an
input in flight wait for its rows and get them in its part, or its failure record; rows the
output holds are read back; copies are committed like any input and counted as deduplicated."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from gpucli.core.decision import Status
from gpucli.core.records import ReadChunk
from gpucli.output.dedup import MAX_WAITING, FromOutput, InRun, enabled
from tests.helpers import block, make_accounts, outputs, sources


def _with_digests(found, digests):
    for source, content in zip(found, digests):
        source.digest = content
    return found


def _dedup_accounts():
    accounts, output = make_accounts()
    accounts.dedup = InRun()
    return accounts, output


def test_a_copy_of_content_in_flight_sends_no_items_and_gets_the_originals_rows_under_its_own_path():
    accounts, output = _dedup_accounts()
    found = _with_digests(sources(3), ["same", "other", "same"])
    items = block([(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)])
    sent = accounts.read(ReadChunk(sources=found, block=items, found=3))
    assert sent.source_ids.tolist() == [0, 0, 1], "the copy's items never reach the batcher"
    assert accounts.status[2] == Status.OPEN, "the copy waits for its original"
    accounts.outputs(sent, outputs(sent))
    part = accounts.take_commit()
    rows = part.table.to_pylist()
    by_path = {}
    for row in rows:
        by_path.setdefault(row["path"], []).append(row)
    assert sorted(by_path) == ["f0.txt", "f1.txt", "f2.txt"]
    strip = [{k: v for k, v in r.items() if k not in ("path", "size", "mtime", "digest")} for r in by_path["f0.txt"]]
    assert strip == [{k: v for k, v in r.items() if k not in ("path", "size", "mtime", "digest")}
                     for r in by_path["f2.txt"]], "text, chunk and vectors equal"
    assert [r["size"] for r in by_path["f2.txt"]] == [12, 12], "its own size"
    accounts.durable(accounts.write(part))
    assert (accounts.summary.succeeded, accounts.summary.deduplicated, accounts.summary.rows) == (3, 1, 5)
    assert sorted(output.committed[0][0]) == ["f0.txt", "f1.txt", "f2.txt"], "the copy committed like any input"
    assert accounts.unfinished() == 0 and not accounts.dedup.originals and not accounts.dedup.waiting


def test_a_copy_seen_in_a_later_chunk_waits_for_the_original_in_flight():
    accounts, _ = _dedup_accounts()
    found = _with_digests(sources(2), ["same", "same"])
    first = accounts.read(ReadChunk(sources=found[:1], block=block([(0, 0)]), found=1))
    assert accounts.read(ReadChunk(sources=found[1:], block=block([(1, 0)]), found=1)) is None, "all copies"
    accounts.outputs(first, outputs(first))
    accounts.durable(accounts.write(accounts.take_commit()))
    assert (accounts.summary.succeeded, accounts.summary.deduplicated) == (2, 1)


def test_a_copy_whose_original_failed_gets_the_same_failure_record_under_its_own_path():
    accounts, output = _dedup_accounts()
    found = _with_digests(sources(2), ["same", "same"])
    sent = accounts.read(ReadChunk(sources=found, block=block([(0, 0), (1, 0)]), found=2))
    accounts.fail_items(sent, "infer", "BOOM in batch")
    commit = accounts.take_commit()
    assert [(f.path, f.error) for f in commit.failures] == [("f0.txt", "BOOM in batch"), ("f1.txt", "BOOM in batch")]
    assert accounts.summary.failed == 2 and accounts.unfinished() == 0
    assert commit.table is None, "no rows"


def test_content_seen_after_its_original_left_for_the_sink_is_a_new_original():
    accounts, _ = _dedup_accounts()
    found = _with_digests(sources(2), ["same", "same"])
    first = accounts.read(ReadChunk(sources=found[:1], block=block([(0, 0)]), found=1))
    accounts.outputs(first, outputs(first))
    part = accounts.take_commit()
    again = accounts.read(ReadChunk(sources=found[1:], block=block([(1, 0)]), found=1))
    assert again.source_ids.tolist() == [1], "embedded again: correct, only not saved"
    accounts.durable(accounts.write(part))


def test_inputs_without_a_digest_are_never_copies():
    dedup = InRun()
    found = _with_digests(sources(2), ["", ""])
    kept, copies = dedup.split(found, block([(0, 0), (1, 0)]))
    assert kept.source_ids.tolist() == [0, 1] and copies == []


def test_waiting_copies_are_bounded_past_that_a_copy_goes_to_the_model():
    dedup = InRun(max_waiting=1)
    found = _with_digests(sources(3), ["same"] * 3)
    kept, copies = dedup.split(found, block([(0, 0), (1, 0), (2, 0)]))
    assert [c.id for c in copies] == [1] and kept.source_ids.tolist() == [0, 2]
    assert MAX_WAITING >= 1000


class _Ledger:
    def __init__(self, found):
        self.found = found
        self.asked = []

    def done_with_digests(self, digests):
        self.asked.append(digests)
        return {d: self.found[d] for d in digests if d in self.found}


class _Sink:
    def __init__(self, table):
        self.table = table
        self.reads = []

    def rows_of(self, location, keys):
        self.reads.append((location, sorted(keys)))
        return self.table


def _written_rows(accounts, path, chunks):
    """Rows as the output holds them: every column, chunks out of order."""
    table = accounts.row_schema.empty_table()
    rows = [{"chunk": c, "text": f"t{c}", "words": 1, "embedding": [float(c), 0.0, 0.0, 0.0]} for c in chunks]
    table = pa.Table.from_pylist(rows, schema=accounts.row_schema)
    return table.add_column(0, "path", pa.array([path] * len(chunks))).append_column(
        "digest", pa.array(["same"] * len(chunks)))


def test_content_the_output_holds_is_read_back_and_the_copy_is_complete_without_items():
    accounts, output = _dedup_accounts()
    sink = _Sink(_written_rows(accounts, "old.txt", [1, 0]))
    ledger = _Ledger({"same": ("old.txt", "part-00003.parquet", 2)})
    found = _with_digests(sources(2), ["same", "new"])
    chunk, copied = FromOutput(ledger, sink, accounts.row_schema).take(
        ReadChunk(sources=found, block=block([(0, 0), (0, 1), (1, 0)]), found=2))
    assert [c.source.path for c in copied] == ["f0.txt"] and [s.id for s in chunk.sources] == [1]
    assert chunk.block.source_ids.tolist() == [1], "no forward pass for the copy"
    assert sink.reads == [("part-00003.parquet", ["old.txt"])]
    sent = accounts.read(chunk, copied)
    accounts.outputs(sent, outputs(sent))
    part = accounts.take_commit()
    rows = [r for r in part.table.to_pylist() if r["path"] == "f0.txt"]
    assert [(r["chunk"], r["text"], r["digest"]) for r in rows] == [(0, "t0", "same"), (1, "t1", "same")], \
        "in chunk order, with the copy's own columns"
    accounts.durable(accounts.write(part))
    assert (accounts.summary.succeeded, accounts.summary.deduplicated) == (2, 1)


def test_rows_that_do_not_come_back_as_the_ledger_counted_them_are_embedded_again():
    accounts, _ = _dedup_accounts()
    sink = _Sink(_written_rows(accounts, "old.txt", [0]))
    ledger = _Ledger({"same": ("old.txt", "part-00003.parquet", 2)})  # two rows, one came back
    found = _with_digests(sources(1), ["same"])
    chunk = ReadChunk(sources=found, block=block([(0, 0)]), found=1)
    kept, copied = FromOutput(ledger, sink, accounts.row_schema).take(chunk)
    assert copied == [] and kept is chunk
    sink.table = None  # a sink that cannot read back
    assert FromOutput(ledger, sink, accounts.row_schema).take(chunk) == (chunk, [])


def test_only_a_task_with_the_dedup_option_set_on_the_local_engine_deduplicates():
    @dataclasses.dataclass
    class Options:
        dedup: bool = True

    assert enabled(Options(), "local")
    assert not enabled(Options(dedup=False), "local")
    assert not enabled(Options(), "ray"), "Ray runs as --no-dedup"
    assert not enabled(object(), "local"), "a task without the option"
