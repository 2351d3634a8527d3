"""Identical content embedded once (issue 30): model time with dedup (the default) against
`--no-dedup`, on a tree where half the files are copies of the other half.

The tree: --files text files, the first half distinct paragraphs (--words words each, drawn from a
fixed vocabulary with a seeded generator), the second half byte-for-byte copies of them under
`copies/`. Each round runs `gpucli embed TREE --out NEW.parquet --devices cpu --json` twice in fresh
processes (into new outputs), with and without `--no-dedup`, alternating which goes first; the
figure is the summary's `stage_seconds.infer` (the busiest worker's model time) and its ratio,
dedup / no-dedup (the aim: about 0.5), with the wall times and the `deduplicated` count beside.

    python benchmarks/dedup_bench.py                     # 400 files, 60 words, 1 round
    python benchmarks/dedup_bench.py --files 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("the a model vector batch index query search table file tree copy content digest ledger part row "
         "engine worker device memory cache token sentence paragraph document vendor export archive report "
         "system network server client request response error value option setting output input stream "
         "river mountain garden market letter window station bridge harbour library theatre kitchen").split()


def make_tree(root: Path, files: int, words: int, seed: int = 30) -> None:
    rng = random.Random(seed)
    half = files // 2
    for i in range(half):
        text = " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + ".\n"
        (root / f"doc{i:05d}.txt").write_text(text)
    (root / "copies").mkdir()
    for i in range(files - half):
        (root / "copies" / f"doc{i % half:05d}.txt").write_bytes((root / f"doc{i % half:05d}.txt").read_bytes())


def run_once(tree: Path, out: Path, dedup: bool) -> dict:
    cmd = [sys.executable, "-m", "gpucli", "embed", str(tree), "--out", str(out), "--devices", "cpu", "--json",
           "--progress", "off"] + ([] if dedup else ["--no-dedup"])
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"gpucli failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    summary["wall_s"] = wall
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dedup-bench-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        make_tree(tree, args.files, args.words)
        ratios = []
        print(f"{args.files} files ({args.files // 2} distinct, {args.files - args.files // 2} copies), "
              f"{args.words} words each; gpucli embed (minilm) --devices cpu")
        print("| round (order) | infer s dedup | infer s --no-dedup | infer dedup / no-dedup | wall s dedup | "
              "wall s --no-dedup | deduplicated | rows (both) |")
        print("|---|---|---|---|---|---|---|---|")
        for n in range(args.rounds):
            order = (True, False) if n % 2 == 0 else (False, True)
            got = {dedup: run_once(tree, Path(tmp) / f"out-{n}-{dedup}.parquet", dedup) for dedup in order}
            on, off = got[True], got[False]
            assert on["rows"] == off["rows"] and on["succeeded"] == off["succeeded"] == args.files
            ratio = on["stage_seconds"]["infer"] / off["stage_seconds"]["infer"]
            ratios.append(ratio)
            names = " then ".join("dedup" if d else "--no-dedup" for d in order)
            print(f"| {n + 1} ({names}) | {on['stage_seconds']['infer']:.2f} | {off['stage_seconds']['infer']:.2f} | "
                  f"{ratio:.2f} | {on['wall_s']:.1f} | {off['wall_s']:.1f} | {on['deduplicated']} | {on['rows']} |")
        print(f"median infer ratio dedup / no-dedup: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
