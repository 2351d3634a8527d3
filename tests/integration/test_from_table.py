"""`gpucli embed --from TABLE`: texts from the rows of a Parquet, CSV or JSON lines table.

The fake task (tests/fake_task.py) embeds each non-empty line of a text as one chunk, so a
record of three lines is a "long" record of three chunks; its batch log names the texts
that reached the model, which is what an incremental rerun must keep small."""

from __future__ import annotations

import csv
import json
import os
import re
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core import keys
from gpucli.core.config import RunConfig
from gpucli.core.errors import UsageError
from gpucli.engines.local.pipeline import run
from gpucli.inputs import tables
from gpucli.inputs.scope import WalkReport
from tests.fake_task import FAKE
from tests.helpers import read_rows

RECORDS = [("a1", "alpha one"), ("b2", "beta two\nsecond line of beta\nthird line of beta"), ("c3", "gamma three")]


def write_table(path: Path, records: list[tuple], text: str = "body", key: str = "id") -> Path:
    """The records as a table of `path`'s format, with an extra column a table would have."""
    rows = [{key: rid, text: body, "lang": "en"} for rid, body in records]
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=[key, text, "lang"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a rewrite always shows in the mtime
    return path


def run_table(table: Path, out: Path | str, log: Path | None = None, **kw):
    kw.setdefault("text_column", "body")
    config = RunConfig(task=FAKE, from_table=str(table), out=str(out), progress="off", devices="cpu",
                       task_options={"batch_log": str(log)} if log else {}, **kw)
    return run(config)


def embedded(log: Path) -> list[str]:
    """The texts the model saw, in all runs so far."""
    return [t for line in log.read_text().splitlines() for t in json.loads(line)["texts"]] if log.exists() else []


def failures(summary) -> list[dict]:
    return [json.loads(line) for line in Path(summary.failures_file).read_text().splitlines()]


# --- one run ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_each_record_becomes_rows_with_the_table_path_and_its_id(tmp_path, suffix):
    table = write_table(tmp_path / f"posts{suffix}", RECORDS)
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.inputs, summary.succeeded, summary.failed, summary.exit_code) == (3, 3, 0, 0)
    rows = sorted(read_rows(tmp_path / "out.parquet"), key=lambda r: (r["id"], r["chunk"]))
    assert [(r["path"], r["id"], r["chunk"], r["text"]) for r in rows] == [
        (f"posts{suffix}", "a1", 0, "alpha one"),
        (f"posts{suffix}", "b2", 0, "beta two"), (f"posts{suffix}", "b2", 1, "second line of beta"),
        (f"posts{suffix}", "b2", 2, "third line of beta"),  # a long record is chunked as a file is
        (f"posts{suffix}", "c3", 0, "gamma three")]
    schema = pq.read_schema(next((tmp_path / "out.parquet").glob("part-*.parquet")))
    assert schema.names[:3] == ["path", "id", "chunk"] and schema.field("id").type == pa.string()
    assert schema.metadata[b"gpucli.input"] == b"table"


@pytest.mark.slow
def test_file_outputs_keep_their_schema_without_an_id_column(tree, tmp_path):
    from tests.helpers import run_fake

    run_fake([tree({"a.txt": "one line\n"})], tmp_path / "files.parquet")
    schema = pq.read_schema(next((tmp_path / "files.parquet").glob("part-*.parquet")))
    assert "id" not in schema.names and b"gpucli.input" not in schema.metadata


@pytest.mark.slow
def test_integer_ids_are_written_as_text(tmp_path):
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [7, 42], "body": ["seven", "forty two"]}), table)
    run_table(table, tmp_path / "out.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((r["path"], r["id"]) for r in rows) == [("t.parquet", "42"), ("t.parquet", "7")]


# --- records that cannot be embedded -------------------------------------------------------------
@pytest.mark.slow
def test_null_and_non_text_records_are_one_failure_record_each_and_the_rest_runs(tmp_path):
    table = tmp_path / "t.jsonl"
    table.write_text("\n".join([json.dumps({"id": "ok", "body": "fine text"}), json.dumps({"id": "nul", "body": None}),
                                json.dumps({"id": "num", "body": 12}), json.dumps({"id": "gone"}),
                                json.dumps({"body": "no id here"}), "not json at all"]) + "\n")
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.succeeded, summary.failed, summary.exit_code) == (1, 5, 1)
    assert summary.inputs == summary.succeeded + summary.failed + summary.skipped
    by_id = {f.get("id"): f for f in failures(summary)}
    assert by_id["nul"]["path"] == "t.jsonl" and "'body' is null" in by_id["nul"]["error"]
    assert "holds int, not text" in by_id["num"]["error"] and "is null" in by_id["gone"]["error"]
    no_id = [f for f in failures(summary) if "id" not in f]
    assert len(no_id) == 2 and all(f["path"] == "t.jsonl" and "needs an id" in f["error"] for f in no_id)
    assert [r["id"] for r in read_rows(tmp_path / "out.parquet")] == ["ok"]


