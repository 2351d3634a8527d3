"""Identical content embedded once (issue 30, part 4; gpucli/output/dedup.py), end to end: copies get
the original's rows under their own path with one forward pass per distinct content, in a run
and across runs (Parquet and JSON lines), exactly once after a kill -9 and a rerun; --prune of
the original keeps the copy, a changed copy gets its own rows; embed's --no-dedup embeds all."""

from __future__ import annotations

import json
import os
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from tests.helpers import read_rows, run_fake, sigkill_after_parts

pytestmark = pytest.mark.slow  # every test runs the whole pipeline, some several times

DEDUP = {"dedup": True}


def _texts(log: Path) -> list[str]:
    """Every item the workers saw (the fake task's batch log)."""
    if not log.exists():
        return []
    return [text for line in log.read_text().splitlines() for text in json.loads(line)["texts"]]


def _rows_by_path(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: (r["path"], r["chunk"])):
        out.setdefault(row["path"], []).append({k: v for k, v in row.items() if k not in ("path", "size", "mtime")})
    return out


def _jsonl(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_copies_get_the_originals_rows_with_one_forward_pass_per_distinct_content(tree, tmp_path):
    files = {f"doc{i}.txt": f"first line of {i}\nsecond line of {i}\n" for i in range(6)}
    files.update({f"vendored/doc{i}.txt": files[f"doc{i}.txt"] for i in range(3)})
    files["vendored/deep/doc0.txt"] = files["doc0.txt"]
    root = tree(files)
    log = tmp_path / "batches.jsonl"
    out = tmp_path / "out.parquet"
    summary = run_fake([root], out, {**DEDUP, "batch_log": str(log)})
    assert (summary.succeeded, summary.deduplicated, summary.rows, summary.exit_code) == (10, 4, 20, 0)
    assert sorted(_texts(log)) == sorted(t for i in range(6) for t in (f"first line of {i}", f"second line of {i}"))
    by_path = _rows_by_path(read_rows(out))
    assert set(by_path) == set(files)
    for copy in ("vendored/doc0.txt", "vendored/deep/doc0.txt", "vendored/doc1.txt", "vendored/doc2.txt"):
        assert by_path[copy] == by_path[copy.split("/")[-1]], "text, chunk, vectors and digest equal"
    sizes = {r["path"]: r["size"] for r in read_rows(out)}
    assert sizes["vendored/deep/doc0.txt"] == os.path.getsize(root / "vendored/deep/doc0.txt")


def test_without_dedup_every_copy_goes_through_the_model(tree, tmp_path):
    root = tree({"a.txt": "same text\n", "b.txt": "same text\n", "c.txt": "same text\n"})
    log = tmp_path / "batches.jsonl"
    summary = run_fake([root], tmp_path / "out.parquet", {"batch_log": str(log)})
    assert (summary.succeeded, summary.deduplicated) == (3, 0)
    assert _texts(log) == ["same text"] * 3


def test_a_rerun_copies_content_the_output_holds_without_a_forward_pass(tree, tmp_path):
    for name in ("out.parquet", "out.jsonl"):
        root = tree({"a.txt": "alpha one\nalpha two\n", "b.txt": "beta\n"}, name=f"tree-{name}")
        out = tmp_path / name
        log, loaded = tmp_path / f"{name}.log", tmp_path / f"{name}.loaded"
        options = {**DEDUP, "batch_log": str(log), "ready_marker": str(loaded)}
        assert run_fake([root], out, options).succeeded == 2
        (root / "later").mkdir()
        (root / "later/a-copy.txt").write_text("alpha one\nalpha two\n")
        log.unlink()
        loaded.unlink()
        summary = run_fake([root], out, options)
        assert (summary.succeeded, summary.deduplicated, summary.unchanged, summary.rows) == (1, 1, 2, 2), name
        assert _texts(log) == [], f"{name}: no forward pass"
        assert not loaded.exists(), f"{name}: no worker loaded a model for copies alone"
        rows = read_rows(out) if name.endswith(".parquet") else _jsonl(out)
        by_path = _rows_by_path(rows)
        assert by_path["later/a-copy.txt"] == by_path["a.txt"], name
        assert Counter(r["path"] for r in rows) == {"a.txt": 2, "later/a-copy.txt": 2, "b.txt": 1}, name


KILLED_RUN = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu", progress="off",
                  task_options={{"sleep_ms": 30, "dedup": True}}, batch_size=4, part_rows=12, flush_s=0.2))
