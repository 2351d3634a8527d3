"""Progress on stderr: rich bars on a terminal, plain periodic lines under cron, or nothing.

A swappable wrapper (pip's renderers): the engine calls `start` once with the run's opening
line (`start_line`), `update` often (`tick`) and `log` for messages; each renderer decides
what to show. stdout is never touched. What they show is true (`Counts`): an input counts when
its results are back, what is written shows apart, the total comes from a counting walk ahead
of the reader (then the ETA), the rates are per input and per row as in the summary, and the
last line has nothing queued or in flight. Plain lines carry an ISO timestamp, because a cron log is read
after the fact (and are wrapped on words only when they go to a terminal). The rich display
fits the terminal: below `terminal.NARROW` columns it takes a short layout (a shorter bar and
name) so that M/N, the failed count, the rate and the ETA always show; the rest of the detail
takes what is left, cut with an ellipsis.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpucli.core.terminal import NARROW, fit, width_of


@dataclass
class Counts:
    """What the progress shows: numbers only (nothing here grows with the tree).

    An input counts as soon as its results are back (`back`), before the part holding its
    rows is durable (`done`, the summary's `succeeded`): a slow sink delays `done`, never
    the count. The total is the walk's `found` once the walk has ended, before that the
    counting walk's `expected` (a hint, see Job.count_ahead)."""

    found: int = 0  # inputs the reader has had from the walk so far
    walk_done: bool = False  # the walk ended: `found` is the total
    expected: int | None = None  # the counting walk's total, while the real walk goes on
    done: int = 0  # inputs whose rows are durable (written)
    back: int = 0  # inputs whose results are all back, not yet durable
    failed: int = 0
    skipped: int = 0
    passed_over: int = 0  # files the walk found and does not read: skipped, never inputs the reader had
    rows: int = 0  # durable rows
    rows_back: int = 0  # rows back from the models, not yet durable
    items: int = 0  # model items (embed: chunks) back
    cost: int = 0
    queued: int = 0
    in_flight: int = 0
    phase: str = ""  # e.g. "loading the model on 2 workers", shown while nothing else moves
    ended: bool = False  # the run is over: nothing is queued or in flight, only what was written counts

    @property
    def finished(self) -> int:
        """Inputs with their outcome: results back (written or not), failed or skipped. At the
        end, only what was written: results never written (an interrupt) are unfinished."""
        return self.done + (0 if self.ended else self.back) + self.failed + self.skipped + self.passed_over

    @property
    def shown_rows(self) -> int:
        return self.rows + (0 if self.ended else self.rows_back)

    @property
    def total(self) -> int | None:
        """The walk's count once it ended, else the counting walk's (at least what was found)."""
        if self.walk_done:
            return self.found + self.passed_over
        return None if self.expected is None else max(self.expected, self.found + self.passed_over)


def start_line(version: str, task: str, model: str, devices: Sequence[str], out: str, runtime: str = "") -> str:
    """The run's first line: what is running, where, on which runtime (torch, onnx), into what
    (so that a log says it all)."""
    where = ", ".join(sorted(set(devices))) or "none"
    on = f" ({runtime})" if runtime else ""
    return f"gpucli {version} {task}: model {model}{on}; devices {where}; out {out}"


def timestamp() -> str:
    """Local time with its UTC offset, to the second: sorts, and reads the same in any timezone."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


class Progress:
    """Silent renderer (`--quiet`, `--progress off`); the base of the others."""

    shows = False  # whether anything is shown: the counting walk runs only for a renderer that shows it

    def __init__(self, task: str = "", cost_name: str = "items", quiet: bool = True) -> None:
        self.task = task
        self.cost_name = cost_name
        self.started = time.monotonic()
        self.quiet = quiet  # --quiet: not a word; --progress off: no progress, but what went wrong (`warn`)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, text: str) -> None:
        """The run's opening line (see `start_line`), once, before any work."""

    def update(self, counts: Counts) -> None:
        pass

    def log(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        """Why a run failed as a whole ("no input"): shown with --progress off too, not with --quiet."""
        self._say(message)

    def note(self, message: str) -> None:
        """What a user must know of this run (a slower fallback, a first export, a compaction):
        shown with --progress off too, as the summary is (cron logs), not with --quiet."""
        self._say(f"note: {message}")

    def _say(self, message: str) -> None:
        if type(self).log is not Progress.log:
            self.log(message)
        elif not self.quiet:
            print(f"gpucli: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class PlainProgress(Progress):
    """One timestamped line every `every_s` seconds, and one at the end: readable in cron logs."""

    shows = True

    def __init__(self, task: str = "", cost_name: str = "items", every_s: float = 10.0, stream=None) -> None:
        super().__init__(task, cost_name)
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._counts = Counts()
        self._speed = Speed()

    def start(self, text: str) -> None:
        self._line(text)

    def update(self, counts: Counts) -> None:
        self._counts = counts
        now = time.monotonic()
        self._speed.add(now, counts.finished)
        if now - self._last >= self.every_s and not counts.ended:  # the end's line is close()'s
            self._last = now
            self._print(counts, now)

    def _print(self, c: Counts, now: float) -> None:
        eta = self._speed.eta(c.total, c.finished)
        self._line(f"gpucli {self.task}: {status_text(c, now - self.started, self.cost_name, eta)}")

    def _line(self, text: str) -> None:
        print(fit(f"{timestamp()} {text}", width_of(self.stream)), file=self.stream, flush=True)

    def log(self, message: str) -> None:
        self._line(f"gpucli: {message}")

    def close(self) -> None:
        self._print(self._counts, time.monotonic())


def status_text(c: Counts, elapsed: float, cost_name: str, eta: float | None = None) -> str:
    """A plain line's text: inputs with their outcome of the total (`~` while it is the counting
    walk's hint), how many are written, the rates per input and per row (as the summary's
    `inputs_per_s`, `rows_per_s`); while running, the queue, what is in flight and the ETA."""
    elapsed = max(elapsed, 1e-9)
    phase = f"{c.phase}; " if c.phase and not c.ended else ""
    parts = [f"{phase}{c.finished}{_of_total(c)} inputs ({c.done} written)", f"{c.failed} failed",
             f"{c.skipped + c.passed_over} skipped", f"{c.shown_rows} rows", *rates(c, elapsed, cost_name)]
    if not c.ended:
        parts += [f"queue {c.queued}", f"in flight {c.in_flight}"]
    parts.append(f"{elapsed:.0f}s")
    if eta is not None and not c.ended:
        parts.append(f"ETA {clock_text(eta)}")
    return ", ".join(parts)


def rates(c: Counts, elapsed: float, cost_name: str) -> list[str]:
    """Per input, per row and per unit of cost, over the run so far: the bar's, the lines' and
    (at the end) the summary's."""
    return [f"{c.finished / elapsed:.1f} inputs/s", f"{c.shown_rows / elapsed:.1f} rows/s",
            f"{c.cost / elapsed:.0f} {cost_name}/s"]


def _of_total(c: Counts) -> str:
    """`/N` (the walk ended), `/~N` (the counting walk's hint), ` of N+` (neither yet)."""
    total = c.total
    if total is None:
        return f" of {c.found}+"
    return f"/{total}" if c.walk_done else f"/~{total}"


def clock_text(seconds: float) -> str:
    """H:MM:SS, as rich shows elapsed and remaining times."""
    whole = int(max(seconds, 0) + 0.5)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class Speed:
    """Inputs per second between the first and the last time the count of finished inputs grew, for
    the ETA of the plain lines and the bar alike. The run's own average would count the model's loading
    against it, and a recent window (30 s, as before) swung with every burst of results: on a run that
    ended at 46 s it said 6:51 at 26 s and 4:44 at 39 s. Measured from growth to growth, a
    tree of similar files gives the run's steady rate even when results come back in bursts, so the
    ETA converges (tests/unit/test_progress.py); between two bursts it counts down. Two samples kept."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s  # kept for callers; the estimate no longer uses a window
        self._first: tuple[float, int] | None = None  # the first growth: (when, finished)
        self._last: tuple[float, int] | None = None  # the last growth
        self._now = 0.0
        self._seen = -1

    def add(self, now: float, finished: int) -> None:
        self._now = now
        if self._seen >= 0 and finished > self._seen:
            if self._first is None:
                self._first = (now, finished)
            self._last = (now, finished)
        self._seen = max(self._seen, finished)

    def eta(self, total: int | None, finished: int) -> float | None:
        """Seconds to go at that rate, less the time since the last growth; None while the total or a
        rate is unknown."""
        if total is None or self._first is None or self._last is None:
            return None
        (t0, n0), (t1, n1) = self._first, self._last
        if n1 <= n0 or t1 <= t0:
            return None
        return max(max(total - finished, 0) * (t1 - t0) / (n1 - n0) - (self._now - t1), 0.0)


async def tick(progress: Progress, counts_now: Callable[[], Counts], every_s: float = 0.25) -> None:
    """Until cancelled: what `counts_now` says, to `progress`, every `every_s` seconds."""
    while True:
        progress.update(counts_now())
        await asyncio.sleep(every_s)


NO_ETA = "-:--:--"  # the ETA column while it is unknown (rich's own placeholder)
SEPARATOR = " · "
BAR_WIDTH = 24  # with spinner, name, M/N, elapsed and ETA: about 67 columns; used from NARROW columns up
NARROW_BAR_WIDTH = 10  # the short layout: spinner, task, bar, M/N, elapsed, ETA in about 50 of 80 columns


@dataclass(frozen=True)
class Layout:
    """The bar's fixed columns; `detail` takes what is left of the terminal's width."""

    bar_width: int
    description: str


def layout_for(width: int, task: str) -> Layout:
    """Below NARROW columns a shorter bar and name leave the detail ~30 columns at 80: enough
    for the failed count and the rate, which lead it."""
    if width < NARROW:
        return Layout(NARROW_BAR_WIDTH, task)
    return Layout(BAR_WIDTH, f"{task} inputs")


class RichProgress(Progress):
    """Live bars on a terminal; messages print above them. What the user needs at a glance
    (the bar, M/N, the ETA) has a fixed width; the detail column takes what is left and is
    cut with an ellipsis, never wrapped onto a second line that the live display would smear.
    The detail leads with the failed count and the rate, so that the cut takes the rest."""

    shows = True

    def __init__(self, task: str = "", cost_name: str = "items", console: Any = None) -> None:
        super().__init__(task, cost_name)
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.layout = layout_for(self.console.width, task)
        self.bars = _bars(self.console, self.layout)
        self.bars.start()
        self.files = self.bars.add_task(self.layout.description, total=None, detail="", eta=NO_ETA)
        self._speed = Speed()

    def start(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)  # rich wraps it on words at the width

    def update(self, c: Counts) -> None:
        """M/N: inputs with their outcome (results back, not only written) of the total, the
        counting walk's until the walk ends; rich's ETA follows once the total is known."""
        self._speed.add(self.console.get_time(), c.finished)  # rich's clock, as its elapsed column's
        eta = None if c.ended else self._speed.eta(c.total, c.finished)
        shown = NO_ETA if eta is None else clock_text(eta)
        self.bars.update(self.files, completed=c.finished, total=c.total, eta=shown,
                         detail=self.fitted(self.detail(c), self._room(c)))

    def _room(self, c: Counts) -> int:
        """Columns left for the detail: the terminal's less the fixed columns (spinner, name, bar, M/N,
        elapsed, ETA) and the space between them."""
        count = len(f"{c.finished}/{c.total}") if c.total is not None else len(str(c.finished))
        fixed = 1 + len(self.layout.description) + self.layout.bar_width + count + 2 * len(NO_ETA)
        return self.console.width - fixed - 6

    @staticmethod
    def fitted(parts: list[str], room: int) -> str:
        """The detail's fields, joined, as many as fit `room` columns, whole: fields are dropped from the
        end, never cut mid-word (at 80 columns the line was cut at `0.0 rows/s ·…`)."""
        from rich.text import Text

        kept: list[str] = []
        width = 0
        for part in parts:
            wide = Text.from_markup(part).cell_len + (len(SEPARATOR) if kept else 0)
            if width + wide > room:
                break
            kept.append(part)
            width += wide
        return SEPARATOR.join(kept)

    def detail(self, c: Counts) -> list[str]:
        """Markup: what update() puts in is escaped. Most needed first: the fit drops the end."""
        from rich.markup import escape

        elapsed = max(time.monotonic() - self.started, 1e-9)
        failed = f"[red]{c.failed} failed[/]" if c.failed else "0 failed"
        per_input, per_row, per_cost = rates(c, elapsed, escape(self.cost_name))
        parts = [failed, per_input, f"{c.skipped + c.passed_over} skipped", per_row, f"{c.done} written",
                 f"{c.shown_rows} rows", per_cost]
        if not c.ended:
            parts += [f"queue {c.queued}", f"in flight {c.in_flight}"]
        if c.phase and not c.ended:  # "loading the model": while it shows, nothing is failed nor moving yet
            parts.insert(2, f"[yellow]{escape(c.phase)}[/]")
        return parts

    def log(self, message: str) -> None:
        self.console.print(f"gpucli: {message}", highlight=False, markup=False)

    def close(self) -> None:
        self.bars.stop()


def _bars(console: Any, layout: Layout) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as Bars
    from rich.table import Column

    columns = [SpinnerColumn(table_column=Column(no_wrap=True)),
               TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
               BarColumn(bar_width=layout.bar_width, table_column=Column(no_wrap=True)),
               MofNCompleteColumn(table_column=Column(no_wrap=True))]
    columns += [TimeElapsedColumn(table_column=Column(no_wrap=True)),
                TextColumn("[cyan]{task.fields[eta]}", table_column=Column(no_wrap=True)),  # Speed's ETA, as the lines
                TextColumn("{task.fields[detail]}",  # markup: detail() escapes what it puts in
                           table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=0))]
    return Bars(*columns, console=console, transient=False, refresh_per_second=4, expand=True)


def make_progress(mode: str, quiet: bool, task: str, cost_name: str) -> Progress:
    if quiet or mode == "off":
        return Progress(task, cost_name, quiet=quiet)
    if mode == "rich" or (mode == "auto" and sys.stderr.isatty()):
        return RichProgress(task, cost_name)
    return PlainProgress(task, cost_name)
