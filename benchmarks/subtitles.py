"""Segments and cues on real speech (issue 47): do they follow the sentences, and fit a subtitle?

Recordings whose sentence ends are known to the sample: sentences synthesized one by one (the six
clips of sample_data/wavs, and with espeak-ng, when installed, the passages below), strung
together with pauses of 0.1-2 s. Each recording goes through `gpucli transcribe --subtitles srt`
(the real CLI, the default Whisper tiny.en); then, from its .srt file:
  cue text length (characters, longest line), cue duration, lines per cue: distributions
  sentence ends off a cue boundary by more than 0.3 s (target: none), and the median distance
and the cost of the word alignment that the segments need, on every run since issue 47: the
worker's predict time with and without it on the same chunks, interleaved (info).

    python benchmarks/subtitles.py [--json out.json]     (apt-get install -y espeak-ng for the passages)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RATE = 16000
PASSAGES = [
    ["The museum opens at nine in the morning.", "Tickets are sold at the front desk.",
     "Children under twelve enter for free.", "Please leave your bags in the lockers.",
     "Photography without flash is allowed in most rooms."],
    ["Our team met on Monday to plan the release.", "We agreed to fix the login bug first.",
     "Testing will take about two days, and the documentation needs another pass before we ship.",
     "Is everyone happy with that?", "Good, then let us start."],
    ["Rivers carry water from the mountains to the sea.", "Along the way they shape valleys and plains.",
     "Some rivers flood every spring when the snow melts.", "Farmers have used that water for thousands of years.",
     "Today many rivers are controlled by dams, which also make electricity for nearby towns and cities."],
]
PAUSES = [0.1, 0.6, 0.25, 1.5, 0.15, 2.0, 0.4, 0.8, 0.2, 1.0, 0.12]


def decode(data: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(data)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


def wav(pcm: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


def espeak(sentence: str) -> np.ndarray:
    raw = subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "--stdout", sentence], capture_output=True,
                         check=True).stdout
    converted = subprocess.run(["sox", "-t", "wav", "-", "-r", str(RATE), "-c", "1", "-b", "16", "-e",
                                "signed-integer", "-t", "wav", "-", "gain", "-1"], input=raw, capture_output=True,
                               check=True).stdout
    return decode(converted)


def strung(clips: list[np.ndarray]) -> tuple[np.ndarray, list[float]]:
    """The clips with PAUSES between them, and where each clip's speech ends (its last sample
    louder than 400 of 32768)."""
    pieces, ends, at = [np.zeros(RATE // 4, np.int16)], [], RATE // 4
    for i, clip in enumerate(clips):
        loud = np.nonzero(np.abs(clip.astype(np.int32)) > 400)[0]
        ends.append((at + (loud[-1] if len(loud) else len(clip))) / RATE)
        pieces.append(clip)
        at += len(clip)
        pause = np.zeros(int(PAUSES[i % len(PAUSES)] * RATE), np.int16)
        pieces.append(pause)
        at += len(pause)
    return np.concatenate(pieces), ends


def recordings(folder: Path) -> dict[str, list[float]]:
    """name -> sentence ends (seconds): the bundled clips strung twice over, and espeak passages."""
    samples = [decode(p.read_bytes()) for p in sorted((ROOT / "sample_data" / "wavs").glob("*.wav"))]
    wanted = {"bundled.wav": samples * 2}
    if shutil.which("espeak-ng") and shutil.which("sox"):
        wanted.update({f"passage{i}.wav": [espeak(s) for s in sentences] for i, sentences in enumerate(PASSAGES)})
    else:
        print("espeak-ng or sox not installed: the bundled clips only", file=sys.stderr)
    ends = {}
    for name, clips in wanted.items():
        pcm, ends[name] = strung(clips)
        (folder / name).write_bytes(wav(pcm))
    return ends


def cue_stats(srt_dir: Path, ends: dict[str, list[float]]) -> dict:
    import srt

    lengths, longest_lines, durations, lines, offs, missed, cues = [], [], [], [], [], [], 0
    for name, truth in ends.items():
        parsed = list(srt.parse((srt_dir / f"{name}.srt").read_text(encoding="utf-8")))
        cues += len(parsed)
        bounds = [t for c in parsed for t in (c.start.total_seconds(), c.end.total_seconds())]
        for c in parsed:
            lengths.append(len(c.content.replace("\n", " ")))
            longest_lines.append(max(len(line) for line in c.content.split("\n")))
            lines.append(c.content.count("\n") + 1)
            durations.append((c.end - c.start).total_seconds())
        for end in truth:
            off = min(abs(end - b) for b in bounds) if bounds else float("inf")
            offs.append(off)
            if off > 0.3:
                missed.append((name, round(end, 2), round(off, 2)))

    def spread(values: list[float]) -> dict:
        return {"min": round(min(values), 2), "median": round(statistics.median(values), 2),
                "max": round(max(values), 2)}

    return {"recordings": len(ends), "sentences": len(offs), "cues": cues, "chars": spread(lengths),
            "longest_line": spread(longest_lines), "lines_max": max(lines), "duration_s": spread(durations),
            "sentence_end_to_boundary_s": spread(offs), "sentence_ends_missed": missed}


def alignment_cost(folder: Path, rounds: int = 3) -> dict:
    """The worker's predict on the same chunks, with and without the alignment, interleaved."""
    from gpucli.core.records import Source
    from gpucli.tasks import TaskSpec, create_task

    task = create_task(TaskSpec("transcribe", "", {}))
    task.open()
    task.setup("cpu")
    items = [item for i, path in enumerate(sorted(folder.glob("*.wav")))
             for item in task.prepare(Source(i, path.name, str(path)), path.read_bytes())]
    payloads = [item.payload for item in items]
    runner, times = task.runner, {"with": [], "without": []}
    original = runner._add_words
    for _ in range(rounds):
        for kind in ("with", "without"):
            runner._add_words = original if kind == "with" else (lambda outputs, *args: None)
            started = time.perf_counter()
            for first in range(0, len(payloads), 8):
                task.predict(payloads[first:first + 8])
            times[kind].append(time.perf_counter() - started)
    runner._add_words = original
    with_s, without_s = statistics.median(times["with"]), statistics.median(times["without"])
    return {"audio_s": round(sum(len(p) for p in payloads) / RATE, 1), "predict_with_s": round(with_s, 2),
            "predict_without_s": round(without_s, 2), "alignment_share": round(1 - without_s / with_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="subtitles-bench-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "wavs").mkdir()
        ends = recordings(tmp / "wavs")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "gpucli", "transcribe", str(tmp / "wavs"), "--out",
                               str(tmp / "t.parquet"), "--subtitles", "srt", "--progress", "off"], env=env,
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        figures = {"cues": cue_stats(tmp / "t.subtitles", ends), "alignment": alignment_cost(tmp / "wavs"),
                   "load": round(os.getloadavg()[0], 1)}
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
