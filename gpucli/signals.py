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
import os
import signal
import threading
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


@contextlib.contextmanager
def held_stops(deliver: bool = True, on_held: Callable[[int], None] | None = None) -> Iterator[None]:
    """A section a stop must not cut in two: a driver whose Ctrl-C is a KeyboardInterrupt
    (Ray's) between writing a part and counting it wrote rows its summary never counted.

    A stop signal that arrives inside waits for the section's end. Then, with `deliver`, it
    goes to the handler that was there (the KeyboardInterrupt, SIGTERM's own handler); else
    only `on_held(signum)` hears of it (a stop during the run's last writes, already stopping).
    Only the main thread runs Python signal handlers: elsewhere this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if held and on_held is not None:
            on_held(held[0])
    if held and deliver:  # not after an error inside: that error goes on as it was
        handler = previous[held[0]]
        if callable(handler):
            handler(held[0], None)
        elif handler in (signal.SIG_DFL, None):
            os.kill(os.getpid(), held[0])


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