@pytest.mark.slow
def test_a_duplicate_id_is_a_failure_record_and_its_first_row_is_embedded(tmp_path):
    table = write_table(tmp_path / "t.csv", [("x", "first x"), ("y", "why"), ("x", "second x"), ("x", "third x")])
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.succeeded, summary.failed, summary.exit_code) == (2, 2, 1)
    dups = failures(summary)
    assert [(f["path"], f["id"]) for f in dups] == [("t.csv", "x"), ("t.csv", "x")]
    assert all("duplicate id" in f["error"] for f in dups)
    assert sorted((r["id"], r["text"]) for r in read_rows(tmp_path / "out.parquet")) == [("x", "first x"),
                                                                                         ("y", "why")]
    again = run_table(table, tmp_path / "out.parquet")  # the same table: known failures, not new ones
    assert (again.failed, again.failed_known, again.unchanged, again.exit_code) == (2, 2, 2, 0)


# --- reruns ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("out_name", ["out.parquet", "out.jsonl"])
def test_rerun_embeds_only_changed_and_added_records_and_prune_removes_gone_ids(tmp_path, out_name):
    table, out, log = tmp_path / "t.parquet", tmp_path / out_name, tmp_path / "batches.jsonl"
    write_table(table, RECORDS + [("d4", "delta four")])
    assert run_table(table, out, log).succeeded == 4
    again = run_table(table, out, log)
    assert (again.succeeded, again.unchanged, again.exit_code) == (0, 4, 0)

    seen = len(embedded(log))
    # b2 changed (one line now), c3 removed, e5 added; a1 and d4 as they were, but the table is rewritten
    write_table(table, [("a1", "alpha one"), ("b2", "beta rewritten"), ("d4", "delta four"), ("e5", "epsilon")])
    third = run_table(table, out, log, prune=True)
    assert sorted(embedded(log)[seen:]) == ["beta rewritten", "epsilon"]
    assert (third.succeeded, third.unchanged, third.pruned, third.exit_code) == (2, 2, 1, 0)

    rows = _rows(out)
    keys = Counter((r["path"], r["id"], r["chunk"]) for r in rows)
    assert all(count == 1 for count in keys.values()), keys
    assert sorted(keys) == [("t.parquet", "a1", 0), ("t.parquet", "b2", 0), ("t.parquet", "d4", 0),
                            ("t.parquet", "e5", 0)]
    assert {r["id"]: r["text"] for r in rows}["b2"] == "beta rewritten"


def _rows(out: Path) -> list[dict]:
    if out.suffix == ".jsonl":
        return [json.loads(line) for line in out.read_text().splitlines()]
    return read_rows(out)


@pytest.mark.slow
def test_prune_with_one_table_keeps_the_rows_of_another_table(tmp_path):
    """A table keeps to its own records: `--prune` on another table of the same output keeps
    the first table's rows (their keys are not under the second table's path)."""
    out = tmp_path / "out.parquet"
    run_table(write_table(tmp_path / "one.parquet", RECORDS), out)
    summary = run_table(write_table(tmp_path / "two.parquet", [("z", "zeta")]), out, prune=True)
    assert summary.pruned == 0
    assert Counter(r["path"] for r in read_rows(out)) == {"one.parquet": 5, "two.parquet": 1}


