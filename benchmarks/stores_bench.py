"""PostgreSQL (pgvector) and LanceDB outputs (issue 48), measured side by side in one run.

1. The store's write of the same rows (N chunks of 384-d vectors, the embed output's columns, parts
   of 10,000 rows, as a run commits them):
   - PostgreSQL: gpucli's commit step (`PgLedger.write_done`: the part encoded from Arrow into one
     binary COPY stream, and its ledger entries, one transaction a part) against psycopg's own binary
     COPY of the same rows alone (`write_row` per row with pgvector's dumper, the rows already Python
     tuples, one transaction a part), into the same kind of fresh table. Target: gpucli's rate >= 0.8
     of psycopg's.
   - LanceDB: gpucli's sink (`add` into a new table, then `merge_insert` of the same parts over it, a
     rerun where every file changed) against the Parquet sink's write and LanceDB's own `table.add`.
2. With --cli: the whole `gpucli embed --from TABLE` at N chunks with the near-free model (a 1-layer
   random BERT, 32-d: benchmarks/host.py) into Parquet, PostgreSQL and LanceDB; then `gpucli search`
   end to end (median of 3 queries) over the two stores, through their index and exact, and recall@10
   of the indexed search against the exact one (50 queries: rows' own vectors, perturbed), and Lance's
   IVF_PQ in place of the IVF_FLAT gpucli builds.

The PostgreSQL server is the pgserver wheel's (PostgreSQL 16, pgvector 0.6.2) on a unix socket; psycopg's
baseline needs pgvector's Python package for its vector dumper (`pip install pgvector`).

    python benchmarks/stores_bench.py [--rows 100000] [--cli] [--workdir /tmp/gpucli-bench-stores]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PART = 10_000
DIMS = 384


def rows_table(n: int, dims: int = DIMS):
    """The embed output's columns, as a run's parts have them."""
    import pyarrow as pa

    from gpucli.output.settings import input_fields

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    files = np.arange(n) // 4
    size, mtime, digest = input_fields()
    return pa.table({
        "path": pa.array([f"dir{f % 100}/file{f}.txt" for f in files]),
        "chunk": pa.array(np.arange(n) % 4, pa.int32()),
        "char_start": pa.array(np.arange(n) % 4 * 200, pa.int64()),
        "char_end": pa.array(np.arange(n) % 4 * 200 + 180, pa.int64()),
        "text": pa.array([f"sentence {i} about rivers, stones and the harbour lanterns of the valley" for i in range(n)]),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dims),
        "size": pa.array(np.full(n, 1234), size.type),
        "mtime": pa.array(np.full(n, 1_700_000_000_000_000), pa.timestamp("us", tz="UTC")).cast(mtime.type),
        "digest": pa.array([f"{f:032x}" for f in files]),
    })


def parts_of(table):
    """(part, its Sources, rows per source): each part holds whole files."""
    from gpucli.core.records import Source

    parts = []
    for start in range(0, table.num_rows, PART):
        part = table.slice(start, PART)
        paths = part.column("path").to_pylist()
        unique = list(dict.fromkeys(paths))
        sources = [Source(i, p, "/in/" + p, size=1234, mtime_ns=1, digest=p) for i, p in enumerate(unique)]
        parts.append((part, sources, [paths.count(p) for p in unique] if len(unique) < 50 else
                      list(np.unique(np.array(paths), return_counts=True)[1][np.argsort(
                          np.unique(np.array(paths), return_index=True)[1])])))
    return parts


def postgres_writes(table, server, reps: int = 3) -> tuple[float, float]:
    """Median seconds of gpucli's commit step and of psycopg's COPY alone, `reps` of each taken in
    turn, each into a fresh table of the same kind (the unique index included), after a checkpoint
    (so that neither pays the other's)."""
    import psycopg
    from pgvector.psycopg import register_vector

    from gpucli.output.sinks.postgres import PostgresSink

    database = server.new_database()
    parts = parts_of(table)
    names = table.schema.names
    python_rows = [[tuple(np.asarray(v, np.float32) if n == "embedding" else v for n, v in zip(names, row))
                    for row in zip(*(part.column(n).to_numpy(zero_copy_only=False) if n == "embedding" else
                                     part.column(n).to_pylist() for n in names))] for part, _, _ in parts]
    types = ["text", "int4", "int8", "int8", "text", "vector", "int8", "timestamptz", "text"]
    ours, theirs = [], []
    for rep in range(reps):
        sink = PostgresSink(server.out(database, f"gpucli_rows{rep}", index="none"))
        sink.run_lock().acquire("bench")
        sink.open(table.schema, {"gpucli.model": "bench"})
        ledger = sink.open_ledger("bench")
        server.execute(database, "checkpoint")
        started = time.perf_counter()
        for part, sources, counts in parts:
            ledger.write_done(sink, part, sources, counts)
        ours.append(time.perf_counter() - started)
        sink.store.close()
        server.execute(database, f"create table psycopg_rows{rep} (like gpucli_rows{rep} including indexes)")
        server.execute(database, "checkpoint")
        with psycopg.connect(server.dsn(database)) as conn:
            register_vector(conn)
            started = time.perf_counter()
            for rows in python_rows:
                with conn.cursor() as cur, cur.copy(f"copy psycopg_rows{rep} ({', '.join(names)}) from stdin "
                                                    "(format binary)") as copy:
                    copy.set_types(types)
                    for row in rows:
                        copy.write_row(row)
                conn.commit()
            theirs.append(time.perf_counter() - started)
        assert server.execute(database, f"select count(*) from gpucli_rows{rep}") == \
            server.execute(database, f"select count(*) from psycopg_rows{rep}")
    print(f"  (each rep, gpucli / psycopg seconds: {', '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(ours, theirs))})")
    return statistics.median(ours), statistics.median(theirs)


def lance_and_parquet_writes(table, work: Path, reps: int = 3) -> dict[str, float]:
    """Median seconds of each way to write the same parts, `reps` rounds taken in turn, each into a
    new table or dataset (the merge: over the table that round's add made)."""
    import lancedb

    from gpucli.output.sinks.lancedb import LanceSink
    from gpucli.output.sinks.parquet import ParquetSink

    parts = [part for part, _, _ in parts_of(table)]
    metadata = {"gpucli.model": "bench"}
    times: dict[str, list[float]] = {}

    def timed(name: str, write) -> None:
        started = time.perf_counter()
        for part in parts:
            write(part)
        times.setdefault(name, []).append(time.perf_counter() - started)

    for rep in range(reps):
        sink = LanceSink(f"lancedb:{work / 'lance'}/docs{rep}")
        sink.open(table.schema, metadata)
        timed("lance add (gpucli)", sink.write)
        sink = LanceSink(f"lancedb:{work / 'lance'}/docs{rep}")  # a rerun: the table holds every key
        sink.open(table.schema, metadata)
        timed("lance merge_insert (gpucli, a rerun of changed files)", sink.write)
        parquet = ParquetSink(str(work / f"out{rep}.parquet"))
        parquet.open(table.schema, metadata)
        timed("parquet (gpucli)", parquet.write)
        own = lancedb.connect(str(work / "own")).create_table(f"docs{rep}", schema=table.schema)
        timed("lancedb table.add", own.add)
    return {name: statistics.median(values) for name, values in times.items()}


def cli(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpucli", *argv], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"gpucli {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc.stderr


def cli_figures(n: int, work: Path, server) -> None:
    from benchmarks.embedded_qdrant import texts_table
    from benchmarks.host import tiny_model

    model = tiny_model(work / "tiny")
    source = work / "texts.parquet"
    texts_table(source, n)
    database = server.new_database()
    outs = {"parquet": str(work / "cli.parquet"), "postgres": server.out(database, "docs"),
            "postgres, index=none": server.out(database, "noindex", index="none"),
            "lancedb": f"lancedb:{work / 'clilance'}/docs"}
    common = ["--from", str(source), "--model", str(model), "--progress", "off", "--quiet"]
    walls = {name: cli(["embed", *common, "--out", out])[0] for name, out in outs.items()}
    print(f"\nwhole CLI, {n:,} chunks, near-free model: " + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items())
          + "; / Parquet: " + ", ".join(f"{k} {v / walls['parquet']:.2f}" for k, v in walls.items()))
    print(f"of which the indexes built at close: PostgreSQL HNSW {walls['postgres'] - walls['postgres, index=none']:.1f} s "
          f"(the two runs' difference); Lance IVF_FLAT {lance_index_s(outs['lancedb']):.1f} s (built again, timed)")
    queries = ("river stone meadow", "harbour lantern", "quarry summit valley")
    for name in ("postgres", "lancedb"):
        for exact in (False, True):
            where = outs[name] + (("&" if "?" in outs[name] else "?") + "exact=true" if exact else "")
            runs = [cli(["search", q, "--in", where, "-k", "10"]) for q in queries]
            only = [float(re.search(r"searched in ([\d.]+)s", err).group(1)) for _, err in runs]
            print(f"search {name}{' exact' if exact else ' (index)'}: end to end {statistics.median(w for w, _ in runs):.2f} s, "
                  f"search only {statistics.median(only) * 1000:.1f} ms")
    print(recall(outs, n))
    print(lance_pq_recall(outs["lancedb"]))


def lance_index_s(where: str) -> float:
    import lancedb

    from gpucli.output.sinks.lancedb.target import parse_target

    target = parse_target(where)
    table = lancedb.connect(target.directory).open_table(target.table)
    started = time.perf_counter()
    table.create_index(metric="cosine", vector_column_name="embedding", index_type="IVF_FLAT", replace=True)
    return time.perf_counter() - started


def lance_pq_recall(where: str) -> str:
    """The same table with Lance's IVF_PQ instead (what gpucli does not build), at two settings."""
    import lancedb

    from gpucli.output.sinks.lancedb.target import parse_target

    target = parse_target(where)
    table = lancedb.connect(target.directory).open_table(target.table)
    vectors = _sample_vectors({"lancedb": where}, "lancedb", np.random.default_rng(1))
    started = time.perf_counter()
    table.create_index(metric="cosine", vector_column_name="embedding", index_type="IVF_PQ", replace=True)
    built = time.perf_counter() - started

    def found(query, nprobes: int = 0, refine: int = 0) -> np.ndarray:
        search = table.search(query.tolist(), vector_column_name="embedding").metric("cosine").limit(10)
        search = search.nprobes(nprobes).refine_factor(refine) if nprobes else search.bypass_vector_index()
        return search.select(["path", "_distance"]).to_arrow().column("_distance").to_numpy()

    lines = []
    for nprobes, refine in ((32, 10), (64, 50)):
        share = [np.sum(found(q, nprobes, refine) <= found(q)[-1] + 1e-6) / 10 for q in vectors]
        lines.append(f"nprobes {nprobes}, refine_factor {refine}: {np.mean(share):.3f}")
    table.create_index(metric="cosine", vector_column_name="embedding", index_type="IVF_FLAT", replace=True)
    return f"Lance IVF_PQ instead (built in {built:.1f} s), recall@10: " + "; ".join(lines)


def recall(outs: dict[str, str], n: int) -> str:
    """recall@10 of each store's indexed search against its exact one, 50 perturbed row vectors: a hit
    counts when it scores at least the exact search's tenth (the near-free model's vectors tie a lot)."""
    from gpucli.commands.search.lance import LanceIndex
    from gpucli.commands.search.postgres import PostgresIndex

    rng = np.random.default_rng(1)
    lines = []
    for name, cls in (("postgres", PostgresIndex), ("lancedb", LanceIndex)):
        approx = cls(outs[name])
        exact = cls(outs[name] + ("&" if "?" in outs[name] else "?") + "exact=true")
        sample = _sample_vectors(outs, name, rng)
        found, times = [], []
        for vector in sample:
            started = time.perf_counter()
            got = approx.nearest(vector, 10)
            times.append(time.perf_counter() - started)
            tenth = exact.nearest(vector, 10)[-1].score  # ties: many texts differ by a number only
            found.append(sum(hit.score >= tenth - 1e-6 for hit in got) / 10)
        approx.close()
        exact.close()
        lines.append(f"{name}: index {'yes' if approx.indexed else 'no'}, recall@10 {np.mean(found):.3f} "
                     f"({statistics.median(times) * 1000:.1f} ms a query in-process)")
    return "recall@10 vs exact, 50 queries: " + "; ".join(lines)


def _sample_vectors(outs: dict[str, str], name: str, rng) -> list:
    import lancedb

    from gpucli.output.sinks.lancedb.target import parse_target

    target = parse_target(outs["lancedb"])
    rows = lancedb.connect(target.directory).open_table(target.table).search().limit(50).to_arrow()
    vectors = np.stack(rows.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    vectors += rng.normal(0, 0.05, vectors.shape).astype(np.float32)
    return list(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cli", action="store_true")
    parser.add_argument("--workdir", default="/tmp/gpucli-bench-stores")
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    from tests.pg_server import PgServer

    server = PgServer()
    try:
        table = rows_table(args.rows)
        ours, theirs = postgres_writes(table, server)
        print(f"PostgreSQL, {args.rows:,} rows of {DIMS}-d in parts of {PART:,}: gpucli's commit step {ours:.2f} s "
              f"({args.rows / ours:,.0f} rows/s); psycopg's COPY alone {theirs:.2f} s ({args.rows / theirs:,.0f} "
              f"rows/s); gpucli's rate / psycopg's = {theirs / ours:.2f} (target >= 0.8)")
        times = lance_and_parquet_writes(table, work)
        base = times["parquet (gpucli)"]
        print("LanceDB and Parquet, the same parts: " + "; ".join(
            f"{k} {v:.2f} s ({v / base:.2f} x Parquet)" for k, v in times.items()))
        print(f"gpucli's Lance add / lancedb's own table.add = {times['lance add (gpucli)'] / times['lancedb table.add']:.2f}")
        if args.cli:
            cli_figures(args.rows, work, server)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
