"""SIGINT and SIGTERM: the parent's, on its asyncio loop for the length of one run; never a
spawned child's.

The run's handler replaces whatever was there (the CLI's own handlers) and gives it back
afterwards (SIG_DFL only for one installed from C): a library user's or a test's handlers
survive a run. The local engine's stop is a callback on its loop; Ray's driver, which has no
loop of its own, stops by a KeyboardInterrupt that `DriverStops` keeps out of the steps that
must not be cut in two.

Ctrl-C in a terminal and systemd's stop signal the whole process group. The parent decides
what a stop means and stops its readers and workers itself, so a child ignores both signals,
from its first instruction on: a child is started with them blocked (`held_from_children`)
and ignores, then unblocks them first thing (`leave_to_parent`). Ignoring them only in the
child's entry left a window of Python's start-up and the unpickling of its target (imports,
a second or more), in which a group's Ctrl-C killed a worker with a KeyboardInterrupt
traceback and the run failed with "could not load the model" instead of exiting 130.
CPython's own resource tracker is started the same way.

Before a command's own guard takes over, and after it has given the process back (the console
script's imports, Typer's parsing, the exit), a stop exits at once with its one line
(`exit_at_once`): nothing is open then, and a KeyboardInterrupt raised inside an import printed
a traceback through importlib, where SIGTERM killed the process with no line at all."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_LINES = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}  # the CLI's one line


def exit_at_once() -> None:
    """The console script's first instruction (gpucli/__main__.py): from here on a stop exits
    130 / 143 with one line, until a command's guard puts in its own handlers (and after it
    gives them back). A signal the process was started with ignored (`gpucli ... &` in a
    script ignores SIGINT) stays ignored."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _exit_now)


def exits_at_once(handler: Any) -> bool:
    """Whether `handler` is exit_at_once's (a guard replaces it, and no other one, for its extent)."""
    return handler is _exit_now


def _exit_now(signum: int, frame: Any) -> None:
    """Nothing to close yet (or any more): the line, and out, without unwinding the import or
    the teardown under way (a KeyboardInterrupt there printed a traceback)."""
    _say(f"gpucli: error: {STOP_LINES[signal.Signals(signum)]}")
    os._exit(128 + signum)


class Interrupted(KeyboardInterrupt):
    """A stop raised where the main thread happens to be (Ray's driver), with the signal that
    asked for it: a KeyboardInterrupt to every `except` on the way, and exit 143 rather than
    130 at the CLI when that signal was SIGTERM (a second SIGTERM to a stopping run)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


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


class DriverStops:
    """Ctrl-C and SIGTERM for a driver whose stop is a KeyboardInterrupt raised where the main
    thread happens to be (Ray's driver, which spends its time inside Ray's iterator).

    Some steps must not be cut in two: a part written and marked done in the ledger but never
    counted left a summary of 0 succeeded beside 4 rows. Inside `held()` the run's first stop
    only notes itself (a line on stderr) and is raised as the KeyboardInterrupt when the step
    ends; the run's second stop is raised at once, as the local engine's second Ctrl-C stops at
    once. The handler stays installed across the run's steps (`installed()`), so no stop falls
    between two handler swaps; `signum` is the first stop's signal, for the exit code.

    `wake()` is the run's own stop from another thread (Ray's NodeWatch, when the run cannot
    go on): the same interrupt of the main thread, held alike, but no user's stop: it sets no
    exit code and prints nothing, and a Ctrl-C after it is still the run's first stop."""

    def __init__(self) -> None:
        self.signum = 0
        self._holding = 0  # nested held() sections
        self._held = False  # a stop came inside one and waits for its end
        self._woken = False  # the next SIGINT is wake()'s, not a user's
        self._installed = 0  # nested installed() sections

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The handler for both stop signals (main thread only: elsewhere Python runs no signal
        handler, and nothing is installed). Nested: an inner one puts this handler in again over
        whatever replaced it meanwhile (ray.init's SIGTERM handler, a sys.exit(15)) and leaves it
        there; the outermost gives back what was there before the run (the CLI's), so Ray's
        handler never outlives the run."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        outer = not self._installed
        previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        self._installed += 1
        try:
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._on_signal)
            yield
        finally:
            self._installed -= 1
            restore_handlers(previous if outer else dict.fromkeys(STOP_SIGNALS, self._on_signal))

    @contextlib.contextmanager
    def held(self, deliver: bool = True) -> Iterator[None]:
        """A step a first stop waits for. With `deliver`, that stop is raised once the step
        ends well (an error inside goes on as it was); without, it only sets `signum` (the
        run's last writes, after which the run ends anyway)."""
        waited = False
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding:
                waited, self._held = self._held, False
        if waited and deliver:
            raise Interrupted(self.signum or signal.SIGINT)

    def wake(self) -> None:
        """Interrupts the main thread from another one. A real signal: `_thread.interrupt_main`
        only sets a flag, which a main thread blocked on Ray Data's result queue never reads."""
        self._woken = True
        main = threading.main_thread().ident
        if main is not None:  # always, once the program runs
            signal.pthread_kill(main, signal.SIGINT)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self._woken:
            self._woken = False
            if self._holding:
                self._held = True
                return
            raise Interrupted(self.signum or signal.SIGINT)
        first = not self.signum
        self.signum = self.signum or signum
        if first and self._holding:
            self._held = True
            _say(f"gpucli: {signal.Signals(signum).name}: stopping once the step under way is done (the part "
                 "being written); press Ctrl-C again to stop at once")
            return
        raise Interrupted(signum)  # outside a step, or the run's second stop (its own exit code)


def _say(line: str) -> None:
    """A line on stderr from a signal handler: no lock that the interrupted code may hold, and
    a closed or broken stderr (`2>&1 | tee`, whose tee the same Ctrl-C ended) is no error."""
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass


def restore_handlers(previous: dict[int, Any]) -> None:
    """Each handler back, also when a stop lands between two of them (`None`: one installed
    from C, which Python cannot put back: the default then)."""
    (sig, handler), *rest = previous.items()
    try:
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    finally:
        if rest:
            restore_handlers(dict(rest))


def leave_to_parent() -> None:
    """In a spawned child, first thing: ignore the stop signals, then unblock them. One that
    came while they were blocked is dropped: an ignored pending signal is discarded. And leave
    when the parent is gone (`die_with_parent`)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    die_with_parent()


def die_with_parent(every_s: float = 1.0) -> None:
    """Leave when the parent process is gone, even in the middle of a call: a thread watches the
    parent's pid. A child that outlived a parent killed with SIGKILL stayed forever, blocked on a
    full result pipe that it holds both ends of itself (a reader of the pool), holding its caller's
    stdout and stderr open (a cron job's pipe never closed). PR_SET_PDEATHSIG would fire when the
    *thread* that started the child ends, and the parent starts children from threads that come
    and go. The parent's pid is the one multiprocessing was started by, not getppid() now: a
    parent killed while the child was still importing has already left it to init."""
    import multiprocessing
    import time

    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None and started_by.pid else os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="gpucli-parent-watch", daemon=True).start()


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
        for sig in self._previous:
            loop.remove_signal_handler(sig)
        if self._previous:
            restore_handlers(self._previous)
        self._previous = {}
