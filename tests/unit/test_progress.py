"""Progress as cron logs and terminals show it: timestamped plain lines, the run's opening
line, and a rich display that keeps the bar, M/N and the ETA on an 80-column terminal."""

from __future__ import annotations

import io
import re

from rich.console import Console

from gpucli.progress import Counts, PlainProgress, Progress, RichProgress, make_progress, start_line

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
    assert "1/3 files" in lines[1] and lines[2].endswith("gpucli: a message")


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
    progress.update(Counts(found=counts.found, walk_done=True))
    clock.now += 5.0  # two steps give rich a speed, so that the ETA is a time
    progress.update(Counts(found=counts.found, walk_done=True, done=counts.done // 2))
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
    assert "…" in line  # the stage text took the cut


def test_the_rich_display_shows_the_whole_detail_when_there_is_room():
    line = render_at(250, BUSY)[0]
    assert "writing [part] 7 of /usr/local [x]" in line  # brackets in the stage text are not markup
    assert "12 failed" in line
