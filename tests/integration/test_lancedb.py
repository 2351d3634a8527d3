"""LanceDB (issue 48): the rows as Parquet has them, read back by lancedb, pylance, polars and DuckDB
as docs/lancedb.md shows; reruns merged by path and chunk, failures and --prune deleted; a run
killed with SIGKILL leaves a readable table and the rerun exact; the lock; compaction and cleanup of
old versions; the vector index past its threshold; search equal to Parquet's; the refusals."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from datetime import timedelta

import lance
import lancedb
import numpy as np
import pyarrow.dataset as ds
import pytest

import gpucli.output.sinks.lancedb.sink as lance_sink
from gpucli.commands import search as search_mod
from gpucli.core.errors import LockedError, UsageError
from gpucli.output.lock import RunLock
from tests.helpers import ROOT, run_fake


def table(tmp_path, name: str = "docs"):
    return lancedb.connect(str(tmp_path / "db")).open_table(name)


def keyed(rows: list[dict]) -> list[tuple]:
    return sorted((r["path"], r["chunk"], r["text"], tuple(r["embedding"]), r["digest"]) for r in rows)


def test_the_table_holds_the_parquet_rows_and_each_documented_reader_reads_it(tree, tmp_path):
    import duckdb
    import polars as pl

    root = tree({"a.txt": "one two\nthree\n", "sub/b.txt": "alpha beta gamma\n", "c.txt": "x\n"})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    assert run_fake([root], out).rows == 4
    run_fake([root], tmp_path / "same.parquet")
    expected = keyed(ds.dataset(tmp_path / "same.parquet").to_table().to_pylist())
    docs = table(tmp_path)
    assert keyed(docs.to_arrow().to_pylist()) == expected  # lancedb
    assert docs.schema.metadata[b"gpucli.model"] == b"fake-model"
    dataset = lance.dataset(str(tmp_path / "db" / "docs.lance"))  # pylance
    assert keyed(dataset.to_table().to_pylist()) == expected
    assert sorted(pl.scan_pyarrow_dataset(dataset).select("path", "chunk").collect().rows()) == \
        sorted((r[0], r[1]) for r in expected)  # polars
    # DuckDB scans the Lance dataset (a pyarrow Dataset) by the Python variable's name
    assert duckdb.sql("select count(*), count(distinct path) from dataset").fetchall() == [(4, 3)]
    assert docs.schema.field("embedding").type.list_size == 4 and str(docs.schema.field("mtime").type) == \
        str(ds.dataset(tmp_path / "same.parquet").schema.field("mtime").type)


def test_reruns_merge_by_path_and_chunk_and_failures_and_prune_delete(tree, tmp_path):
    root = tree({f"f{i}.txt": f"line {i}\nmore {i}\n" for i in range(20)})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    assert run_fake([root], out).rows == 40
    assert run_fake([root], out).unchanged == 20
    (root / "f1.txt").write_text("shorter\n")
    (root / "f2.txt").write_text("now BOOM\nfails\n")
    (root / "f3.txt").unlink()
    summary = run_fake([root], out, prune=True)
    assert summary.exit_code == 1 and summary.failed == 1 and summary.pruned == 1
    rows = table(tmp_path).to_arrow().to_pylist()
    counts = Counter(r["path"] for r in rows)
    assert counts == {f"f{i}.txt": 2 for i in range(20) if i not in (1, 2, 3)} | {"f1.txt": 1}
    assert [r["text"] for r in rows if r["path"] == "f1.txt"] == ["shorter"]


KILLED_RUN = textwrap.dedent("""
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu", progress="off",
                  task_options={{"sleep_ms": 20}}, batch_size=4, part_rows=6, flush_s=0.1))
