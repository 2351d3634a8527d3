"""Progress on stderr: rich bars on a terminal, plain periodic lines under cron, or nothing.

A swappable wrapper (pip's renderers): the pipeline calls `update` often and `log` for
messages; each renderer decides what to show. stdout is never touched.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass


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

    def update(self, counts: Counts) -> None:
        pass

    def log(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


class PlainProgress(Progress):
    """One line every `every_s` seconds: readable in cron logs."""

    def __init__(self, task: str = "", cost_name: str = "items", every_s: float = 10.0, stream=None) -> None:
        super().__init__(task, cost_name)
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._counts = Counts()

    def update(self, counts: Counts) -> None:
        self._counts = counts
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._print(counts, now)

    def _print(self, c: Counts, now: float) -> None:
        elapsed = max(now - self.started, 1e-9)
        total = f"/{c.found}" if c.walk_done else f" (of {c.found}+ found)"
        phase = f"{c.phase}; " if c.phase else ""
        print(f"gpucli {self.task}: {phase}{c.done + c.failed + c.skipped}{total} files, {c.failed} failed, "
              f"{c.rows} rows, {c.items / elapsed:.1f} items/s, {c.cost / elapsed:.0f} {self.cost_name}/s, "
              f"queue {c.queued}, in flight {c.in_flight}, {elapsed:.0f}s", file=self.stream, flush=True)

    def log(self, message: str) -> None:
        print(f"gpucli: {message}", file=self.stream, flush=True)

    def close(self) -> None:
        self._print(self._counts, time.monotonic())


class RichProgress(Progress):
    """Live bars on a terminal; messages print above them."""

    def __init__(self, task: str = "", cost_name: str = "items") -> None:
        super().__init__(task, cost_name)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bars

        self.console = Console(stderr=True)
        self.bars = Bars(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[detail]}"),
                         console=self.console, transient=False, refresh_per_second=4)
        self.bars.start()
        self.files = self.bars.add_task(f"{task} files", total=None, detail="")

    def update(self, c: Counts) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        detail = (f"[yellow]{c.phase}[/] · " if c.phase else "") + (f"{c.rows} rows · {c.items / elapsed:.1f} items/s · {c.cost / elapsed:.0f} {self.cost_name}/s"
                  f" · queue {c.queued} · in flight {c.in_flight}" + (f" · [red]{c.failed} failed" if c.failed else ""))
        self.bars.update(self.files, completed=c.done + c.failed + c.skipped,
                         total=c.found if c.walk_done else None, detail=detail)

    def log(self, message: str) -> None:
        self.console.print(f"gpucli: {message}", highlight=False, markup=False)

    def close(self) -> None:
        self.bars.stop()


def make_progress(mode: str, quiet: bool, task: str, cost_name: str) -> Progress:
    if quiet or mode == "off":
        return Progress(task, cost_name)
    if mode == "rich" or (mode == "auto" and sys.stderr.isatty()):
        return RichProgress(task, cost_name)
    return PlainProgress(task, cost_name)
