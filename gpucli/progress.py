"""Progress on stderr: rich bars on a terminal, plain periodic lines under cron, or nothing.

A swappable wrapper (pip's renderers): the engine calls `start` once with the run's opening
line (`start_line`), `update` often and `log` for messages; each renderer decides what to
show. stdout is never touched. Plain lines carry an ISO timestamp, because a cron log is read
after the fact (and are wrapped on words only when they go to a terminal). The rich display
fits the terminal: below `terminal.NARROW` columns it takes a short layout (a shorter bar and
name) so that M/N, the failed count, the rate and the ETA always show; the rest of the detail
takes what is left, cut with an ellipsis.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpucli.terminal import NARROW, fit, width_of


@dataclass
class Counts:
    found: int = 0
    walk_done: bool = False
    done: int = 0
    failed: int = 0
    skipped: int = 0
    rows: int = 0
    items: int = 0
    cost: int = 0
    queued: int = 0
    in_flight: int = 0
    phase: str = ""  # e.g. "loading the model on 2 workers", shown while nothing else moves


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

    def __init__(self, task: str = "", cost_name: str = "items") -> None:
        self.task = task
        self.cost_name = cost_name
        self.started = time.monotonic()

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

    def close(self) -> None:
        pass


class PlainProgress(Progress):
    """One timestamped line every `every_s` seconds: readable in cron logs."""

    def __init__(self, task: str = "", cost_name: str = "items", every_s: float = 10.0, stream=None) -> None:
        super().__init__(task, cost_name)
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._counts = Counts()

    def start(self, text: str) -> None:
        self._line(text)

    def update(self, counts: Counts) -> None:
        self._counts = counts
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._print(counts, now)

    def _print(self, c: Counts, now: float) -> None:
        self._line(f"gpucli {self.task}: {status_text(c, now - self.started, self.cost_name)}")

    def _line(self, text: str) -> None:
        print(fit(f"{timestamp()} {text}", width_of(self.stream)), file=self.stream, flush=True)

    def log(self, message: str) -> None:
        self._line(f"gpucli: {message}")

    def close(self) -> None:
        self._print(self._counts, time.monotonic())


def status_text(c: Counts, elapsed: float, cost_name: str) -> str:
    elapsed = max(elapsed, 1e-9)
    total = f"/{c.found}" if c.walk_done else f" (of {c.found}+ found)"
    phase = f"{c.phase}; " if c.phase else ""
    return (f"{phase}{c.done + c.failed + c.skipped}{total} files, {c.failed} failed, {c.rows} rows, "
            f"{c.items / elapsed:.1f} items/s, {c.cost / elapsed:.0f} {cost_name}/s, queue {c.queued}, "
            f"in flight {c.in_flight}, {elapsed:.0f}s")


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
    return Layout(BAR_WIDTH, f"{task} files")


class RichProgress(Progress):
    """Live bars on a terminal; messages print above them. What the user needs at a glance
    (the bar, M/N, the ETA) has a fixed width; the detail column takes what is left and is
    cut with an ellipsis, never wrapped onto a second line that the live display would smear.
    The detail leads with the failed count and the rate, so that the cut takes the rest."""

    def __init__(self, task: str = "", cost_name: str = "items", console: Any = None) -> None:
        super().__init__(task, cost_name)
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.layout = layout_for(self.console.width, task)
        self.bars = _bars(self.console, self.layout)
        self.bars.start()
        self.files = self.bars.add_task(self.layout.description, total=None, detail="")

    def start(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)  # rich wraps it on words at the width

    def update(self, c: Counts) -> None:
        self.bars.update(self.files, completed=c.done + c.failed + c.skipped,
                         total=c.found if c.walk_done else None, detail=self.detail(c))

    def detail(self, c: Counts) -> str:
        """Markup: what update() puts in is escaped. Most needed first: the cut takes the end."""
        from rich.markup import escape

        elapsed = max(time.monotonic() - self.started, 1e-9)
        failed = f"[red]{c.failed} failed[/]" if c.failed else "0 failed"
        parts = [failed, f"{c.items / elapsed:.1f} items/s", f"{c.rows} rows",
                 f"{c.cost / elapsed:.0f} {escape(self.cost_name)}/s", f"queue {c.queued}", f"in flight {c.in_flight}"]
        if c.phase:  # "loading the model": while it shows, nothing is failed nor moving yet
            parts.insert(2, f"[yellow]{escape(c.phase)}[/]")
        return " · ".join(parts)

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
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bars
    from rich.table import Column

    fixed = {"no_wrap": True}
    columns = [SpinnerColumn(table_column=Column(**fixed)),
               TextColumn("[bold]{task.description}", table_column=Column(**fixed)),
               BarColumn(bar_width=layout.bar_width, table_column=Column(**fixed)),
               MofNCompleteColumn(table_column=Column(**fixed))]
    columns += [TimeElapsedColumn(table_column=Column(**fixed)),
                TimeRemainingColumn(table_column=Column(**fixed)),
                TextColumn("{task.fields[detail]}",  # markup: detail() escapes what it puts in
                           table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=0))]
    return Bars(*columns, console=console, transient=False, refresh_per_second=4, expand=True)


def make_progress(mode: str, quiet: bool, task: str, cost_name: str) -> Progress:
    if quiet or mode == "off":
        return Progress(task, cost_name)
    if mode == "rich" or (mode == "auto" and sys.stderr.isatty()):
        return RichProgress(task, cost_name)
    return PlainProgress(task, cost_name)