@pytest.mark.slow
def test_a_table_that_breaks_mid_read_is_one_failure_record_and_prunes_nothing(tmp_path, monkeypatch):
    table, out = tmp_path / "t.csv", tmp_path / "out.parquet"
    run_table(write_table(table, RECORDS), out)
    real = tables._csv_reader

    def breaks_after_two_rows(f):
        for number, fields in enumerate(real(f)):
            if number == 3:  # the header and two rows
                raise OSError(5, "Input/output error")
            yield fields

    monkeypatch.setattr(tables, "_csv_reader", breaks_after_two_rows)
    os.utime(table, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    summary = run_table(table, out, prune=True)
    assert (summary.failed, summary.pruned, summary.exit_code) == (1, 0, 1)
    [failure] = failures(summary)
    assert failure["path"] == "t.csv" and "could not be read past row 2" in failure["error"]
    rows = Counter(r["id"] for r in read_rows(out))
    assert (rows["a1"], rows["b2"], rows["c3"]) == (1, 3, 1)  # nothing pruned


@pytest.mark.slow
def test_a_csv_row_with_another_number_of_fields_is_one_failure_record_and_the_rows_around_it_run(tmp_path):
    table, out = tmp_path / "t.csv", tmp_path / "out.parquet"
    table.write_text("id,body,lang\na1,alpha one,en\n" + "".join(f"x{i},filler {i},en\n" for i in range(20))
                     + "b2,a row with,one,column too many\nc3,gamma three,en\n")
    summary = run_table(table, out)
    assert (summary.succeeded, summary.failed, summary.exit_code) == (22, 1, 1)
    [failure] = failures(summary)
    assert (failure["path"], failure["id"]) == ("t.csv", "b2") and "4 fields where the header has 3" in failure["error"]


@pytest.mark.slow
def test_files_and_tables_do_not_mix_in_one_output(tree, tmp_path):
    from tests.helpers import run_fake

    out = tmp_path / "out.parquet"
    run_fake([tree({"a.txt": "one line\n"})], out)
    with pytest.raises(UsageError, match="gpucli.input"):
        run_table(write_table(tmp_path / "t.parquet", RECORDS), out)


@pytest.mark.slow
def test_dry_run_names_each_record_by_path_and_id(tmp_path, capsys):
    from gpucli.engines.dryrun import dry_run

    table, out = write_table(tmp_path / "t.parquet", RECORDS), tmp_path / "out.parquet"
    run_table(table, out)
    write_table(table, RECORDS[:2] + [("d4", "delta")])
    capsys.readouterr()
    dry_run(RunConfig(task=FAKE, from_table=str(table), text_column="body", out=str(out), prune=True))
    said = {(line["path"], line["id"], line["action"]) for line in map(json.loads, capsys.readouterr().out.splitlines())}
    assert said == {("t.parquet", "a1", "run"), ("t.parquet", "b2", "run"), ("t.parquet", "d4", "run"),
                    ("t.parquet", "c3", "prune")}


# --- Qdrant ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_qdrant_point_ids_are_uuid5_of_table_id_and_chunk_and_a_rerun_upserts_in_place(tmp_path, monkeypatch):
    from gpucli.output.sinks.qdrant import NAMESPACE
    from tests.helpers import points

    monkeypatch.chdir(tmp_path)
    table, target = tmp_path / "t.parquet", "qdrant:./qdrant_data/docs"
    write_table(table, RECORDS)
    assert run_table(table, target).succeeded == 3
    first = points(tmp_path / "qdrant_data", "docs")
    expected = {str(uuid.uuid5(NAMESPACE, f"t.parquet//{p.payload['id']}\x00{p.payload['chunk']}")) for p in first}
    assert {str(p.id) for p in first} == expected and len(first) == 5
    assert {(p.payload["path"], p.payload["id"]) for p in first} == {("t.parquet", "a1"), ("t.parquet", "b2"),
                                                                     ("t.parquet", "c3")}

    write_table(table, [("a1", "alpha changed"), ("b2", "beta now one line")])  # b2 shrinks, c3 goes
    third = run_table(table, target, prune=True)
    assert (third.succeeded, third.pruned) == (2, 1)
    after = {(p.payload["id"], p.payload["chunk"]): p.payload["text"] for p in points(tmp_path / "qdrant_data", "docs")}
    assert after == {("a1", 0): "alpha changed", ("b2", 0): "beta now one line"}


# --- usage errors ------------------------------------------------------------------------------
runner = CliRunner()


def test_a_missing_column_exits_2_naming_the_columns_there_are(tmp_path):
    table = write_table(tmp_path / "t.parquet", RECORDS)
    result = runner.invoke(app, ["embed", "--from", str(table), "--text-column", "content", "--out",
                                 str(tmp_path / "o.parquet")])
    assert result.exit_code == 2
    assert "no column 'content' (--text-column); its columns are: id, body, lang" in result.output
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_missing_id_column_exits_2_for_csv_and_jsonl_too(tmp_path, suffix):
    table = write_table(tmp_path / f"t{suffix}", RECORDS)
    with pytest.raises(UsageError, match=r"no column 'key' \(--id-column\); its columns are: id, body, lang"):
        tables.check(RunConfig(task="embed", from_table=str(table), text_column="body", id_column="key"),
                     _embed_task())


def _embed_task():
    from gpucli.tasks import get_task

    return get_task("embed")


def test_from_with_path_arguments_exits_2(tmp_path):
    table = write_table(tmp_path / "t.parquet", RECORDS)
    result = runner.invoke(app, ["embed", str(tmp_path), "--from", str(table), "--text-column", "body"])
    assert result.exit_code == 2 and "give no PATH arguments" in result.output


@pytest.mark.parametrize("task", ["classify", "transcribe"])
def test_from_on_classify_and_transcribe_exits_2(tmp_path, task, monkeypatch):
    table = write_table(tmp_path / "t.parquet", RECORDS)
    assert runner.invoke(app, [task, "--from", str(table)]).exit_code == 2  # no such option there
    monkeypatch.setenv("GPUCLI_FROM_TABLE", str(table))  # nor through the environment
    result = runner.invoke(app, [task, "--out", str(tmp_path / "o.parquet")])
    assert result.exit_code == 2 and "--from is for text tasks" in result.output


def test_an_unknown_table_format_and_a_missing_table_exit_2(tmp_path):
    (tmp_path / "t.xlsx").write_text("x")
    for path, needle in ((tmp_path / "t.xlsx", "*.parquet, *.csv or *.jsonl"), (tmp_path / "no.csv", "no such file")):
        result = runner.invoke(app, ["embed", "--from", str(path), "--out", str(tmp_path / "o.parquet")])
        assert result.exit_code == 2 and needle in result.output


@pytest.mark.slow
def test_an_empty_table_is_a_run_that_found_nothing(tmp_path):
    table = tmp_path / "t.jsonl"
    table.write_text("")
    assert run_table(table, tmp_path / "out.parquet").exit_code == 3  # as an empty directory is
    assert run_table(table, tmp_path / "out.parquet", allow_empty=True).exit_code == 0


def test_table_options_come_from_flags_the_environment_and_the_config_file(tmp_path):
    from gpucli.core.config import build_config

    options = _embed_task().Options
    (tmp_path / "c.toml").write_text('[embed]\nfrom_table = "f.csv"\ntext_column = "file_col"\nid_column = "key"\n')
    env = {"GPUCLI_TEXT_COLUMN": "env_col"}
    config = build_config("embed", options, {"text_column": None}, tmp_path / "c.toml", environ=env)
    assert (config.from_table, config.paths, config.text_column, config.id_column) == ("f.csv", ("f.csv",), "env_col",
                                                                                      "key")
    assert build_config("embed", options, {"text_column": "flag_col"}, tmp_path / "c.toml",
                        environ=env).text_column == "flag_col"


def test_help_shows_from_with_an_example():
    result = runner.invoke(app, ["embed", "--help"], terminal_width=200)
    assert re.search(r"--from\s+PATH", result.output) and "GPUCLI_FROM_TABLE" in result.output  # help's columns
    assert "gpucli embed --from posts.parquet --text-column body --id-column id" in result.output


# --- reading -----------------------------------------------------------------------------------
def test_a_parquet_table_is_read_in_batches_never_whole(tmp_path, monkeypatch):
    table = tmp_path / "big.parquet"
    rows = 20_000
    pq.write_table(pa.table({"id": list(range(rows)), "body": [f"{i:06d} " + "x" * 1000 for i in range(rows)]}),
                   table, row_group_size=2_000)
    monkeypatch.setattr(tables, "BATCH_ROWS", 500)
    for whole in ("read_table", "read_pandas"):
        monkeypatch.setattr(pq, whole, _refuse)
    monkeypatch.setattr(pq.ParquetFile, "read", _refuse)
    batches = []
    real = pq.ParquetFile.iter_batches
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda self, *a, **k: _counted(real(self, *a, **k), batches))
    config = RunConfig(task="embed", from_table=str(table), text_column="body")

    tracemalloc.start()
    count = sum(1 for found in tables.records(config, WalkReport(), 1 << 20) if found.source is not None)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == rows and len(batches) == rows // 500
    assert peak < 20 * 2**20 / 4, f"the walk held {peak / 2**20:.1f} MiB of a 20 MiB table"