""")


def test_sigkill_mid_run_then_rerun_gives_every_input_and_copy_once(tree, tmp_path):
    files = {f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(150)}
    files.update({f"copies/f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(150)})
    root = tree(files)
    out = tmp_path / "out.parquet"
    script = KILLED_RUN.format(root=str(Path(__file__).resolve().parents[2]), src=str(root), out=str(out))
    sigkill_after_parts(script, out)
    done_before = {r["path"] for r in read_rows(out)}
    assert 0 < len(done_before) < 300
    summary = run_fake([root], out, {"sleep_ms": 30, "dedup": True}, batch_size=4)
    assert summary.exit_code == 0 and summary.deduplicated > 0
    rows = read_rows(out)
    counts = Counter((r["path"], r["chunk"]) for r in rows)
    assert set(p for p, _ in counts) == set(files)
    assert max(counts.values()) == 1 and len(counts) == 600
    by_path = _rows_by_path(rows)
    assert all(by_path[f"copies/f{i:03d}.txt"] == by_path[f"f{i:03d}.txt"] for i in range(150))


def test_prune_of_the_original_keeps_the_copy_and_a_changed_copy_gets_its_own_rows(tree, tmp_path):
    root = tree({"a.txt": "shared words\n", "b.txt": "shared words\n", "c.txt": "shared words\n"})
    out = tmp_path / "out.parquet"
    assert run_fake([root], out, DEDUP).deduplicated == 2
    (root / "a.txt").unlink()
    pruned = run_fake([root], out, DEDUP, prune=True)
    assert pruned.pruned == 1
    assert sorted(r["path"] for r in read_rows(out)) == ["b.txt", "c.txt"], "the copies' rows are their own"
    (root / "c.txt").write_text("other words now\n")
    changed = run_fake([root], out, DEDUP)
    assert (changed.succeeded, changed.deduplicated) == (1, 0)
    rows = {r["path"]: r for r in read_rows(out)}
    assert sorted(rows) == ["b.txt", "c.txt"] and rows["c.txt"]["text"] == "other words now"
    assert rows["b.txt"]["text"] == "shared words"


@pytest.mark.model
def test_embed_dedups_by_default_and_no_dedup_embeds_all(tree, tmp_path):
    text = "Identical paragraphs appear in vendored copies of a project.\n"
    root = tree({"a.txt": text, "copy/a.txt": text, "b.txt": "Another paragraph entirely.\n"})
    runner = CliRunner()
    summaries = {}
    for flag in ("--dedup", "--no-dedup"):
        out = tmp_path / f"{flag.strip('-')}.parquet"
        result = runner.invoke(app, ["embed", str(root), "--out", str(out), "--devices", "cpu", "--json", flag])
        assert result.exit_code == 0, result.output
        summaries[flag] = json.loads(result.stdout.strip().splitlines()[-1])
        rows = {r["path"]: r for r in read_rows(out)}
        assert rows["copy/a.txt"]["embedding"] == rows["a.txt"]["embedding"] or flag == "--no-dedup"
    assert summaries["--dedup"]["deduplicated"] == 1 and summaries["--no-dedup"]["deduplicated"] == 0
    assert summaries["--dedup"]["rows"] == summaries["--no-dedup"]["rows"] == 3


def test_table_records_are_deduplicated_by_their_text_each_under_its_own_id(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from tests.fake_task import FAKE

    table, out, log = tmp_path / "t.parquet", tmp_path / "out.parquet", tmp_path / "batches.jsonl"

    def run_table(records):
        pq.write_table(pa.Table.from_pylist([{"id": rid, "body": body} for rid, body in records]), table)
        return run(RunConfig(task=FAKE, from_table=str(table), out=str(out), progress="off", devices="cpu",
                             text_column="body", task_options={**DEDUP, "batch_log": str(log)}))

    records = [("a", "the same words"), ("b", "other words"), ("c", "the same words")]
    first = run_table(records)
    assert (first.succeeded, first.deduplicated) == (3, 1)
    assert sorted(_texts(log)) == ["other words", "the same words"]
    again = run_table(records + [("d", "other words")])  # a new record whose text the output holds
    assert (again.succeeded, again.deduplicated, again.unchanged) == (1, 1, 3)
    assert sorted(_texts(log)) == ["other words", "the same words"], "no forward pass for d"
    rows = {r["id"]: r for r in read_rows(out)}
    assert sorted(rows) == ["a", "b", "c", "d"] and {r["path"] for r in rows.values()} == {"t.parquet"}
    assert rows["d"]["embedding"] == rows["b"]["embedding"] and rows["c"]["text"] == rows["a"]["text"]