""")


def done_in_ledger(path) -> int:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1)
        try:
            return db.execute("select count(*) from files where status='done'").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_sigkill_leaves_a_readable_table_and_the_rerun_exact(tree, tmp_path):
    files = {f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(150)}
    root = tree(files)
    out = f"lancedb:{tmp_path / 'db'}/docs"
    ledger = tmp_path / "db" / "docs.gpucli" / "ledger.sqlite"
    for target in (15, 70):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN.format(src=str(root), out=out)], cwd=ROOT,
                                start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and done_in_ledger(ledger) < target and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        present = Counter(r["path"] for r in table(tmp_path).to_arrow().to_pylist())  # readable at its last commit
        assert len(present) >= done_in_ledger(ledger) and all(count == 2 for count in present.values())
    summary = run_fake([root], out, {"sleep_ms": 20})
    assert summary.exit_code == 0
    counts = Counter((r["path"], r["chunk"]) for r in table(tmp_path).to_arrow().to_pylist())
    assert set(path for path, _ in counts) == set(files) and max(counts.values()) == 1 and len(counts) == 300


def test_a_second_writer_exits_75(tree, tmp_path):
    root = tree({"a.txt": "x\n"})
    lock = RunLock(tmp_path / "db" / "docs.gpucli")
    lock.acquire("the first run")
    try:
        with pytest.raises(LockedError) as refused:
            run_fake([root], f"lancedb:{tmp_path / 'db'}/docs")
        assert refused.value.exit_code == 75
    finally:
        lock.release()


def test_many_small_fragments_are_compacted_and_old_versions_cleaned(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(lance_sink, "COMPACT_FRAGMENTS", 4)
    monkeypatch.setattr(lance_sink, "KEEP_VERSIONS", timedelta(0))
    root = tree({f"f{i}.txt": f"line {i}\n" for i in range(30)})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    run_fake([root], out, batch_size=2, part_rows=2, flush_s=0.01)
    docs = table(tmp_path)
    assert docs.stats()["fragment_stats"]["num_fragments"] == 1 and docs.count_rows() == 30
    assert len(docs.list_versions()) <= 2  # the compaction's, and at most the one it replaced


def test_the_vector_index_is_built_past_the_threshold_and_search_equals_exact(tree, tmp_path, monkeypatch,
                                                                              fixed_query):
    monkeypatch.setattr(lance_sink, "INDEX_ROWS", 500)
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    root = tree({f"f{i}.txt": " ".join(rng.choice(words, 4)) + "\n" for i in range(600)})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    run_fake([root], out)
    assert [index.columns for index in table(tmp_path).list_indices()] == [["embedding"]]
    fixed_query["vector"] = [5, 4, 4, 1]
    exact = search_mod.search(f"{out}?exact=true", "q", 10)
    indexed = search_mod.search(out, "q", 10)
    assert [h.score for h in indexed.hits] == pytest.approx([h.score for h in exact.hits], abs=1e-4)


@pytest.fixture
def fixed_query(monkeypatch):
    holder = {}

    def fake(model, queries, prompt=None):
        holder["model"] = model
        return [np.asarray(holder["vector"], dtype=np.float32) / np.linalg.norm(holder["vector"]) for _ in queries]

    monkeypatch.setattr(search_mod, "embed_queries", fake)
    return holder


def test_search_gives_the_parquet_outputs_hits(tree, tmp_path, fixed_query):
    root = tree({"a.txt": "one two three\nfour five\n", "b.txt": "alpha beta gamma delta\nxy\n", "c.txt": "q w e\n"})
    run_fake([root], tmp_path / "out.parquet")
    run_fake([root], f"lancedb:{tmp_path / 'db'}/docs")
    fixed_query["vector"] = [5, 4, 4, 0]
    expected = search_mod.search(str(tmp_path / "out.parquet"), "q", 4)
    found = search_mod.search(f"lancedb:{tmp_path / 'db'}/docs", "q", 4)
    assert found.model == "fake-model"
    assert [(h.path, h.chunk, h.text) for h in found.hits] == [(h.path, h.chunk, h.text) for h in expected.hits]
    assert [h.score for h in found.hits] == pytest.approx([h.score for h in expected.hits], abs=1e-5)


def test_another_model_is_refused_naming_full_and_full_makes_the_table_again(tree, tmp_path):
    root = tree({"a.txt": "one two\n"})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    run_fake([root], out)
    with pytest.raises(UsageError, match="--full"):
        run_fake([root], out, model="other-model")
    assert run_fake([root], out, model="other-model", incremental=False).exit_code == 0
    assert table(tmp_path).schema.metadata[b"gpucli.model"] == b"other-model"


def test_inspect_and_a_table_gpucli_did_not_write(tree, tmp_path):
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    root = tree({"a.txt": "one\ntwo\n"})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    run_fake([root], out)
    shown = CliRunner().invoke(app, ["inspect", out, "--json"])
    report = json.loads(shown.output)
    assert report["format"] == "lancedb" and report["rows"] == 2 and report["inputs_done"] == 1
    assert report["model"] == "fake-model"
    lancedb.connect(str(tmp_path / "db")).create_table("mine", data=[{"x": 1}])
    with pytest.raises(UsageError, match="gpucli did not write"):
        run_fake([root], f"lancedb:{tmp_path / 'db'}/mine")


def test_without_lancedb_the_output_is_refused_naming_the_extra(tree):
    code = ("import sys; sys.modules['lancedb'] = None; sys.argv = ['gpucli'] + sys.argv[1:]; "
            "from gpucli.__main__ import main; main()")
    result = subprocess.run([sys.executable, "-c", code, "embed", str(tree({"a.txt": "x\n"})), "--out",
                             "lancedb:./db/docs", "--quiet"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert "pip install 'gpucli[lancedb]'" in result.stderr


@pytest.mark.slow
def test_the_ray_engine_writes_from_its_driver_and_the_local_rerun_finds_everything_done(ray_session, tree, tmp_path):
    from tests.fake_task import FAKE
    from tests.helpers import run_with

    root = tree({f"d{i % 3}/f{i:02d}.txt": f"alpha {i}\nbeta {i}\n" for i in range(24)})
    out = f"lancedb:{tmp_path / 'db'}/docs"
    summary = run_with("ray", FAKE, [root], out)
    assert summary.exit_code == 0 and summary.rows == 48
    assert Counter(r["path"] for r in table(tmp_path).to_arrow().to_pylist()) == {p: 2 for p in
                                                                                   map(str, _relative(root))}
    assert run_fake([root], out).unchanged == 24


def _relative(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.txt"))


def test_the_reading_block_of_the_docs_runs_on_a_table_gpucli_wrote(tree, tmp_path, monkeypatch, capsys):
    import re

    text = (ROOT / "docs" / "lancedb.md").read_text(encoding="utf-8")
    block = re.search(r"```py\n(.*?)```", text, re.DOTALL).group(1)
    root = tree({"a.txt": "one two\nthree\n", "b.txt": "alpha beta\n"})
    monkeypatch.chdir(tmp_path)
    run_fake([root], "lancedb:./lance/docs")
    exec(compile(block, "docs/lancedb.md", "exec"), {})
    shown = capsys.readouterr().out
    assert "3 b'fake-model'" in shown and "'path': 'a.txt'" in shown and "('a.txt', 2)" in shown
