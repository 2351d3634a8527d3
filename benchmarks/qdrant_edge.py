"""Embedded Qdrant on Qdrant Edge (issue 42): writes, search latency, recall and memory, side by side in one run.

    python benchmarks/qdrant_edge.py                                # 10k, 100k, 1M points (~12 min on 2 cores)
    python benchmarks/qdrant_edge.py --sizes 10000,100000 --before  # a few minutes

The inputs: one Parquet table per size of N one-line texts (5-12 random words of the model's
vocabulary: one chunk each, no two alike), the smaller tables the first rows of the larger; the
near-free model (benchmarks/host.py: a random 1-layer BERT, 32-d, the default model's tokenizer).
The model's ONNX graph is exported once before anything is timed (the 100 query texts' run).

For each size, ascending, a collection of its own:
  write    `gpucli embed --from TABLE` to Parquet, then the same to `qdrant:` (whole CLI processes,
           wall seconds): qdrant / Parquet; the summary's write stage; how long the run's index
           build (the indexer child the sink starts when it closes) lived; the peak RSS of each
           process tree (psutil, summed over the tree, every 50 ms).
  search   `gpucli search TEXT --in qdrant:... -k 10`, --rounds fresh processes: the median wall
           (end to end), the median "searched in" the command prints (the index query alone), the
           largest peak RSS (GNU time's %M); the same on the Parquet output, for scale.
  recall   100 query vectors (100 other texts through `gpucli embed`): the collection's top 10 as
           `gpucli search` asks (hnsw_ef = gpucli's SEARCH_EF) against Qdrant's exact search
           (`SearchParams(exact=True)`), in this process; recall@10 and the median ms of each.
  HNSW     on a copy of the largest collection, every segment indexed (indexing_threshold 1 KiB,
           whatever gpucli's threshold left unindexed): Edge's optimize timed in a child process
           (its peak RSS by GNU time), then recall@10 and query ms at Edge's default ef and at
           gpucli's SEARCH_EF (and at --efs). --no-hnsw skips it.
  before   (--before) qdrant-client's local mode, which `qdrant:` was until e3d3775: the commit
           before it (6f8f3e2, `git archive` into the workdir; PYTHONPATH, nothing installed) runs
           the same `gpucli embed` and `gpucli search` on a local-mode collection at 10k points (and
           50k when 10k says that takes under 2 min); and qdrant-client's local mode vs EdgeClient
           writing the same points and payloads directly (batches of 128), then opening the
           collection and querying it once in a fresh process (median of --rounds).
  store    at each size, the same open + one query of the collection alone, in a fresh process:
           where `gpucli search`'s time goes besides the CLI and the query's embedding; and the
           imports of one `gpucli search` over the largest modules (`-X importtime`).
  split    the sinks alone, in this process: Parquet's and qdrant:'s writes of the Parquet output's
           rows (the largest size up to --split-rows, parts of 10,000), and qdrant:'s time by step
           (gpucli's functions wrapped with timers): where the write ratio comes from.

Prints one markdown report (the figures go in benchmarks/RESULTS-qdrant.md); progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "benchmarks":
    sys.path.pop(0)  # run as a script: this file would shadow the qdrant_edge package
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import bench_env  # noqa: E402
from benchmarks.host import tiny_model  # noqa: E402

BEFORE_COMMIT = "6f8f3e2"  # the last commit whose `qdrant:` is qdrant-client's local mode
COLLECTION = "docs"
QUERIES = 100
K = 10
MB = 2**20
SEARCHED = re.compile(r"searched in ([\d.]+)s")
EMBEDDED = re.compile(r"query embedded in ([\d.]+)s")
RSS_KB = re.compile(r"RSS_KB=(\d+)")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- inputs ---------------------------------------------------------------------------------------
def vocabulary(model: Path) -> list[str]:
    return [w for w in (line.strip() for line in open(model / "vocab.txt", encoding="utf-8"))
            if w.isalpha() and w.isascii() and len(w) > 2]


def write_tables(work: Path, sizes: list[int], words: list[str], seed: int = 42) -> dict[int, Path]:
    """texts{N}.parquet for each size (id, text), streamed in blocks: the smaller the first rows of the larger."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng, block = random.Random(seed), 100_000
    paths = {n: work / f"texts{n}.parquet" for n in sizes}
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    writers = {n: pq.ParquetWriter(paths[n], schema) for n in sizes}
    try:
        for start in range(0, max(sizes), block):
            end = min(max(sizes), start + block)
            texts = [" ".join(rng.choices(words, k=rng.randint(5, 12))) for _ in range(start, end)]
            ids = [str(i) for i in range(start, end)]
            for n, writer in writers.items():
                if start < n:
                    stop = min(n, end) - start
                    writer.write_table(pa.table({"id": ids[:stop], "text": texts[:stop]}, schema=schema))
    finally:
        for writer in writers.values():
            writer.close()
    return paths


