"""PostgreSQL with pgvector (issue 48), against a real server (tests/pg_server.py: PostgreSQL 16 and
pgvector from the pgserver wheel): the rows as Parquet has them, reruns, --prune, failures; exactly
once when the client is killed (SIGKILL) and when the server restarts at many points; the advisory
lock; the refusals (a wrong password, no such database, another model or width) and the run's
failures (unreachable, a statement timeout); search, the HNSW index and inspect; no password shown."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import numpy as np
import psycopg
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.commands import search as search_mod
from gpucli.core.errors import LockedError, RunFailedError, UsageError
from tests.helpers import ROOT, run_fake
from tests.pg_server import PASSWORD, PgServer

runner = CliRunner()
COLUMNS = ["path", "chunk", "text", "words", "embedding", "size", "mtime", "digest"]


@pytest.fixture(scope="module")
def pg():
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture
def db(pg):
    return pg.new_database()


def rows(pg: PgServer, database: str, table: str = "docs") -> list[tuple]:
    return pg.execute(database, f"select path, chunk, text, words, embedding::text, size, "
                                f"(extract(epoch from mtime) * 1000000)::bigint, digest from {table} order by path, chunk")


def ledger(pg: PgServer, database: str) -> dict[str, tuple]:
    found = pg.execute(database, "select path, status, rows from gpucli_inputs") \
        if pg.execute(database, "select to_regclass('gpucli_inputs') is not null")[0][0] else []
    return {path: (status, count) for path, status, count in found}


def assert_whole(pg: PgServer, database: str) -> dict[str, tuple]:
    """Every input done has exactly its rows, chunks 0..n-1; no other input has any."""
    entries = ledger(pg, database)
    present = Counter(path for path, *_ in pg.execute(database, "select path from docs")) \
        if pg.execute(database, "select to_regclass('docs') is not null")[0][0] else Counter()
    for path, count in present.items():
        assert entries.get(path, ("", 0))[0] == "done" and entries[path][1] == count, (path, count, entries.get(path))
    for path, (status, count) in entries.items():
        assert status != "done" or present[path] == count, (path, status, count, present[path])
    return entries


def embedding_text(vector) -> str:
    return "[" + ",".join(f"{v:g}" for v in vector) + "]"


def test_rows_are_the_parquet_rows_with_a_vector_column(pg, db, tree, tmp_path):
    root = tree({"a.txt": "one two\nthree\n", "sub/b.txt": "alpha beta gamma\n", "c.txt": "x\n"})
    summary = run_fake([root], pg.out(db))
    assert summary.exit_code == 0 and summary.rows == 4
    run_fake([root], tmp_path / "same.parquet")
    table = ds.dataset(tmp_path / "same.parquet").to_table()
    expected = sorted((r["path"], r["chunk"], r["text"], r["words"], embedding_text(r["embedding"]), r["size"],
                       r["mtime"], r["digest"])  # PostgreSQL keeps microseconds: the schema's time, to the microsecond
                      for r in table.set_column(table.schema.get_field_index("mtime"), "mtime",
                                                table["mtime"].cast("int64")).to_pylist())
    unit = table.schema.field("mtime").type.unit
    expected = [(*r[:6], r[6] // {"ns": 1000, "us": 1}[unit], r[7]) for r in expected]
    assert rows(pg, db) == expected
    types = dict(pg.execute(db, "select attname, format_type(atttypid, atttypmod) from pg_attribute where "
                                "attrelid = 'docs'::regclass and attnum > 0"))
    assert types["embedding"] == "vector(4)" and types["mtime"].startswith("timestamp") and types["chunk"] == "integer"
    assert json.loads(pg.execute(db, "select obj_description('docs'::regclass)")[0][0])["gpucli.model"] == "fake-model"


def test_reruns_changes_failures_and_prune_keep_every_input_whole(pg, db, tree):
    root = tree({f"f{i}.txt": f"line {i}\nmore {i}\n" for i in range(20)})
    out = pg.out(db)
    assert run_fake([root], out).rows == 40
    again = run_fake([root], out)
    assert again.unchanged == 20 and again.rows == 0
    (root / "f1.txt").write_text("shorter\n")
    (root / "f2.txt").write_text("now BOOM\nfails\n")
    (root / "f3.txt").unlink()
    summary = run_fake([root], out, prune=True)
    assert summary.exit_code == 1 and summary.failed == 1 and summary.pruned == 1
    entries = assert_whole(pg, db)
    assert entries["f1.txt"] == ("done", 1) and entries["f2.txt"][0] == "failed" and "f3.txt" not in entries
    assert [r[:3] for r in rows(pg, db) if r[0] == "f1.txt"] == [("f1.txt", 0, "shorter")]
    assert {r[0] for r in rows(pg, db)} == {f"f{i}.txt" for i in range(20)} - {"f2.txt", "f3.txt"}


KILLED_RUN = textwrap.dedent("""
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu", progress="off",
                  task_options={{"sleep_ms": 20}}, batch_size=4, part_rows=6, flush_s=0.1))
