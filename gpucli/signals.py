"""SIGINT and SIGTERM on an asyncio loop, for the length of one run.

The run's handler replaces whatever was there (the CLI's own handlers) and gives it back
afterwards, never SIG_DFL: a library user's or a test's handlers survive a run."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class LoopSignals:
    def __init__(self) -> None:
        self._previous: dict[int, object] = {}

    def install(self, handler: Callable[[int], None]) -> None:
        """`handler(signum)` on the running loop for each stop signal. Outside the main thread
        (tests drive runs from threads) nothing is installed."""
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            try:
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, handler, sig)
                self._previous[sig] = previous
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def restore(self) -> None:
        loop = asyncio.get_running_loop()
        for sig, previous in self._previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
