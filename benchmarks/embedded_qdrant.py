"""Embedded Qdrant on Qdrant Edge (issues 42, 46): writes, search latency, recall, memory; side by side.

    python benchmarks/embedded_qdrant.py                       # 10k, 100k, 1M points (minutes)
    python benchmarks/embedded_qdrant.py --sizes 10000,100000 --before

What it measures, each in this one run:
  * the write: `gpucli embed --from TABLE` of N one-line texts with the near-free model (a 1-layer
    random BERT, 32-d: benchmarks/host.py) to Parquet and to `qdrant:`, end to end (the CLI's
    wall time, the HNSW build included), their ratio, and each run's peak RSS (GNU time's %M: the
    largest single process of the run, the run's Qdrant Edge writer process a process of its own);
  * `gpucli search` on each output, Parquet and `qdrant:`: end to end (the command's wall time,
    median of 5) and search only (the "searched in" figure it prints), and the search process's
    peak RSS;
  * recall@10 of the HNSW search against an exact one (Qdrant's `exact=True`) over 100 queries;
  * with --before: qdrant-client's local mode (what `qdrant:` was) at 10k points, written by
    qdrant-client directly (gpucli no longer writes it): the write, and one search's open + query.
Figures: benchmarks/RESULTS-qdrant.md.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = "river stone cloud field harbour lantern meadow orchard quarry summit valley willow".split()


def texts_table(path: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(4 + i % 5)) + f" number {i}" for i in range(n)]
    pq.write_table(pa.table({"id": [str(i) for i in range(n)], "text": texts}), path)


def timed(argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (MiB) and stderr of one command (GNU time's %M)."""
    started = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "RSS_KB=%M", *argv], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    rss = int(re.search(r"RSS_KB=(\d+)", proc.stderr).group(1)) // 1024
    return wall, rss, proc.stderr


def embed(table: Path, out: str, model: Path) -> tuple[float, int]:
    wall, rss, _ = timed([sys.executable, "-m", "gpucli", "embed", "--from", str(table), "--out", out,
                          "--model", str(model), "--progress", "off", "--quiet"])
    return wall, rss


QUERIES = ("river stone meadow", "harbour lantern", "quarry summit valley", "willow orchard", "cloud field number")


def search(where: str) -> tuple[float, float, int]:
    """Median end-to-end seconds, median search-only seconds, max peak RSS (MiB) of 5 searches."""
    walls, only, peaks = [], [], []
    for query in QUERIES:
        wall, rss, err = timed([sys.executable, "-m", "gpucli", "search", query, "--in", where, "-k", "10"])
        walls.append(wall)
        peaks.append(rss)
        only.append(float(re.search(r"searched in ([\d.]+)s", err).group(1)))
    return statistics.median(walls), statistics.median(only), max(peaks)


def queries_near(points: list, rng) -> list[list[float]]:
    """One query per stored vector: the vector plus noise (a question near a chunk)."""
    import numpy as np

    out = []
    for record in points:
        vector = np.asarray(record.vector[""] if isinstance(record.vector, dict) else record.vector)
        out.append((vector + 0.3 * rng.standard_normal(vector.shape) * np.abs(vector).mean()).tolist())
    return out


def recall(shard, queries: list, ef: int | None) -> tuple[float, float]:
    """recall@10 against an exact search, and the median query milliseconds."""
    import numpy as np
    import qdrant_edge as edge

    hits, times = [], []
    for query in queries:
        exact = {p.id for p in shard.query(edge.QueryRequest(limit=10, query=edge.Query.Nearest(query),
                                                             params=edge.SearchParams(exact=True)))}
        started = time.perf_counter()
        found = shard.query(edge.QueryRequest(limit=10, query=edge.Query.Nearest(query),
                                              params=edge.SearchParams(hnsw_ef=ef) if ef else None))
        times.append(time.perf_counter() - started)
        hits.append(len(exact & {p.id for p in found}) / 10)
    return float(np.mean(hits)), 1000 * float(np.median(times))


def collection_recall(storage: Path) -> tuple[float, int]:
    """recall@10 of `gpucli search`'s own parameters on a collection, and how many vectors are in HNSW."""
    import numpy as np
    import qdrant_edge as edge

    from gpucli.output.sinks.qdrant import parse_target
    from gpucli.output.sinks.qdrant.edge import SEARCH_EF, EdgeClient

    client = EdgeClient(parse_target(f"qdrant:{storage}/docs"))
    try:
        shard = client.shard()
        records, _ = shard.scroll(edge.ScrollRequest(limit=100, with_vector=True))
        return recall(shard, queries_near(records, np.random.default_rng(0)), SEARCH_EF)[0], \
            shard.info().indexed_vectors_count
    finally:
        client.close()