def query_texts(words: list[str], count: int = QUERIES) -> list[str]:
    rng = random.Random(7)  # another seed than the tables': texts not in the collection
    return [" ".join(rng.choices(words, k=rng.randint(3, 8))) for _ in range(count)]


# --- processes ------------------------------------------------------------------------------------
class TreeWatch:
    """Samples a process tree every `interval` s: the peak of its summed RSS, and when the
    embedded sink's indexer child (gpucli.output.sinks.qdrant.indexer) was first and last seen."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.peak_total = self.peak_root = 0
        self.indexer: list[float] = []  # [first seen, last seen], perf_counter
        self._kinds: dict[int, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(pid, interval), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, pid: int, interval: float) -> None:
        import psutil

        try:
            root = psutil.Process(pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            try:
                root_rss, total = root.memory_info().rss, 0
                children = root.children(recursive=True)
            except psutil.Error:
                return
            total = root_rss
            for child in children:
                try:
                    total += child.memory_info().rss
                    if child.pid not in self._kinds:
                        self._kinds[child.pid] = "qdrant.indexer" in " ".join(child.cmdline())
                except psutil.Error:
                    continue
                if self._kinds[child.pid]:
                    now = time.perf_counter()
                    self.indexer = [self.indexer[0] if self.indexer else now, now]
            self.peak_root, self.peak_total = max(self.peak_root, root_rss), max(self.peak_total, total)
            time.sleep(interval)

    @property
    def indexer_s(self) -> float:
        return self.indexer[1] - self.indexer[0] if self.indexer else 0.0


def embed(table: Path, out: str, model: Path, env: dict[str, str], cwd: Path) -> dict:
    """One whole `gpucli embed --from TABLE` process: wall s, peak tree RSS, indexer lifetime, its summary."""
    cmd = [sys.executable, "-m", "gpucli", "embed", "--from", str(table), "--out", out, "--model", str(model),
           "--progress", "off", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    watch = TreeWatch(proc.pid)
    stdout, stderr = proc.communicate(timeout=4 * 3600)
    wall = time.perf_counter() - t0
    watch.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    summary = json.loads(stdout.strip().splitlines()[-1])
    return {"wall": wall, "rss": watch.peak_total, "rss_root": watch.peak_root, "indexer_s": watch.indexer_s,
            "elapsed": summary.get("elapsed_s", float("nan")), "stages": summary.get("stage_seconds", {}),
            "rows": summary.get("rows")}


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str, str]:
    """Wall seconds, peak RSS (bytes, GNU time's %M), stdout and stderr of one process."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "RSS_KB=%M", *cmd], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    found = RSS_KB.findall(proc.stderr)
    return wall, int(found[-1]) * 1024 if found else 0, proc.stdout, proc.stderr


def search(where: str, texts: list[str], rounds: int, env: dict[str, str], cwd: Path) -> dict:
    """`gpucli search` as fresh processes: median wall, median "searched in" / "query embedded in", max RSS."""
    walls, only, embedded, peaks = [], [], [], []
    for r in range(rounds):
        wall, rss, _, err = timed([sys.executable, "-m", "gpucli", "search", texts[r % len(texts)], "--in", where,
                                   "-k", str(K)], env, cwd)
        walls.append(wall)
        peaks.append(rss)
        s, e = SEARCHED.search(err), EMBEDDED.search(err)
        only.append(float(s.group(1)) if s else float("nan"))
        embedded.append(float(e.group(1)) if e else float("nan"))
    return {"wall": statistics.median(walls), "walls": walls, "only": statistics.median(only),
            "embedded": statistics.median(embedded), "rss": max(peaks)}


def import_costs(where: str, text: str, env: dict[str, str], cwd: Path,
                 names: tuple[str, ...] = ("gpucli.app.cli", "qdrant_client", "qdrant_edge", "onnxruntime",
                                           "tokenizers", "numpy")) -> dict[str, float]:
    """Seconds (cumulative, first import) of some modules in one `gpucli search` (`python -X importtime`)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpucli", "search", text, "--in", where, "-k",
                           str(K)], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    found: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and parts[2].strip() in names:
            found.setdefault(parts[2].strip(), int(parts[1]) / 1e6)
    return found


def write_split(parquet: Path, work: Path, rows: int, part: int = 10_000) -> dict:
    """The sinks' own writes of the first `rows` rows of a Parquet output, in parts of `part` rows,
    in this process (no reader, no workers beside them): Parquet's and qdrant:'s totals, and
    qdrant:'s split by step (each gpucli function wrapped with a timer)."""
    import pyarrow.parquet as pq

    import gpucli.output.sinks.qdrant.deletes as deletes
    import gpucli.output.sinks.qdrant.edge as edge_module
    import gpucli.output.sinks.qdrant.edge_models as convert
    from gpucli.output.sinks.parquet import ParquetSink
    from gpucli.output.sinks.qdrant.edge import EdgeClient
    from gpucli.output.sinks.qdrant.points import Points
    from gpucli.output.sinks.qdrant.sink import QdrantSink

    table = pq.read_table(parquet).slice(0, rows)
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    table = table.replace_schema_metadata(None)
    spent: dict[str, float] = {}
    undo = []

    def wrap(owner, name: str, label: str, kind=None) -> None:
        original = owner.__dict__[name]
        function = original.__func__ if isinstance(original, classmethod) else original

        def timed_call(*a, **k):
            t0 = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
        setattr(owner, name, classmethod(timed_call) if isinstance(original, classmethod) else timed_call)
        undo.append((owner, name, original))

    wrap(Points, "of", "rows -> points (Points.of: payloads, uuid5 ids, vectors as lists)")
    wrap(Points, "batch", "points -> models.Batch (pydantic)")
    wrap(convert, "edge_points", "models.Batch -> Edge points (edge_models.edge_points)")
    wrap(convert, "batch_bytes", "free-space estimate (batch_bytes: payloads as JSON)")
    wrap(edge_module, "room", "free-space check (room: statvfs, the shard's files)")
    wrap(EdgeClient, "upsert", "EdgeClient.upsert, whole")
    wrap(deletes, "remove_stale", "stale-chunk probe (uuid5 ids, retrieve)")
    wrap(EdgeClient, "flush", "EdgeShard.flush, once per write")
    wrap(EdgeClient, "optimize", "close: the index build (indexer child)")
    try:
        out = {}
        for kind in ("parquet", "qdrant"):
            target = str(work / "split.parquet") if kind == "parquet" else f"qdrant:{work / 'split'}/{COLLECTION}"
            sink = ParquetSink(target) if kind == "parquet" else QdrantSink(target)
            sink.open(table.schema, metadata)
            t0 = time.perf_counter()
            for start in range(0, table.num_rows, part):
                sink.write(table.slice(start, part))
            t1 = time.perf_counter()
            sink.close()
            out[kind] = {"write_s": t1 - t0, "close_s": time.perf_counter() - t1}
    finally:
        for owner, name, original in undo:
            setattr(owner, name, original)
        shutil.rmtree(work / "split", ignore_errors=True)
        shutil.rmtree(work / "split.parquet", ignore_errors=True)
    inner = sum(spent.get(k, 0.0) for k in spent if k.startswith(("models.Batch ->", "free-space")))
    spent["Edge's update (upsert, the rest of EdgeClient.upsert)"] = spent.pop("EdgeClient.upsert, whole", 0.0) - inner
    return {**out, "rows": table.num_rows, "part": part, "steps": spent}


# --- recall, in this process ----------------------------------------------------------------------
def search_ef() -> int | None:
    import gpucli.output.sinks.qdrant.edge as edge_module

    return getattr(edge_module, "SEARCH_EF", None)


def probe(shard, queries: list[list[float]], ef: int | None) -> dict:
    """recall@K of the shard's search (hnsw_ef=ef; None: Edge's default) against its exact search,
    over `queries`; the median ms of each (payloads returned, as `gpucli search` asks)."""
    import qdrant_edge as edge

    def query(vector, params):
        request = edge.QueryRequest(limit=K, query=edge.Query.Nearest(vector), params=params, with_payload=True)
        t0 = time.perf_counter()
        found = shard.query(request)
        return {p.id for p in found}, 1000 * (time.perf_counter() - t0)

    hits, fast, slow = [], [], []
    for vector in queries:
        exact, exact_ms = query(vector, edge.SearchParams(exact=True))
        found, ms = query(vector, edge.SearchParams(hnsw_ef=ef) if ef else None)
        hits.append(len(exact & found) / K)
        fast.append(ms)
        slow.append(exact_ms)
    return {"recall": statistics.fmean(hits), "ms": statistics.median(fast), "exact_ms": statistics.median(slow),
            "worst": min(hits)}


def collection_probe(storage: Path, queries: list[list[float]]) -> dict:
    from gpucli.output.sinks.qdrant.edge import EdgeClient

    client = EdgeClient(str(storage))  # holds the storage's lock: closed before any CLI touches it
    try:
        shard = client.shard(COLLECTION)
        info = shard.info()
        result = probe(shard, queries, search_ef())
        return {**result, "points": info.points_count, "indexed": info.indexed_vectors_count,
                "segments": info.segments_count}
    finally:
        client.close()


OPTIMIZE = """
import json, sys, time
import qdrant_edge as edge
t0 = time.perf_counter()
shard = edge.EdgeShard.load(sys.argv[1])  # its edge_config.json says indexing_threshold 1
t1 = time.perf_counter()
changed = shard.optimize()
t2 = time.perf_counter()
info = shard.info()
shard.close()
print(json.dumps({"load_s": t1 - t0, "build_s": t2 - t1, "changed": changed, "indexed": info.indexed_vectors_count,
                  "points": info.points_count, "segments": info.segments_count}))
"""


def forced_hnsw(storage: Path, work: Path, queries: list[list[float]], env: dict[str, str],
                efs: list[int]) -> dict:
    """A copy of the collection's shard with every segment indexed: build time and RSS (a child), recall."""
    import qdrant_edge as edge

    from gpucli.output.sinks.qdrant.edge import shard_dir

    copy = work / "hnsw-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(shard_dir(storage, COLLECTION), copy)
    config = json.loads((copy / "edge_config.json").read_text())
    config.setdefault("optimizers", {})["indexing_threshold"] = 1  # KiB: every segment gets its HNSW index
    (copy / "edge_config.json").write_text(json.dumps(config))
    wall, rss, out, _ = timed([sys.executable, "-c", OPTIMIZE, str(copy)], env, work)
    built = json.loads(out.strip().splitlines()[-1])
    shard = edge.EdgeShard.load(str(copy))
    try:
        default = probe(shard, queries, None)
        ours = probe(shard, queries, search_ef())
        others = {ef: probe(shard, queries, ef) for ef in efs if ef != search_ef()}
    finally:
        shard.close()
    shutil.rmtree(copy, ignore_errors=True)
    return {**built, "wall": wall, "rss": rss, "default": default, "ours": ours, "ef": search_ef(), "others": others}


# --- before: qdrant-client's local mode -----------------------------------------------------------
def same_points(parquet: Path):
    """The points gpucli's sink makes of a Parquet output's rows (ids, vectors, payloads)."""
    import pyarrow.parquet as pq

    from gpucli.output.sinks.qdrant.collection import Wanted
    from gpucli.output.sinks.qdrant.points import Points

    table = pq.read_table(parquet)
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return Points.of(table, Wanted.of(table.schema, metadata), with_text=True)


def direct_writes(points, work: Path, n: int, batch: int = 128) -> dict:
    """The same points upserted by qdrant-client's local mode (SQLite synced as gpucli 6f8f3e2 did) and
    by gpucli's EdgeClient (a flush per 10,240 points), in batches of 128; Edge's index build after."""
    from qdrant_client import QdrantClient, models

    from gpucli.output.sinks.qdrant.edge import EdgeClient

    vectors = models.VectorParams(size=len(points.vectors[0]), distance=models.Distance.COSINE)
    result = {}
    for kind in ("local", "edge"):
        path = work / f"direct-{kind}-{n}"
        shutil.rmtree(path, ignore_errors=True)
        t0 = time.perf_counter()
        client = QdrantClient(path=str(path)) if kind == "local" else EdgeClient(str(path))
        client.create_collection(COLLECTION, vectors_config=vectors)
        db = group_commits(client) if kind == "local" else None
        for start in range(0, len(points.ids), batch):
            client.upsert(COLLECTION, points.batch(start, start + batch), wait=True)
            if (start // batch) % 80 == 79:  # one sync per 10,240 points, as gpucli's writes (parts of 10k)
                sync(client, db)
        sync(client, db)
        t1 = time.perf_counter()
        if kind == "edge":
            client.optimize(COLLECTION)  # what the sink does when a run that wrote closes (a child)
        client.close()
        result[kind] = {"upsert_s": t1 - t0, "close_s": time.perf_counter() - t1, "path": path}
    return result


def group_commits(client):
    """What gpucli 6f8f3e2 did to local mode's SQLite (its embedded.py): WAL and synchronous=NORMAL,
    a checkpoint per write, instead of a commit and fsync per point."""
    db = client._client.collections[COLLECTION].storage.storage
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def sync(client, db) -> None:
    if db is not None:
        db.execute("PRAGMA wal_checkpoint(FULL)")
    else:
        client.flush(COLLECTION)


OPEN_QUERY = """
import json, sys, time
t0 = time.perf_counter()
kind, path, vector = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if kind == "local":
    from qdrant_client import QdrantClient
    t1 = time.perf_counter()
    client = QdrantClient(path=path)
else:
    import qdrant_client.models, qdrant_edge  # noqa: F401,E401 - gpucli's EdgeClient converts through them
    from gpucli.output.sinks.qdrant.edge import EdgeClient
    t1 = time.perf_counter()
    client = EdgeClient(path)
    client.get_collection("docs")  # as gpucli search does first: loads the shard
t2 = time.perf_counter()
points = client.query_points("docs", query=vector, limit=10, with_payload=True).points
t3 = time.perf_counter()
client.close()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "query_s": t3 - t2, "hits": len(points)}))
"""


def open_query(kind: str, path: Path, vector: list[float], rounds: int, env: dict[str, str], cwd: Path) -> dict:
    runs = []
    for _ in range(rounds):
        wall, rss, out, _ = timed([sys.executable, "-c", OPEN_QUERY, kind, str(path), json.dumps(vector)], env, cwd)
        runs.append({**json.loads(out.strip().splitlines()[-1]), "wall": wall, "rss": rss})
    return {key: statistics.median(r[key] for r in runs) for key in ("import_s", "open_s", "query_s", "wall")} | {
        "rss": max(r["rss"] for r in runs)}


def before(args, work: Path, model: Path, tables: dict[int, Path], texts: list[str], vector: list[float],
           env: dict[str, str], after: dict[int, dict]) -> list[dict]:
    src = work / "before-src"
    if not (src / "gpucli").is_dir():
        src.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", BEFORE_COMMIT], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    old_env = {**env, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}  # benchmarks.* resolves too
    rows = []
    for n in sorted(int(s) for s in args.before_sizes.split(",")):
        if rows and rows[0]["local_s"] * n / rows[0]["n"] > 120:
            log(f"before: {n:,} points skipped: local mode's part at {rows[0]['n']:,} took {rows[0]['local_s']:.0f} s, "
                f"so {n:,} would take over 2 min")
            break
        table = tables.get(n) or write_tables(work, [n], vocabulary(model))[n]  # the same seed: the same rows
        parquet = work / f"p{n}.parquet"
        if n not in after:  # this checkout's write and search at this size too
            storage = work / f"q{n}"
            after[n] = {"parquet": embed(table, str(parquet), model, env, work), "storage": storage,
                        "qdrant": embed(table, f"qdrant:{storage}/{COLLECTION}", model, env, work)}
            after[n]["search"] = search(f"qdrant:{storage}/{COLLECTION}", texts, args.rounds, env, work)
        log(f"before {n:,}: old gpucli embed to local mode")
        storage = work / f"local{n}"
        old_write = embed(table, f"qdrant:{storage}/{COLLECTION}", model, old_env, work)
        old_search = search(f"qdrant:{storage}/{COLLECTION}", texts, args.rounds, old_env, work)
        log(f"before {n:,}: direct writes and open + query")
        direct = direct_writes(same_points(parquet), work, n)
        local_q = open_query("local", storage, vector, args.rounds, env, work)
        edge_q = open_query("edge", after[n]["storage"], vector, args.rounds, env, work)
        rows.append({"n": n, "old_write": old_write, "old_search": old_search, "direct": direct, "local_q": local_q,
                     "edge_q": edge_q, "new_write": after[n]["qdrant"], "new_search": after[n]["search"],
                     "parquet_write": after[n]["parquet"]})
        rows[-1]["local_s"] = (old_write["wall"] + sum(old_search["walls"]) + direct["local"]["upsert_s"]
                               + args.rounds * local_q["wall"])
        log(f"before {n:,}: local mode's part took {rows[-1]['local_s']:.0f} s")
        for d in direct.values():
            shutil.rmtree(d["path"], ignore_errors=True)
    return rows


# --- report ---------------------------------------------------------------------------------------
def mib(b: float) -> str:
    return f"{b / MB:,.0f}"


def report(args, sizes: list[int], results: dict[int, dict], split: dict, hnsw: dict | None, old: list[dict],
           started: str, total_s: float) -> None:
    load = os.getloadavg()
    commit, dirty = args.commit
    import qdrant_client

    try:
        from importlib.metadata import version
        versions = f"qdrant-edge-py {version('qdrant-edge-py')}, qdrant-client {version('qdrant-client')}"
    except Exception:  # noqa: BLE001 - a label only
        versions = f"qdrant-client at {Path(qdrant_client.__file__).parent}"
    print(f"# Qdrant Edge benchmark ({' '.join(sys.argv[1:]) or 'defaults'})\n")
    print(f"Started {started}, {total_s / 60:.1f} min; commit {commit.strip()}{' (gpucli/ modified)' if dirty else ''}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{versions}; load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; gpucli SEARCH_EF "
          f"{search_ef()}.\n")
    print("## Writes: `gpucli embed --from TABLE` (near-free model), whole processes, Parquet then qdrant:\n")
    print("| points | Parquet, s | qdrant:, s | qdrant / Parquet | qdrant: write stage, s | qdrant: index build "
          "(indexer child), s | peak RSS Parquet / qdrant:, MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        p, q = results[n]["parquet"], results[n]["qdrant"]
        print(f"| {n:,} | {p['wall']:.1f} | {q['wall']:.1f} | **{q['wall'] / p['wall']:.2f}** | "
              f"{q['stages'].get('write', float('nan')):.1f} (Parquet {p['stages'].get('write', float('nan')):.1f}) | "
              f"{q['indexer_s']:.1f} | {mib(p['rss'])} / {mib(q['rss'])} |")
    print("\nStages (the summary's, seconds; they overlap): " + "; ".join(
        f"{n:,}: Parquet {results[n]['parquet']['stages']}, qdrant {results[n]['qdrant']['stages']}" for n in sizes))
    q = split["qdrant"]
    print(f"\nThe sinks alone, in this process ({split['rows']:,} rows of the Parquet output, parts of "
          f"{split['part']:,}; no reader or workers beside them): Parquet {split['parquet']['write_s']:.1f} s; "
          f"qdrant: {q['write_s']:.1f} s of writes + {q['close_s']:.1f} s close (index build). Where qdrant:'s go:\n")
    print("| step | s | share of the writes |")
    print("|---|---:|---:|")
    for label, seconds in sorted(split["steps"].items(), key=lambda kv: -kv[1]):
        share = f"{100 * seconds / q['write_s']:.0f} %" if not label.startswith("close") else "(close)"
        print(f"| {label} | {seconds:.2f} | {share} |")
    rest = q["write_s"] - sum(v for k, v in split["steps"].items() if not k.startswith("close"))
    print(f"| the rest (the sink's own code, chunk counts) | {rest:.2f} | {100 * rest / q['write_s']:.0f} % |")
    print(f"\n## Search: `gpucli search TEXT --in qdrant:... -k {K}`, {args.rounds} fresh processes each\n")
    print("| points | end to end, s (median) | each, s | searched in, ms (median) | query embedded in, s | "
          "search peak RSS, MiB | Parquet output: end to end, s / searched in, ms | vectors in HNSW / points |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for n in sizes:
        s, p, pr = results[n]["search"], results[n]["parquet_search"], results[n]["probe"]
        print(f"| {n:,} | **{s['wall']:.2f}** | {', '.join(f'{w:.2f}' for w in s['walls'])} | **{1000 * s['only']:.1f}** "
              f"| {s['embedded']:.2f} | {mib(s['rss'])} | {p['wall']:.2f} / {1000 * p['only']:.1f} | "
              f"{pr['indexed']:,} / {pr['points']:,} ({pr['segments']} segments) |")
    print("\nImports in one `gpucli search` (`-X importtime`, cumulative, s): " + "; ".join(
        f"{n:,}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[n]["imports"].items()) for n in sizes))
    print("\nThe store alone in a fresh process (`python -c`: import qdrant_client's models, qdrant_edge and "
          "gpucli's EdgeClient; open: EdgeClient + get_collection, which loads the shard; one query_points, k 10, "
          "payloads), median of 3, s: " + "; ".join(
              f"{n:,}: import {results[n]['open_query']['import_s']:.2f}, open {results[n]['open_query']['open_s']:.2f}, "
              f"query {results[n]['open_query']['query_s']:.3f} (wall {results[n]['open_query']['wall']:.2f}, peak RSS "
              f"{mib(results[n]['open_query']['rss'])} MiB)" for n in sizes))
    print(f"\n## Recall@{K}: {QUERIES} queries, gpucli's search (hnsw_ef {search_ef()}) against exact "
          "(`SearchParams(exact=True)`), in process\n")
    print("| collection | recall@10 (worst query) | query ms, median | exact query ms, median |")
    print("|---|---:|---:|---:|")
    for n in sizes:
        pr = results[n]["probe"]
        print(f"| {n:,} as written ({pr['indexed']:,} in HNSW) | **{pr['recall']:.3f}** ({pr['worst']:.1f}) | "
              f"{pr['ms']:.1f} | {pr['exact_ms']:.1f} |")
    if hnsw:
        for label, r in (("Edge's default ef", hnsw["default"]), (f"hnsw_ef {hnsw['ef']} (gpucli's)", hnsw["ours"]),
                         *((f"hnsw_ef {ef}", r) for ef, r in hnsw["others"].items())):
            print(f"| {hnsw['points']:,}, every segment in HNSW, {label} | **{r['recall']:.3f}** ({r['worst']:.1f}) | "
                  f"{r['ms']:.1f} | {r['exact_ms']:.1f} |")
        print(f"\nHNSW forced on a copy of the {hnsw['points']:,}-point collection: Edge's optimize built "
              f"{hnsw['indexed']:,} vectors into {hnsw['segments']} segment(s) in **{hnsw['build_s']:.1f} s** "
              f"(load {hnsw['load_s']:.1f} s; the child's peak RSS {mib(hnsw['rss'])} MiB).")
    if old:
        print(f"\n## Before (qdrant-client local mode; gpucli {BEFORE_COMMIT}) and after (Qdrant Edge; this "
              "checkout), same inputs\n")
        print("| points | `gpucli embed` to qdrant:, s (before / after; Parquet) | `gpucli search`, s, median (before / after) "
              "| search peak RSS, MiB (before / after) | upserts of the same points, batches of 128, s "
              "(local / Edge; Edge's index build) | open + 1 query in a fresh process, s (local / Edge) | "
              "of which open, s (local / Edge) |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in old:
            nw = f"{r['new_write']['wall']:.1f}; {r['parquet_write']['wall']:.1f}"
            d, lq, eq = r["direct"], r["local_q"], r["edge_q"]
            print(f"| {r['n']:,} | {r['old_write']['wall']:.1f} / {nw} | **{r['old_search']['wall']:.2f} / "
                  f"{r['new_search']['wall']:.2f}** | {mib(r['old_search']['rss'])} / {mib(r['new_search']['rss'])} | "
                  f"{d['local']['upsert_s']:.1f} / {d['edge']['upsert_s']:.1f} ({d['edge']['close_s']:.1f}) | "
                  f"{lq['wall']:.2f} / {eq['wall']:.2f} | {lq['open_s']:.3f} / {eq['open_s']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="points per collection, comma-separated")
    parser.add_argument("--before", action="store_true", help="also qdrant-client's local mode (--before-sizes)")
    parser.add_argument("--before-sizes", default="10000,50000",
                        help="points for --before; a size is skipped when the first one says it takes over 2 min")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpucli-bench-qdrant-edge"))
    parser.add_argument("--rounds", type=int, default=5, help="fresh `gpucli search` processes per collection")
    parser.add_argument("--no-hnsw", action="store_true", help="skip the forced HNSW build on the largest collection")
    parser.add_argument("--efs", default="256,512", help="more hnsw_ef values probed on the forced HNSW copy")
    parser.add_argument("--keep", action="store_true", help="leave the outputs in the workdir")
    parser.add_argument("--split-rows", type=int, default=100_000,
                        help="rows of the in-process write split (the largest size up to this)")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    args.commit = (subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                  text=True).stdout,
                   subprocess.run(["git", "status", "--porcelain", "gpucli"], cwd=ROOT, capture_output=True,
                                  text=True).stdout)  # at the start: others may commit meanwhile
    started, t_start = time.strftime("%Y-%m-%d %H:%M %Z"), time.perf_counter()
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for entry in work.iterdir():  # a fresh run; the model (and the old checkout) kept
        if entry.name not in ("tiny", "before-src"):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    env = bench_env()
    env.pop("GPUCLI_BACKEND", None)
    model = tiny_model(work / "tiny")
    words = vocabulary(model)
    log(f"tables of {', '.join(f'{n:,}' for n in sizes)} texts")
    tables = write_tables(work, sizes, words)
    texts = query_texts(words)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [f"q{i}" for i in range(len(texts))], "text": texts}), work / "queries-in.parquet")
    log("the queries' vectors (and the model's ONNX export, before anything is timed)")
    embed(work / "queries-in.parquet", str(work / "queries.parquet"), model, env, work)
    queries = [list(map(float, v)) for v in pq.read_table(work / "queries.parquet").column("embedding").to_pylist()]

    results: dict[int, dict] = {}
    for n in sizes:
        storage = work / f"q{n}"
        log(f"{n:,}: gpucli embed to Parquet")
        parquet = embed(tables[n], str(work / f"p{n}.parquet"), model, env, work)
        log(f"{n:,}: Parquet {parquet['wall']:.1f} s; gpucli embed to qdrant:")
        qdrant = embed(tables[n], f"qdrant:{storage}/{COLLECTION}", model, env, work)
        log(f"{n:,}: qdrant: {qdrant['wall']:.1f} s ({qdrant['wall'] / parquet['wall']:.2f}x; index build "
            f"{qdrant['indexer_s']:.1f} s); gpucli search x{args.rounds}")
        found = search(f"qdrant:{storage}/{COLLECTION}", texts, args.rounds, env, work)
        parquet_search = search(str(work / f"p{n}.parquet"), texts, min(args.rounds, 3), env, work)
        log(f"{n:,}: search {found['wall']:.2f} s end to end, {1000 * found['only']:.1f} ms searched; recall")
        results[n] = {"parquet": parquet, "qdrant": qdrant, "search": found, "parquet_search": parquet_search,
                      "probe": collection_probe(storage, queries), "storage": storage,
                      "open_query": open_query("edge", storage, queries[0], 3, env, work),
                      "imports": import_costs(f"qdrant:{storage}/{COLLECTION}", texts[0], env, work)}
        log(f"{n:,}: recall@10 {results[n]['probe']['recall']:.3f} ({results[n]['probe']['indexed']:,} in HNSW)")
    split_n = max([n for n in sizes if n <= args.split_rows] or [min(sizes)])
    log(f"the sinks' writes of {split_n:,} rows in this process, split by step")
    split = write_split(work / f"p{split_n}.parquet", work, split_n)
    hnsw = None
    if not args.no_hnsw:
        log(f"HNSW forced on a copy of the {sizes[-1]:,} collection")
        hnsw = forced_hnsw(results[sizes[-1]]["storage"], work, queries, env,
                           [int(e) for e in args.efs.split(",") if e])
        log(f"built in {hnsw['build_s']:.1f} s; recall@10 {hnsw['ours']['recall']:.3f}")
    old = before(args, work, model, tables, texts, queries[0], env, results) if args.before else []
    report(args, sizes, results, split, hnsw, old, started, time.perf_counter() - t_start)
    if not args.keep:
        for entry in work.iterdir():
            if entry.name not in ("tiny", "before-src"):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


if __name__ == "__main__":
    main()
