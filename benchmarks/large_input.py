"""One huge input: the writer's time must grow with the input's size, not with its square.

A 100 MiB text (~50k chunks of ~2 KB) once took 835-1,204 s while its stages added up to
110-190 s: every flush of the part buffer joined and filtered again all the rows of the one
unfinished input (issue 33). Two measurements, each at three sizes (default 5, 10, 20 MB,
a scaled-down 25/50/100 MB: the buffer is woken every batch once `part_rows` rows wait, so a
smaller `part_rows` brings the slope in reach of small inputs):

* buffer: the rows of one input (384 floats and ~2 KB of text per chunk, as embed makes
  them) fed to `PartBuffer` in batches of 32, with a take after every batch once `part_rows`
  wait (as the writer is woken), then the take that returns them all; beside it the same
  with the buffer as it was before (`QuadraticBuffer`, kept here only to show the slope).
* end to end: `gpucli.engines.local.pipeline.run` on one file of that size, with a null device that
  returns such rows (`WideSim`), one worker; elapsed, the write stage and the seconds per MB.

Linear: seconds per MB stay flat as the size doubles (the ratio 20 MB / 5 MB of the total
time is ~4, not ~16). Measured on the 2-core planning machine under load (issue 33), takes in
seconds, now / before:

    part_rows 1000:    5 MB 0.027 / 0.14, 10 MB 0.056 / 0.51, 20 MB 0.12 / 2.3, 40 MB 0.29 / 8.7
    part_rows 10000:  25 MB 0.05 / 2.6,  50 MB 0.48 / 15.9, 100 MB 0.78 / 65.8
    end to end, part_rows 1000: 5 MB 0.36 s, 10 MB 0.43 s, 20 MB 0.63 s, 40 MB 1.04 s elapsed
    end to end, 100 MB (52,402 chunks): 3.7 s elapsed, 0.28 s in the writer thread

    python benchmarks/large_input.py [--sizes 5,10,20] [--part-rows 1000] [--skip-e2e]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpucli.core.records import Item, Source  # noqa: E402
from gpucli.tasks.base import Task  # noqa: E402

CHUNK_CHARS = 2000  # ~ one 256-token chunk of English text
DIMS = 384
BATCH = 32


@dataclass(frozen=True)
class WideOptions:
    pass


class WideSim(Task):
    """A null device with embed-sized rows: each line of a .txt is one chunk."""

    name = "wide-sim"
    help = "null device, 384-d rows"
    suffixes = (".txt",)
    Options = WideOptions
    default_model = "wide-sim"
    cost_name = "items"
    default_batch_size = BATCH
    default_max_cost = 0
    max_file_mb = 1024

    def schema(self):
        import pyarrow as pa

        return pa.schema([("chunk", pa.int32()), ("text", pa.string()), ("embedding", pa.list_(pa.float32(), DIMS))])

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        lines = data.decode("utf-8").splitlines()
        return [Item(source.id, i, line, 1, {"chunk": i, "text": line}) for i, line in enumerate(lines)]

    def setup(self, device: str) -> None:
        import numpy as np

        self.vector = np.zeros(DIMS, dtype=np.float32)

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        return [{"embedding": self.vector} for _ in payloads]


class QuadraticBuffer:
    """PartBuffer.take as it was before issue 33: every take joins and filters all rows."""

    def __init__(self) -> None:
        self._tables, self._ids, self._index, self.rows = [], [], [], 0

    def add(self, table, ids, index) -> None:
        self._tables.append(table)
        self._ids.append(ids)
        self._index.append(index)
        self.rows += table.num_rows

    def take(self, status):
        import numpy as np
        import pyarrow as pa

        from gpucli.core.decision import Status
        OPEN, COMPLETE = Status.OPEN, Status.COMPLETE

        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        ids, index = np.concatenate(self._ids), np.concatenate(self._index)
        state = status[ids]
        ready, keep = state == COMPLETE, state == OPEN
        self._tables, self._ids, self._index, self.rows = [], [], [], 0
        if keep.any():
            self.add(table.filter(pa.array(keep)), ids[keep], index[keep])
        if not ready.any():
            return None
        order = np.flatnonzero(ready)
        return table.take(pa.array(order[np.lexsort((index[order], ids[order]))]))


def buffer_seconds(buffer: Any, chunks: int, part_rows: int) -> float:
    """The takes' time for one input of `chunks` rows, a take per batch once part_rows wait."""
    import numpy as np
    import pyarrow as pa

    from gpucli.core.decision import Status
    OPEN, COMPLETE = Status.OPEN, Status.COMPLETE

    text = pa.array(["x" * CHUNK_CHARS] * BATCH)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(BATCH * DIMS, np.float32)), DIMS)
    status = np.array([OPEN], dtype=np.int8)
    spent = 0.0
    for start in range(0, chunks, BATCH):
        count = min(BATCH, chunks - start)
        table = pa.table({"chunk": pa.array(np.arange(start, start + count, dtype=np.int32)),
                          "text": text.slice(0, count), "embedding": vectors.slice(0, count)})
        buffer.add(table, np.zeros(count, np.int64), np.arange(start, start + count, dtype=np.int64))
        if buffer.rows >= part_rows:
            t0 = time.perf_counter()
            buffer.take(status)
            spent += time.perf_counter() - t0
    status[0] = COMPLETE
    t0 = time.perf_counter()
    assert buffer.take(status) is not None
    return spent + time.perf_counter() - t0