""")


def done_count(pg: PgServer, database: str) -> int:
    try:
        return sum(1 for status, _ in ledger(pg, database).values() if status == "done")
    except psycopg.Error:
        return 0


@pytest.mark.slow
def test_sigkill_of_the_client_at_many_points_leaves_inputs_whole_and_the_rerun_exact(pg, db, tree):
    files = {f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(200)}
    root = tree(files)
    out = pg.out(db)
    marks = []
    for target in (10, 45, 90, 140):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN.format(src=str(root), out=out)], cwd=ROOT,
                                start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and done_count(pg, db) < target and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        marks.append(len([e for e in assert_whole(pg, db).values() if e[0] == "done"]))
    assert marks == sorted(marks) and 0 < marks[0] and marks[-1] < 200, marks
    summary = run_fake([root], out, {"sleep_ms": 20})
    assert summary.exit_code == 0 and summary.unchanged == marks[-1]
    counts = Counter((path, chunk) for path, chunk, *_ in rows(pg, db))
    assert set(path for path, _ in counts) == set(files) and max(counts.values()) == 1 and len(counts) == 400


@pytest.mark.slow
def test_server_restarts_mid_run_leave_inputs_whole_and_the_rerun_exact(pg, db, tree, monkeypatch):
    monkeypatch.setenv("GPUCLI_PG_BACKOFF_S", "0.2")
    monkeypatch.setenv("GPUCLI_PG_RETRIES", "40")  # a restart's recovery takes seconds on a loaded machine
    files = {f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(160)}
    root = tree(files)
    restarts: list[int] = []

    def restart_at(targets):
        for target in targets:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and done_count(pg, db) < target:
                time.sleep(0.02)
            pg.restart()
            restarts.append(done_count(pg, db))

    restarter = threading.Thread(target=restart_at, args=([20, 60, 110],))
    restarter.start()
    summary = run_fake([root], pg.out(db), {"sleep_ms": 15}, batch_size=4, part_rows=6, flush_s=0.1)
    restarter.join()
    assert len(restarts) == 3 and summary.exit_code == 0, (restarts, summary.exit_code)  # retried through each
    assert_whole(pg, db)
    rerun = run_fake([root], pg.out(db), {"sleep_ms": 15})
    assert rerun.exit_code == 0
    counts = Counter((path, chunk) for path, chunk, *_ in rows(pg, db))
    assert set(path for path, _ in counts) == set(files) and max(counts.values()) == 1 and len(counts) == 320


def test_a_second_writer_exits_75_at_once(pg, db, tree):
    root = tree({"a.txt": "one\n"})
    with psycopg.connect(pg.dsn(db), autocommit=True, application_name="the other run") as holder:
        holder.execute("select pg_try_advisory_lock(hashtext('gpucli'), hashtext('gpucli:public.docs'))")
        with pytest.raises(LockedError, match="public.docs") as refused:
            run_fake([root], pg.out(db))
        assert refused.value.exit_code == 75 and "the other run" in str(refused.value)
    assert run_fake([root], pg.out(db)).exit_code == 0  # the session ended: the lock went with it


@pytest.mark.parametrize("url, needle", [
    ("postgresql://pwuser:wrong-pw@/{db}?host={host}&table=docs", "password authentication failed"),
    ("postgresql://postgres@/no_such_db?host={host}&table=docs", "does not exist"),
])
def test_a_wrong_password_or_database_exits_2_in_one_line(pg, db, tree, url, needle):
    root = tree({"a.txt": "one\n"})
    target = url.format(db=db, host=pg.host)
    result = runner.invoke(app, ["embed", str(root), "--out", target, "--quiet"])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "wrong-pw" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1, result.output


def test_an_unreachable_server_is_retried_then_exit_3(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCLI_PG_RETRIES", "3")
    monkeypatch.setenv("GPUCLI_PG_BACKOFF_S", "0.01")
    root = tree({"a.txt": "one\n"})
    result = runner.invoke(app, ["embed", str(root), "--out", f"postgresql://u@/db?host={tmp_path}&table=docs",
                                 "--quiet"])
    assert result.exit_code == 3, result.output
    assert "after 3 attempts" in result.output


def test_another_model_or_width_exits_2_naming_full_and_full_rebuilds(pg, db, tree):
    root = tree({"a.txt": "one two\n", "b.txt": "three\n"})
    out = pg.out(db)
    assert run_fake([root], out).exit_code == 0
    with pytest.raises(UsageError, match="--full"):
        run_fake([root], out, model="other-model")
    pg.execute(db, "create table wide (path text, chunk int, embedding vector(8))")
    with pytest.raises(UsageError, match="vector\\(8\\).*--full"):
        run_fake([root], pg.out(db, "wide"))
    assert run_fake([root], pg.out(db, "wide"), incremental=False).exit_code == 0
    assert pg.execute(db, "select format_type(atttypid, atttypmod) from pg_attribute where attrelid = "
                          "'wide'::regclass and attname = 'embedding'") == [("vector(4)",)]


def test_a_table_gpucli_did_not_write_is_refused(pg, db, tree):
    pg.execute(db, "create table docs (path text); insert into docs values ('mine')")
    summary = runner.invoke(app, ["embed", str(tree({"a.txt": "x\n"})), "--out", pg.out(db), "--quiet"])
    assert summary.exit_code == 2 and "gpucli did not write" in summary.output
    assert pg.execute(db, "select path from docs") == [("mine",)]


@pytest.mark.slow
def test_a_statement_timeout_exits_3_with_rows_whole_and_the_rerun_finishes(pg, db, tree):
    root = tree({f"f{i}.txt": f"line {i}\n" for i in range(12)})
    assert run_fake([root], pg.out(db)).exit_code == 0
    for i in range(12):
        (root / f"f{i}.txt").write_text(f"changed {i}\nagain\n")
    out = pg.out(db, options="-c%20statement_timeout%3D1500")
    with psycopg.connect(pg.dsn(db)) as blocker:  # holds off every insert into the ledger
        blocker.execute("lock table gpucli_inputs in share mode")
        with pytest.raises(RunFailedError, match="statement timeout") as failed:
            run_fake([root], out)
        blocker.rollback()
    assert failed.value.exit_code == 3
    entries = assert_whole(pg, db)
    assert all(count == 1 for _, count in entries.values())  # the old version, whole
    assert run_fake([root], pg.out(db)).exit_code == 0
    assert all(count == 2 for _, count in assert_whole(pg, db).values())


def test_without_psycopg_the_output_is_refused_naming_the_extra(tree):
    code = ("import sys; sys.modules['psycopg'] = None; sys.argv = ['gpucli'] + sys.argv[1:]; "
            "from gpucli.__main__ import main; main()")
    result = subprocess.run([sys.executable, "-c", code, "embed", str(tree({"a.txt": "x\n"})), "--out",
                             "postgresql://u@localhost/db?table=docs", "--quiet"], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert "pip install 'gpucli[postgres]'" in result.stderr


@pytest.fixture
def fixed_query(monkeypatch):
    holder = {}

    def fake(model, queries, prompt=None):
        holder["model"] = model
        return [np.asarray(holder["vector"], dtype=np.float32) / np.linalg.norm(holder["vector"]) for _ in queries]

    monkeypatch.setattr(search_mod, "embed_queries", fake)
    return holder


def test_search_gives_the_parquet_outputs_hits_exact_and_through_hnsw(pg, db, tree, tmp_path, fixed_query):
    root = tree({"a.txt": "one two three\nfour five\n", "b.txt": "alpha beta gamma delta\nxy\n", "c.txt": "q w e\n"})
    run_fake([root], tmp_path / "out.parquet")
    run_fake([root], pg.out(db, index="hnsw"))
    assert pg.execute(db, "select count(*) from pg_indexes where tablename='docs' and indexdef ilike '%hnsw%'") == [(1,)]
    fixed_query["vector"] = [5, 4, 4, 0]
    expected = search_mod.search(str(tmp_path / "out.parquet"), "q", 4)
    for where in (pg.out(db), pg.out(db, exact="true")):
        found = search_mod.search(where, "q", 4)
        assert found.model == "fake-model" and fixed_query["model"] == "fake-model"
        assert [(h.path, h.chunk, h.text) for h in found.hits] == [(h.path, h.chunk, h.text) for h in expected.hits]
        assert [h.score for h in found.hits] == pytest.approx([h.score for h in expected.hits], abs=1e-5)


def test_the_index_waits_for_enough_rows_unless_asked_and_none_builds_none(pg, db, tree):
    root = tree({"a.txt": "one\n"})
    run_fake([root], pg.out(db))
    run_fake([root], pg.out(db, "never", index="none"))
    hnsw = "select tablename from pg_indexes where indexdef ilike '%hnsw%'"
    assert pg.execute(db, hnsw) == []  # auto: below 10,000 rows an exact scan answers
    run_fake([root], pg.out(db, "asked", index="hnsw"))
    assert pg.execute(db, hnsw) == [("asked",)]


def test_inspect_reads_the_ledger_and_table_and_no_password_is_ever_shown(pg, db, tree):
    root = tree({"a.txt": "one\ntwo\n", "b.txt": "BOOM\n"})
    out = f"postgresql://pwuser:{PASSWORD}@/{db}?host={pg.host}&table=docs"
    summary = run_fake([root], out)
    assert summary.exit_code == 1 and PASSWORD not in summary.out and PASSWORD not in summary.failures_file
    shown = runner.invoke(app, ["inspect", out, "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert report["format"] == "postgresql" and report["rows"] == 2 and report["inputs_done"] == 1
    assert report["inputs_failed"] == 1 and report["failures"] == 1 and report["model"] == "fake-model"
    assert PASSWORD not in shown.output


@pytest.mark.slow
def test_the_ray_engine_writes_from_its_driver_and_the_local_rerun_finds_everything_done(ray_session, pg, db, tree):
    from tests.fake_task import FAKE
    from tests.helpers import run_with

    root = tree({f"d{i % 3}/f{i:02d}.txt": f"alpha {i}\nbeta BOOM {i}\n" if i == 5 else f"alpha {i}\nbeta {i}\n"
                 for i in range(24)})
    summary = run_with("ray", FAKE, [root], pg.out(db))
    assert summary.exit_code == 1 and summary.succeeded == 23 and summary.failed == 1 and summary.rows == 46
    assert_whole(pg, db)
    assert run_fake([root], pg.out(db)).unchanged == 23


def test_the_sql_of_the_docs_runs_on_a_table_gpucli_wrote(pg, db, tree):
    import re

    text = (ROOT / "docs" / "postgresql.md").read_text(encoding="utf-8")
    sql = re.search(r"```sql\n(.*?)```", text, re.DOTALL).group(1)
    root = tree({"reports/a.txt": "one two\nthree\n", "b.txt": "alpha beta\n"})
    run_fake([root], pg.out(db, "chunks"))
    found = pg.execute(db, sql.replace(":'q'", "'[3,3,0,0]'").rstrip().rstrip(";"))
    assert [row[:3] for row in found] == [("reports/a.txt", 0, "one two"), ("reports/a.txt", 1, "three")]
    assert found[0][3] == pytest.approx(1.0)


def test_a_dry_run_reads_the_ledger_in_the_database_and_creates_nothing(pg, db, tree, capsys):
    from gpucli.core.config import RunConfig
    from gpucli.engines.dryrun import dry_run
    from tests.fake_task import FAKE

    def actions(**kw) -> dict[str, str]:
        capsys.readouterr()
        dry_run(RunConfig(task=FAKE, paths=(str(root),), out=pg.out(db), progress="off", **kw))
        return {line["path"]: line["action"] for line in map(json.loads, capsys.readouterr().out.splitlines())}

    root = tree({"a.txt": "one\n", "b.txt": "two\n", "c.txt": "three\n"})
    assert set(actions().values()) == {"run"}
    assert pg.execute(db, "select to_regclass('gpucli_meta') is null") == [(True,)]  # nothing created
    run_fake([root], pg.out(db))
    (root / "b.txt").write_text("changed\n")
    (root / "c.txt").unlink()
    assert actions(prune=True) == {"a.txt": "unchanged", "b.txt": "run", "c.txt": "prune"}


@pytest.mark.parametrize("metadata, column, needle", [
    ({"gpucli.vector_type": "float16"}, None, "halfvec (pgvector 0.7.0"),
    ({"gpucli.vector_type": "binary"}, None, "bit (pgvector 0.7.0"),
    ({"gpucli.vector_type": "int8"}, None, "a type pgvector does not have"),
    ({}, "sparse", "sparsevec (pgvector 0.7.0"),
])
def test_vector_types_pgvector_lacks_here_are_refused_before_any_work_naming_the_version(metadata, column, needle):
    import pyarrow as pa

    from gpucli.output.sinks.postgres import PostgresSink

    fields = [pa.field("path", pa.string()), pa.field("embedding", pa.list_(pa.float32(), 4))]
    schema = pa.schema(fields + ([pa.field(column, pa.string())] if column else []))
    sink = PostgresSink("postgresql://u@/nowhere?host=/nonexistent&table=docs")
    with pytest.raises(UsageError, match=re.escape(needle)):
        sink.open(schema, {"gpucli.model": "m", **metadata})
