"""Progress as cron logs and terminals show it: timestamped plain lines, the run's opening
line, and a rich display that keeps the bar, M/N and the ETA on an 80-column terminal."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from gpucli.core.progress import (
    Counts,
    PlainProgress,
    Progress,
    RichProgress,
    Speed,
    clock_text,
    make_progress,
    start_line,
    status_text,
)

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")
BUSY = Counts(found=123456, walk_done=True, done=45678, failed=12, rows=99999, items=50000, cost=10**7,
              queued=64, in_flight=2, phase="writing [part] 7 of /usr/local [x]")


def test_the_start_line_names_the_runtime_when_the_task_has_one():
    assert "model minilm (onnx); devices cpu" in start_line("1.2.3", "embed", "minilm", ["cpu"], "o.parquet", "onnx")


def test_start_line_names_version_task_model_devices_and_out():
    line = start_line("1.2.3", "embed", "minilm", ["cuda:1", "cuda:0", "cuda:1"], "/data/v.parquet")
    assert line == "gpucli 1.2.3 embed: model minilm; devices cuda:0, cuda:1; out /data/v.parquet"


def test_plain_lines_carry_an_iso_timestamp():
    stream = io.StringIO()
    progress = PlainProgress("embed", "tokens", every_s=0, stream=stream)
    progress.start("gpucli 1.2.3 embed: model m; devices cpu; out o.parquet")
    progress.update(Counts(found=3, walk_done=True, done=1))
    progress.log("a message")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    assert all(re.match(ISO + " gpucli", line) for line in lines), lines
    assert lines[0].endswith("gpucli 1.2.3 embed: model m; devices cpu; out o.parquet")
    assert "1/3 inputs" in lines[1] and lines[2].endswith("gpucli: a message")


def test_the_start_line_is_printed_in_plain_and_rich_modes_but_not_quiet(capsys):
    quiet = make_progress("auto", True, "embed", "tokens")
    quiet.start("the start line")
    quiet.close()
    off = make_progress("off", False, "embed", "tokens")
    off.start("the start line")
    assert type(quiet) is Progress and capsys.readouterr().err == ""
    buffer = io.StringIO()
    rich = RichProgress("embed", "tokens", console=Console(file=buffer, width=80, force_terminal=True))
    rich.start("gpucli 1.2.3 embed: model [m]; out o.parquet")
    rich.close()
    assert "gpucli 1.2.3 embed: model [m]; out o.parquet" in ANSI.sub("", buffer.getvalue())


def test_a_note_is_shown_with_progress_off_as_the_summary_is_and_not_with_quiet(capsys):
    """A cron user runs with --progress off: "this run uses torch, 2 x slower" must still reach the log."""
    make_progress("off", False, "embed", "tokens").note("this run uses torch")
    assert capsys.readouterr().err == "gpucli: note: this run uses torch\n"
    make_progress("off", True, "embed", "tokens").note("this run uses torch")
    assert capsys.readouterr().err == ""
    stream = io.StringIO()
    PlainProgress("embed", "tokens", stream=stream).note("exported")
    assert stream.getvalue().rstrip().endswith("gpucli: note: exported")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def render_at(width: int, counts: Counts) -> list[str]:
    clock = Clock()
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None, get_time=clock)
    progress = RichProgress("embed", "tokens", console=console)
    progress.bars.stop()  # no refresh thread: render by hand
    progress.update(Counts(found=counts.found, walk_done=counts.walk_done, expected=counts.expected))
    clock.now += 5.0  # two steps give rich a speed, so that the ETA is a time
    progress.update(Counts(found=counts.found, walk_done=counts.walk_done, expected=counts.expected,
                           done=counts.done // 2))
    clock.now += 5.0
    progress.update(counts)
    out = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None, record=True)
    out.print(progress.bars.get_renderable())
    return [line for line in ANSI.sub("", out.export_text()).splitlines() if line.strip()]


def test_the_rich_display_fits_80_columns_keeping_bar_count_and_eta():
    lines = render_at(80, BUSY)
    assert len(lines) == 1, lines  # one line: the detail is cut, not wrapped
    line = lines[0]
    assert len(line) <= 80
    assert "━" in line  # the bar
    assert "45690/123456" in line  # M/N
    assert re.search(r"0:00:10 +0:00:1\d", line), line  # elapsed, then the ETA
    assert "…" not in line and line.rstrip().endswith("inputs/s"), line  # fields dropped whole (issue 52)


def test_the_rich_display_shows_the_whole_detail_when_there_is_room():
    line = render_at(250, BUSY)[0]
    assert "writing [part] 7 of /usr/local [x]" in line  # brackets in the stage text are not markup
    assert "12 failed" in line


# --- what the counts say (issue 28, item 1) ------------------------------------------------------

def test_an_input_counts_when_its_results_are_back_and_what_is_written_shows_apart():
    counts = Counts(found=10, walk_done=True, done=2, back=5, failed=1, skipped=1, rows=4, rows_back=9)
    assert (counts.finished, counts.shown_rows, counts.total) == (9, 13, 10)
    text = status_text(counts, 3.0, "tokens")
    assert text.startswith("9/10 inputs (2 written), 1 failed, 1 skipped, 13 rows, 3.0 inputs/s, 4.3 rows/s"), text
    assert status_text(counts, 3.0, "tokens", eta=65.0).endswith(", 3s, ETA 0:01:05")


def test_the_total_is_the_counting_walk_s_until_the_walk_ends_then_the_walk_s():
    counts = Counts(found=40)
    assert counts.total is None and "0 of 40+ inputs" in status_text(counts, 1.0, "tokens")
    counts.expected = 5000
    assert counts.total == 5000 and "/~5000 inputs" in status_text(counts, 1.0, "tokens"), "a hint, marked"
    counts.expected = 30  # the tree grew while it was counted: never less than what was found
    assert counts.total == 40
    counts.walk_done, counts.found = True, 4990  # the real walk is the truth
    assert counts.total == 4990 and "/4990 inputs" in status_text(counts, 1.0, "tokens")


def test_the_last_line_says_what_was_written_and_nothing_in_flight():
    stream = io.StringIO()
    progress = PlainProgress("embed", "tokens", every_s=0, stream=stream)
    progress.update(Counts(found=8, walk_done=True, done=5, back=2, rows=5, rows_back=2, queued=3, in_flight=2))
    progress.update(Counts(found=8, walk_done=True, done=7, back=1, rows=7, rows_back=1, queued=0, in_flight=1,
                           phase="loading", ended=True))  # one left unwritten by an interrupt
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, "the end's line once (close prints it)"
    assert "7/8 inputs (5 written)" in lines[0] and "in flight 2" in lines[0]
    last = lines[-1]
    assert "7/8 inputs (7 written)" in last and "7 rows" in last, last
    for running in ("in flight", "queue", "ETA", "loading"):
        assert running not in last, last


def test_the_eta_is_the_rate_since_the_work_began():
    speed = Speed()
    assert speed.eta(100, 0) is None
    speed.add(0.0, 0)
    speed.add(10.0, 0)  # loading the model: no speed yet
    assert speed.eta(100, 0) is None
    speed.add(20.0, 20)
    speed.add(40.0, 60)  # 2 inputs/s from the first growth of the count to the last
    assert speed.eta(100, 60) == 20.0
    speed.add(45.0, 60)  # between two bursts it counts down
    assert speed.eta(100, 60) == 15.0
    assert speed.eta(None, 60) is None, "no total, no ETA"
    assert clock_text(3725.2) == "1:02:05"


@pytest.mark.parametrize("burst_s", [1, 3, 7])
def test_the_eta_converges_on_a_tree_of_similar_files(burst_s):
    """20 s of loading, then 1,000 similar files at 25/s whose results come back in bursts every
    `burst_s` seconds (parts, batches), ticks every 0.25 s: from half the work on, the ETA is within
    30% of the time truly left (issue 52: a run that ended at 46 s said 6:51 at 26 s, 4:44 at 39 s)."""
    speed, total, rate, load = Speed(), 1000, 25.0, 20.0
    end = load + total / rate
    for tick in range(int(end * 4) + 1):
        now = tick / 4
        finished = min(total, int(max(0.0, (now - load) // burst_s * burst_s) * rate))
        speed.add(now, finished)
        if finished >= total // 2 and finished < total:
            eta = speed.eta(total, finished)
            assert eta is not None and abs(eta - (end - now)) <= 0.3 * (end - now), (now, eta)


def test_the_bar_counts_results_back_and_its_last_detail_has_nothing_in_flight():
    lines = render_at(250, Counts(found=100, walk_done=True, done=10, back=30, failed=2, rows=10, rows_back=30,
                                  queued=5, in_flight=2))
    assert "42/100" in lines[0] and "in flight 2" in lines[0] and "inputs/s" in lines[0] and "rows/s" in lines[0]
    assert "10 written" in lines[0]
    last = render_at(250, Counts(found=100, walk_done=True, done=98, failed=2, rows=98, queued=5, in_flight=2,
                                 ended=True))[0]
    assert "100/100" in last and "98 written" in last and "in flight" not in last and "queue" not in last


def test_the_bar_has_a_total_and_an_eta_from_the_counting_walk_before_the_walk_ends():
    line = render_at(250, Counts(found=300, expected=123456, done=45678, failed=12))[0]
    assert "45690/123456" in line
    assert re.search(r"0:00:10 +0:00:\d\d|0:00:10 +\d:\d\d:\d\d", line) and "-:--:--" not in line, line