def forced_hnsw(storage: Path, work: Path) -> dict:
    """The same points in a shard that indexes everything (threshold 1 KiB): the build's seconds, and
    recall@10 and latency at Edge's default search and at gpucli's hnsw_ef."""
    import numpy as np
    import qdrant_edge as edge

    from gpucli.output.sinks.qdrant import parse_target
    from gpucli.output.sinks.qdrant.edge import SEARCH_EF, EdgeClient

    client = EdgeClient(parse_target(f"qdrant:{storage}/docs"))
    try:
        source, size = client.shard(), client.describe().dims
        copy = work / "hnsw-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shard = edge.EdgeShard.create(str(copy), edge.EdgeConfig(
            vectors=edge.EdgeVectorParams(size=size, distance=edge.Distance.Cosine),
            optimizers=edge.EdgeOptimizersConfig(indexing_threshold=1)))
        offset, count = None, 0
        while True:
            records, offset = source.scroll(edge.ScrollRequest(limit=4096, offset=offset, with_vector=True))
            shard.update(edge.UpdateOperation.upsert_points(
                [edge.Point(r.id, r.vector[""] if isinstance(r.vector, dict) else r.vector, {}) for r in records]))
            count += len(records)
            if offset is None:
                break
        started = time.perf_counter()
        shard.optimize()
        built = time.perf_counter() - started
        records, _ = shard.scroll(edge.ScrollRequest(limit=100, with_vector=True))
        queries = queries_near(records, np.random.default_rng(1))
        default, default_ms = recall(shard, queries, None)
        ours, ours_ms = recall(shard, queries, SEARCH_EF)
        shard.close()
        return {"points": count, "build_s": built, "recall_default": default, "ms_default": default_ms,
                "recall": ours, "ms": ours_ms, "ef": SEARCH_EF}
    finally:
        client.close()


def local_mode_before(work: Path, n: int) -> tuple[float, float]:
    """qdrant-client's local mode, as `qdrant:` was: (write seconds, open + one query seconds)."""
    import numpy as np
    from qdrant_client import QdrantClient, models

    path = work / "local"
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 32)).astype("float32")
    started = time.perf_counter()
    client = QdrantClient(path=str(path))
    client.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    for start in range(0, n, 128):
        end = min(n, start + 128)
        client.upsert("docs", models.Batch(ids=list(range(start, end)), vectors=vectors[start:end].tolist(),
                                           payloads=[{"path": f"t//{i}", "chunk": 0, "text": f"text {i}"}
                                                     for i in range(start, end)]))
    client.close()
    wrote = time.perf_counter() - started
    started = time.perf_counter()
    client = QdrantClient(path=str(path))
    client.query_points("docs", query=vectors[0].tolist(), limit=10)
    client.close()
    return wrote, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--before", action="store_true", help="also qdrant-client's local mode at 10k points")
    parser.add_argument("--workdir", default="/tmp/gpucli-bench-qdrant")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    from benchmarks.host import tiny_model

    model = tiny_model(work / "tiny")
    texts_table(work / "warm-up.parquet", 100)
    embed(work / "warm-up.parquet", str(work / "warm-up-out.parquet"), model)  # the model's ONNX graph, exported
    rows = []
    for n in sizes:
        table = work / f"texts{n}.parquet"
        texts_table(table, n)
        parquet_s, parquet_rss = embed(table, str(work / f"p{n}.parquet"), model)
        qdrant_s, qdrant_rss = embed(table, f"qdrant:{work / f'q{n}'}/docs", model)
        p_e2e, p_only, _ = search(str(work / f"p{n}.parquet"))
        e2e, only, search_rss = search(f"qdrant:{work / f'q{n}'}/docs")
        found, indexed = collection_recall(work / f"q{n}")
        rows.append((n, parquet_s, qdrant_s, parquet_rss, qdrant_rss, p_e2e, e2e, only, search_rss, found, indexed))
        print(f"{n:>9,}: write qdrant {qdrant_s:.1f}s ({qdrant_rss} MiB), parquet {parquet_s:.1f}s; search qdrant "
              f"{e2e:.2f}s end to end ({only * 1000:.1f} ms search only, {search_rss} MiB), parquet {p_e2e:.2f}s "
              f"({p_only * 1000:.0f} ms); recall@10 {found:.3f} ({indexed:,} vectors in HNSW)", flush=True)
    print("\n| points | write: Parquet | write: qdrant: | ratio | peak RSS of the write (Parquet / qdrant:) | "
          "search end to end: Parquet / qdrant: | difference | search only | search peak RSS | recall@10 vs exact | "
          "vectors in HNSW |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, p, q, prss, qrss, p_e2e, e2e, only, srss, found, indexed in rows:
        print(f"| {n:,} | {p:.1f} s | {q:.1f} s | {q / p:.2f} | {prss} / {qrss} MiB | {p_e2e:.2f} / {e2e:.2f} s | "
              f"{e2e - p_e2e:+.2f} s | {only * 1000:.1f} ms | {srss} MiB | {found:.3f} | {indexed:,} |")
    middle = sorted(sizes)[len(sizes) // 2]
    forced = forced_hnsw(work / f"q{middle}", work)
    print(f"\nHNSW forced on the {forced['points']:,} points of the {middle:,} collection (threshold 1 KiB): built in "
          f"{forced['build_s']:.1f} s; recall@10 {forced['recall_default']:.3f} at Edge's default search "
          f"({forced['ms_default']:.2f} ms), {forced['recall']:.3f} at hnsw_ef={forced['ef']} ({forced['ms']:.2f} ms)")
    if args.before:
        wrote, opened = local_mode_before(work, 10_000)
        print(f"\nbefore (qdrant-client local mode, 10,000 points, written by qdrant-client directly): write "
              f"{wrote:.1f} s; open + one query {opened:.2f} s")


if __name__ == "__main__":
    main()