def _refuse(*args, **kwargs):
    raise AssertionError("the whole table was read at once")


def _counted(batches, seen: list):
    for batch in batches:
        seen.append(len(batch))
        assert len(batch) <= 500
        yield batch


def test_a_csv_text_with_newlines_and_numeric_looking_values_stays_text(tmp_path):
    table = write_table(tmp_path / "t.csv", [("007", "line one\nline two"), ("8", "12345")])
    config = RunConfig(task="embed", from_table=str(table), text_column="body")
    found = [f.source for f in tables.records(config, WalkReport(), 1 << 20)]
    assert [(s.path, s.data) for s in found] == [("t.csv//007", b"line one\nline two"), ("t.csv//8", b"12345")]


def test_seen_ids_find_repeats_across_merged_runs():
    seen = tables.SeenIds(merge_at=4)
    assert not any(seen.repeated(str(i)) for i in range(10))
    assert all(seen.repeated(str(i)) for i in range(10))
    assert seen.count == 10


def test_keys_split_back_into_path_and_id():
    assert keys.split_key(keys.record_key("sub/t.parquet", "a//b")) == ("sub/t.parquet", "a//b")
    assert keys.split_key("sub/file.txt") == ("sub/file.txt", None)
    table = pa.table({"path": ["t.csv", "f.txt"], "id": ["1", None]})
    assert keys.row_keys(table).to_pylist() == ["t.csv//1", "f.txt"]
    assert WalkReport(roots=["t.csv"], complete=True).may_prune("t.csv//1")
    assert not WalkReport(roots=["t.csv"], complete=True).may_prune("u.csv//1")


