"""What gpucli prints on an 80-column terminal fits it: the start line, the live bar, the
summary, `gpucli models` and `gpucli search`, each run in a pseudo-terminal of 80 columns
(COLUMNS=80 and the pty's own window size), and no word is cut where a line wraps."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, write_tree

WIDTH = 80
CONTROL = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def run_in_pty(args: list[str], cwd: Path, deadline_s: float = 240.0) -> list[str]:
    """What `args` wrote to an 80x40 terminal, as the screen's lines (control codes removed;
    a live display's redraws, split on carriage returns, are each a line)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, WIDTH, 0, 0))
    env = {**os.environ, "COLUMNS": str(WIDTH), "LINES": "40", "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks, end = [], time.monotonic() + deadline_s  # a hang guard, not a timing assertion
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=30) in (0, 1), b"".join(chunks).decode(errors="replace")[-3000:]
    text = CONTROL.sub("", b"".join(chunks).decode("utf-8", errors="replace"))
    return [part for line in text.split("\n") for part in line.split("\r") if part.strip()]


def assert_fits(lines: list[str]) -> None:
    too_long = [line for line in lines if len(line.rstrip()) > WIDTH]
    assert not too_long, "\n".join(too_long)


RUN = textwrap.dedent("""
    import sys
    from gpucli.app.summary_lines import print_summary
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from tests.fake_task import FAKE

    if __name__ == "__main__":
        root, out = sys.argv[1], sys.argv[2]
        config = RunConfig(task=FAKE, paths=(root,), out=out, progress="rich", devices="cpu", workers_per_device=1,
                           task_options={"sleep_ms": 20.0})
        print_summary(run(config))
""")


@pytest.fixture(scope="module")
def run_screen(tmp_path_factory) -> list[str]:
    """A fake-task run with a failure, into an output whose path is long enough to wrap."""
    base = tmp_path_factory.mktemp("width")
    files = {f"notes/file{i:03d}.txt": "alpha beta gamma\ndelta epsilon\n" for i in range(60)}
    files["notes/broken.txt"] = "this line says BOOM\n"
    root = write_tree(base / "tree", files)
    out = base / "a-rather-long-output-directory-name" / "with-a-second-long-level" / "vectors.parquet"
    return run_in_pty([sys.executable, "-c", RUN, str(root), str(out)], base)


def test_the_start_line_fits_80_columns_with_words_whole(run_screen):
    start = [i for i, line in enumerate(run_screen) if line.startswith("gpucli ") and "model fake-model" in line]
    assert start, run_screen
    assert_fits(run_screen)
    first = run_screen[start[0]]
    assert "devices cpu" in first or "devices cpu" in run_screen[start[0] + 1]


def test_the_bar_keeps_count_failed_rate_and_eta_at_80_columns(run_screen):
    bars = [line for line in run_screen if re.search(r"\d+/\d+", line) and "inputs/s" in line]
    assert bars, run_screen
    assert_fits(bars)
    final = bars[-1]
    assert "61/61" in final and "1 failed" in final and "inputs/s" in final, final
    assert re.search(r"\d:\d\d:\d\d", final), final  # elapsed and the ETA


def test_the_summary_wraps_on_words_at_80_columns(run_screen):
    at = next(i for i, line in enumerate(run_screen) if ": done with failures in" in line)
    summary = run_screen[at:]
    assert_fits(summary)
    joined = " ".join(line.strip() for line in summary)
    for phrase in ("61 inputs:", "60 succeeded,", "1 failed,", "0 skipped", "inputs/s,", "rows/s;"):
        assert phrase in joined, joined  # no word cut where a line ends (was: sk/ipped, i/nfer)
    assert "vectors.parquet" in joined


def test_models_fits_80_columns_and_no_alias_is_cut(tmp_path):
    lines = run_in_pty([sys.executable, "-m", "gpucli", "models"], tmp_path)
    assert_fits(lines)
    text = "\n".join(lines)
    for alias in ("efficientnet-lite0", "minilm", "whisper-tiny.en", "sensevoice-small"):
        assert re.search(rf"^{re.escape(alias)}\b", text, re.M), text
    assert "…" not in text


SEARCH = textwrap.dedent("""
    from gpucli.commands.search import Hit, SearchResult, render

    if __name__ == "__main__":
        text = ("Origami is the art of paper folding, which is often associated with Japanese culture; the goal "
                "is to transform a flat square sheet of paper into a finished sculpture through folding. ") * 3
        hits = [Hit(0.8123, "culture/origami.txt", 0, text, 0, 200, None),
                Hit(0.5, "a/very/deep/directory/tree/that/goes/on/and/on/with/a-long-file-name-too.pdf", 3,
                    "Tidal forces stretch the moons. " * 10, 0, 300, 12)]
        render(SearchResult("embed.parquet", "minilm", hits, 42, 0.01, 0.002), False)
""")


def test_search_fits_80_columns_with_header_score_path_and_a_snippet_cut_on_a_word(tmp_path):
    lines = run_in_pty([sys.executable, "-c", SEARCH], tmp_path)
    assert_fits(lines)
    assert lines[0].lstrip().startswith("#") and "score" in lines[0], lines
    hit = next(line for line in lines if "0.8123" in line)
    assert "culture/origami.txt" in hit and "chunk 0" in hit
    snippet = lines[lines.index(hit) + 1]
    assert snippet.rstrip().endswith("…") and snippet.strip().startswith("Origami is the art")
    assert snippet.rstrip()[:-1].split()[-1] in ("the", "art", "of", "paper", "folding", "which", "is", "often",
                                                 "associated", "with", "Japanese", "culture", "goal", "to",
                                                 "transform", "a", "flat", "square", "sheet", "into", "finished",
                                                 "sculpture", "through")  # a whole word before the cut
    joined = " ".join(lines)
    assert "page 12" in joined and "chunk 3" in joined
