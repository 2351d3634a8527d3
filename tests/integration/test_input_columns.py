"""Per-input columns (issue 14): every row carries its input's `size`, `mtime` and content
`digest`, the metadata names the input root, and an output written before these columns
existed keeps working: new parts carry them, dataset readers see nulls in the old rows."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpucli.core.config import RunConfig
from gpucli.engines.local.pipeline import run
from gpucli.output.fingerprint import digest
from tests.fake_task import FAKE

pytestmark = pytest.mark.slow  # each test runs the pipeline

PER_INPUT = ["size", "mtime", "digest"]


def run_fake(root, out: str, **kw):
    return run(RunConfig(task=FAKE, paths=(str(root),), out=out, progress="off", devices="cpu", **kw))


def expected(root, rel: str) -> tuple[int, dt.datetime, str]:
    path = root / rel
    st = path.stat()
    return st.st_size, dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, dt.timezone.utc), digest(path.read_bytes())


def test_parquet_rows_carry_size_mtime_and_digest_of_their_input(tree, tmp_path):
    root = tree({"a.txt": "one two\nthree four\n", "sub/b.txt": "alpha beta gamma\n"})
    out = tmp_path / "out.parquet"
    assert run_fake(root, str(out)).exit_code == 0
    table = pq.read_table(out)
    assert table.column_names[-3:] == PER_INPUT
    assert table.schema.field("mtime").type == pa.timestamp("us", tz="UTC")  # what to_pylist reads without pandas
    for row in table.to_pylist():
        size, mtime, content = expected(root, row["path"])
        assert (row["size"], row["digest"]) == (size, content)
        assert abs((row["mtime"] - mtime).total_seconds()) < 1e-3
    metadata = pq.read_schema(next(out.glob("part-*.parquet"))).metadata
    assert metadata[b"gpucli.root"].decode() == str(root)


def test_jsonl_rows_carry_mtime_as_iso_8601(tree, tmp_path):
    root = tree({"a.txt": "one two\n"})
    out = tmp_path / "out.jsonl"
    assert run_fake(root, str(out)).exit_code == 0
    row = json.loads(out.read_text().splitlines()[0])
    size, mtime, content = expected(root, "a.txt")
    assert (row["size"], row["digest"]) == (size, content)
    assert abs((dt.datetime.fromisoformat(row["mtime"]) - mtime).total_seconds()) < 1e-3


def test_an_output_from_before_the_columns_gains_them_without_full(tree, tmp_path):
    root = tree({"a.txt": "one two\n", "b.txt": "three four five\n"})
    out = tmp_path / "out.parquet"
    assert run_fake(root, str(out)).exit_code == 0
    for part in out.glob("part-*.parquet"):  # as an older gpucli wrote it: no per-input columns
        old = pq.read_table(part)
        pq.write_table(old.drop_columns(PER_INPUT).replace_schema_metadata(old.schema.metadata), part)
    (root / "c.txt").write_text("six seven\n", encoding="utf-8")

    summary = run_fake(root, str(out))  # incremental, no --full
    assert (summary.exit_code, summary.succeeded, summary.unchanged) == (0, 1, 2)
    table = pq.read_table(out)  # what pandas.read_parquet(dir) reads too
    assert set(PER_INPUT) <= set(table.column_names)
    rows = {r["path"]: r for r in table.to_pylist()}
    assert rows["a.txt"]["size"] is None and rows["b.txt"]["digest"] is None
    assert rows["c.txt"]["size"] == expected(root, "c.txt")[0]
    frame = __import__("pandas").read_parquet(out)
    assert frame.set_index("path").loc["c.txt", "digest"] == expected(root, "c.txt")[2]
    assert frame.set_index("path")["size"].isna().sum() == 2


def test_a_run_the_ledger_refuses_leaves_an_older_output_as_it_was(tree, tmp_path):
    from gpucli.core.errors import UsageError

    root = tree({"a.txt": "one two\n"})
    out = tmp_path / "out.parquet"
    assert run_fake(root, str(out)).exit_code == 0
    part = next(out.glob("part-*.parquet"))
    old = pq.read_table(part)
    pq.write_table(old.drop_columns(PER_INPUT).replace_schema_metadata(old.schema.metadata), part)
    before = part.read_bytes()
    with pytest.raises(UsageError, match="--full"):
        run_fake(root, str(out), task_options={"sleep_ms": 1.0})  # other settings: refused
    assert part.read_bytes() == before


NO_PANDAS = """
import sys
class NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("no pandas here")
sys.meta_path.insert(0, NoPandas())
"""


def test_plain_pyarrow_reads_every_column_of_a_parquet_output_without_pandas(tree, tmp_path):
    """pandas is not part of gpucli's install: `read_table(...).to_pylist()` must not need it
    (a timestamp[ns] column did: "Nanosecond resolution temporal type ... Install pandas")."""
    import subprocess
    import sys

    root = tree({"a.txt": "one two\nthree four\n", "sub/b.txt": "alpha beta\n"})
    out = tmp_path / "out.parquet"
    assert run_fake(root, str(out)).exit_code == 0
    script = NO_PANDAS + f"""