def end_to_end(mb: float, part_rows: int, work: Path) -> dict[str, float]:
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run

    root = work / f"in-{mb:g}"
    root.mkdir()
    lines = int(mb * 2**20 // (CHUNK_CHARS + 1))
    line = "w" * CHUNK_CHARS + "\n"
    (root / "big.txt").write_text(line * lines)
    config = RunConfig(task="benchmarks.large_input:WideSim", paths=(str(root),), out=str(work / f"out-{mb:g}.parquet"),
                       progress="off", devices="cpu", workers_per_device=1, part_rows=part_rows, max_file_mb=mb + 1,
                       read_processes=0)
    summary = run(config)
    assert summary.exit_code == 0 and summary.rows == lines, summary
    return {"elapsed_s": summary.elapsed_s, "write_s": summary.stage_seconds["write"], "rows": lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5,10,20", help="input sizes in MB")
    parser.add_argument("--part-rows", type=int, default=1000)
    parser.add_argument("--skip-e2e", action="store_true")
    args = parser.parse_args()
    from gpucli.output.parts import PartBuffer

    sizes = [float(s) for s in args.sizes.split(",")]
    buffer_seconds(PartBuffer(), 4 * BATCH, BATCH)  # imports and first calls outside the figures
    print(f"one input, {CHUNK_CHARS}-char chunks with {DIMS}-d vectors, batches of {BATCH}, "
          f"part_rows {args.part_rows}")
    print(f"{'MB':>6} {'chunks':>7} {'buffer s':>9} {'s/MB':>7} {'before s':>9} {'s/MB':>7}")
    for mb in sizes:
        chunks = int(mb * 2**20 // (CHUNK_CHARS + 1))
        now = buffer_seconds(PartBuffer(), chunks, args.part_rows)
        before = buffer_seconds(QuadraticBuffer(), chunks, args.part_rows)
        print(f"{mb:6g} {chunks:7d} {now:9.3f} {now / mb:7.4f} {before:9.3f} {before / mb:7.4f}", flush=True)
    if args.skip_e2e:
        return
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    print(f"\nend to end (gpucli.engines.local.pipeline.run, null device, one worker, part_rows {args.part_rows})")
    print(f"{'MB':>6} {'elapsed s':>10} {'s/MB':>7} {'write s':>8} {'s/MB':>7}")
    with tempfile.TemporaryDirectory(prefix="gpucli-large-") as tmp:
        for mb in sizes:
            got = end_to_end(mb, args.part_rows, Path(tmp))
            print(f"{mb:6g} {got['elapsed_s']:10.2f} {got['elapsed_s'] / mb:7.3f} {got['write_s']:8.2f} "
                  f"{got['write_s'] / mb:7.3f}", flush=True)


if __name__ == "__main__":
    main()
