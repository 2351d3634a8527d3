"""SIGINT and SIGTERM: the parent's, on its asyncio loop for the length of one run; never a
spawned child's.

The run's handler replaces whatever was there (the CLI's own handlers) and gives it back
afterwards, never SIG_DFL: a library user's or a test's handlers survive a run.

Ctrl-C in a terminal and systemd's stop signal the whole process group. The parent decides
what a stop means and stops its readers and workers itself, so a child ignores both signals,
from its first instruction on: a child is started with them blocked (`held_from_children`)
and ignores, then unblocks them first thing (`leave_to_parent`). Ignoring them only in the
child's entry left a window of Python's start-up and the unpickling of its target (imports,
a second or more), in which a group's Ctrl-C killed a worker with a KeyboardInterrupt
traceback and the run failed with "could not load the model" instead of exiting 130.
CPython's own resource tracker is started the same way."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def held_from_children() -> Iterator[None]:
    """Blocks the stop signals in this thread while it starts a process, which inherits the
    mask (across exec too). One that arrives meanwhile waits, and reaches the parent after.

    multiprocessing's resource tracker is started first: starting it ends with an
    unconditional SIG_UNBLOCK of these very signals, which would undo the hold."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def leave_to_parent() -> None:
    """In a spawned child, first thing: ignore the stop signals, then unblock them. One that
    came while they were blocked is dropped: an ignored pending signal is discarded."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


class LoopSignals:
    def __init__(self) -> None:
        self._previous: dict[int, object] = {}

    def install(self, handler: Callable[[int], None]) -> None:
        """`handler(signum)` on the running loop for each stop signal. Outside the main thread
        (tests drive runs from threads) nothing is installed."""
        import asyncio

        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            try:
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, handler, sig)
                self._previous[sig] = previous
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def restore(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        for sig, previous in self._previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