# --- the real model --------------------------------------------------------------------------------
@pytest.mark.model
@pytest.mark.slow
def test_a_record_gets_the_same_vector_as_a_file_with_its_text(tmp_path):
    import numpy as np

    text = "Bees make honey from the nectar of flowers."
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bees.txt").write_text(text)
    table = write_table(tmp_path / "t.jsonl", [(1, text)])
    for args in (["--from", str(table), "--text-column", "body", "--out", str(tmp_path / "t.parquet")],
                 [str(tmp_path / "docs"), "--out", str(tmp_path / "f.parquet")]):
        result = runner.invoke(app, ["embed", *args, "--devices", "cpu", "--progress", "off", "--quiet"])
        assert result.exit_code == 0, result.output
    record, file = read_rows(tmp_path / "t.parquet"), read_rows(tmp_path / "f.parquet")
    assert (record[0]["path"], record[0]["id"]) == ("t.jsonl", "1") and len(record[0]["embedding"]) == 384
    assert np.allclose(record[0]["embedding"], file[0]["embedding"], atol=1e-6)


# --- one odd row is one failure record (issue 33, case 5) ---------------------------------------------
def _hundred_rows(odd_at: int, odd: bytes, kind: str) -> bytes:
    """100 records as CSV or JSON lines bytes, the one at `odd_at` with `odd` as its text's bytes."""
    lines = [b"id,body,lang\n"] if kind == "csv" else []
    for i in range(100):
        body = odd if i == odd_at else f"text number {i}".encode()
        if kind == "csv":
            lines.append(b'r%d,"%s",en\n' % (i, body.replace(b'"', b'""')))
        else:
            lines.append(b'{"id": "r%d", "body": "%s"}\n' % (i, body))
    return b"".join(lines)


@pytest.mark.slow
def test_a_2_mb_quoted_csv_value_is_embedded_with_the_rows_around_it(tmp_path):
    table = tmp_path / "t.csv"
    table.write_bytes(_hundred_rows(49, b"a long, quoted value " * 100_000, "csv"))  # ~2 MB, commas inside
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.succeeded, summary.failed, summary.exit_code) == (100, 0, 0), failures(summary)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_one_latin_1_row_in_a_utf_8_table_is_one_failure_record_and_the_rest_is_embedded(tmp_path, kind):
    table = tmp_path / f"t.{kind}"
    table.write_bytes(_hundred_rows(0, "café au lait".encode("latin-1"), kind))
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.succeeded, summary.failed) == (99, 1)
    [failure] = failures(summary)
    assert failure["id"] == "r0" and "not valid UTF-8" in failure["error"] and "0xE9" in failure["error"]
    assert "r0" not in {r["id"] for r in read_rows(tmp_path / "out.parquet")}


@pytest.mark.slow
def test_a_parquet_value_that_is_not_utf_8_is_one_failure_record(tmp_path):
    table = tmp_path / "t.parquet"
    bodies = pa.array([f"text {i}".encode() if i != 7 else b"caf\xe9" for i in range(20)], pa.binary())
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(20)], "body": bodies.view(pa.string())}), table)
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.succeeded, summary.failed) == (19, 1)
    assert failures(summary)[0]["id"] == "r7"


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_a_table_whose_name_is_not_utf_8_works_as_a_walked_file_does(tmp_path, suffix):
    written = write_table(tmp_path / f"plain{suffix}", RECORDS)
    table = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"t\xe9ble" + suffix.encode())))
    written.rename(table)
    summary = run_table(table, tmp_path / "out.parquet")
    assert (summary.succeeded, summary.exit_code) == (3, 0)
    assert {r["path"] for r in read_rows(tmp_path / "out.parquet")} == {f"t\\xe9ble{suffix}"}
    assert run_table(table, tmp_path / "out.parquet").unchanged == 3