import pyarrow.parquet as pq, pyarrow.dataset as ds
rows = pq.read_table({str(out)!r}).to_pylist() + ds.dataset({str(out)!r}).to_table().to_pylist()
assert "pandas" not in sys.modules
print(sorted({{(r["path"], r["mtime"].timestamp()) for r in rows}}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for rel in ("a.txt", "sub/b.txt"):
        assert repr((rel, (root / rel).stat().st_mtime_ns // 1000 / 1e6)) in result.stdout


def test_an_output_made_with_nanosecond_mtimes_keeps_its_unit_when_a_rerun_appends(tree, tmp_path):
    """Outputs made before `mtime` was in microseconds rerun and append without a rebuild: their
    new parts keep nanoseconds, so that readers see one schema across the parts."""
    import pyarrow.dataset as ds

    root = tree({"a.txt": "one two\n"})
    out = tmp_path / "out.parquet"
    assert run_fake(root, str(out)).exit_code == 0
    for part in out.glob("part-*.parquet"):  # as gpucli wrote it before: timestamp[ns, tz=UTC]
        old = pq.read_table(part)
        i = old.schema.get_field_index("mtime")
        ns = pa.timestamp("ns", tz="UTC")
        old = old.set_column(i, old.schema.field(i).with_type(ns), old.column(i).cast(ns))
        pq.write_table(old, part)
    (root / "b.txt").write_text("three four\n")
    again = run_fake(root, str(out))
    assert (again.exit_code, again.succeeded, again.unchanged) == (0, 1, 1)
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 2
    assert {str(pq.read_schema(p).field("mtime").type) for p in parts} == {"timestamp[ns, tz=UTC]"}
    table = ds.dataset(str(out)).to_table()
    assert sorted(table.column("path").to_pylist()) == ["a.txt", "b.txt"]
    assert table.column("mtime").cast(pa.int64()).to_pylist()[-1] // 1000 == (root / "b.txt").stat().st_mtime_ns // 1000


def test_jsonl_rows_are_written_without_pandas(tree, tmp_path):
    """pyarrow turns a nanosecond timestamp into Python only through pandas, which gpucli does
    not require: the JSON lines sink writes `mtime` itself, as pandas' isoformat would."""
    import subprocess
    import sys
    import textwrap

    root = tree({"a.txt": "one two\n"})
    out = tmp_path / "out.jsonl"
    script = textwrap.dedent(f"""
        import sys
        class NoPandas:
            def find_spec(self, name, path=None, target=None):
                if name == "pandas" or name.startswith("pandas."):
                    raise ImportError("no pandas here")
        sys.meta_path.insert(0, NoPandas())
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from gpucli.core.config import RunConfig
        from gpucli.engines.local.pipeline import run
        s = run(RunConfig(task="tests.fake_task:FakeTask", paths=({str(root)!r},), out={str(out)!r},
                          progress="off", devices="cpu"))
        assert "pandas" not in sys.modules
        sys.exit(s.exit_code)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    row = json.loads(out.read_text().splitlines()[0])
    mtime = (root / "a.txt").stat().st_mtime_ns
    # exact to the microsecond (the column's unit): the whole seconds through datetime, the
    # fraction as digits (a float of ~1.8e9 seconds cannot hold a microsecond)
    text = row["mtime"]
    assert text.endswith("+00:00")
    whole, _, fraction = text.removesuffix("+00:00").partition(".")
    seconds = dt.datetime.fromisoformat(whole + "+00:00").timestamp()
    assert int(seconds) * 10**6 + int(fraction.ljust(6, "0") or 0) == mtime // 1000
