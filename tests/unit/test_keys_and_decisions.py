"""The input key (gpucli/core/keys.py) and the decision per input (gpucli/core/decision.py): the rules
the reader, the Ray driver, `--dry-run`, the ledger and the sinks share, on plain data."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gpucli.core.decision import Action, Known, Status, decide
from gpucli.core.keys import REPEAT, InputKey, record_key, row_key, row_keys, shown, split_key, with_path
from gpucli.core.records import Failure, Source


@pytest.mark.parametrize("key,path,record_id", [
    ("docs/a.txt", "docs/a.txt", None),
    ("sub/t.parquet//42", "sub/t.parquet", "42"),
    ("t.csv//a//b", "t.csv", "a//b"),  # an id may hold the separator: only the first one splits
    ("t.csv//7" + REPEAT, "t.csv", "7"),  # a repeated id's failure record: the id without its mark
])
def test_a_key_parses_into_path_and_record_id(key, path, record_id):
    parsed = InputKey.parse(key)
    assert (parsed.path, parsed.record_id) == (path, record_id) == split_key(key)
    if REPEAT not in key:
        assert str(parsed) == key


def test_keys_are_rebuilt_from_rows_as_they_were_made():
    assert record_key("t.csv", "1") == "t.csv//1"
    assert row_key({"path": "t.csv", "id": "1"}) == "t.csv//1" and row_key({"path": "a.txt"}) == "a.txt"
    table = pa.table({"path": ["t.csv", "f.txt"], "id": ["1", None]})
    assert row_keys(table).to_pylist() == ["t.csv//1", "f.txt"]
    schema = pa.schema([("path", pa.string()), ("id", pa.string()), ("x", pa.int64())])
    rows = with_path(pa.table({"x": [1, 2]}), ["t.csv//9", "t.csv//10"], schema)
    assert rows.column_names[:2] == ["path", "id"] and rows.column("id").to_pylist() == ["9", "10"]


def test_a_record_s_failure_shows_path_and_id_apart():
    assert shown(Failure("t.csv//9", "read", "null text")) == {"path": "t.csv", "id": "9", "stage": "read",
                                                               "error": "null text"}
    assert shown(Failure("a.txt", "decode", "binary"))["path"] == "a.txt"


def source(size: int = 10, mtime_ns: int = 5) -> Source:
    return Source(0, "a.txt", "/in/a.txt", size=size, mtime_ns=mtime_ns)


def test_the_decision_per_input():
    new = decide(None, source())
    assert (new.action, new.done_digest) == (Action.RUN, "")
    failed = decide(Known(10, 5, "", Status.FAILED), source())
    assert failed.action is Action.RUN and "failed before" in failed.reason
    same = decide(Known(10, 5, "d1", Status.DONE), source())
    assert (same.action, same.done_digest) == (Action.UNCHANGED, "d1")
    touched = decide(Known(10, 4, "d1", Status.DONE), source())
    assert (touched.action, touched.done_digest) == (Action.RUN, "d1"), "read and hashed: same content is skipped"
    assert decide(Known(11, 5, "d1", Status.DONE), source()).action is Action.RUN


def test_statuses_are_stored_by_name():
    assert [s.stored for s in Status] == ["open", "complete", "failed", "done"]
    assert Status.of_stored("done") is Status.DONE and Status.of_stored("failed") is Status.FAILED
