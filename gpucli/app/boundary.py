"""The command line's boundary: whatever ends a command becomes one line on stderr and an exit code.

Typed errors exit with their own code (gpucli/core/errors.py), Ctrl-C with 130, SIGTERM with
143, a reader that left the pipe with 141, and anything unexpected with 3: a bug, whose
traceback GPUCLI_DEBUG=1 shows (never by default: a log gets one line). The console script then
leaves without the interpreter's teardown, once what an exit must still do is done.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click
import typer

from gpucli.core.errors import EXIT_RUN_FAILED, EXIT_SIGINT, EXIT_SIGTERM, GpucliError
from gpucli.core.signals import STOP_LINES, STOP_SIGNALS, exits_at_once, restore_handlers

EXIT_BROKEN_PIPE = 128 + 13  # what a C tool killed by SIGPIPE exits with (`set -o pipefail` sees it)
EXIT_JOIN_S = 10.0  # what the other threads get to finish once the run has ended and said so
EXIT_HANDLERS_S = 20.0  # what the atexit handlers get, after that


@dataclass
class JsonEnding:
    """With --json, a command that ends before its summary (a usage error, a lock held, a store
    unreachable, a stop during set-up) still prints one JSON object on stdout: the summary's
    fields with its exit code and its one-line error. A service that parses stdout got nothing
    at all from such an end before, and had to scrape stderr."""

    task: str
    model: str = ""
    wanted: bool = False

    def say(self, exit_code: int, message: str) -> None:
        if self.wanted:
            from gpucli.core.summary import RunSummary

            summary = RunSummary(self.task, self.model, exit_code=exit_code, error=message)
            print(json.dumps(summary.to_dict(), ensure_ascii=False), flush=True)


class Terminated(BaseException):
    """SIGTERM outside the engine's own handling (imports, set-up). A BaseException, as
    KeyboardInterrupt is, so that no `except Exception` on the way swallows it."""


@contextmanager
def exit_codes(ending: JsonEnding | None = None) -> Iterator[None]:
    """Whatever ends a command early becomes one line on stderr and its exit code: typed
    errors their own, Ctrl-C 130, SIGTERM 143, anything unexpected 3 (a bug: the traceback
    is shown with GPUCLI_DEBUG=1, never by default); with `ending` (a task's --json), the same as
    one JSON object on stdout. Its extent is the command's: the stops raise inside it
    (`stops_raise`), and exit at once outside it (gpucli.core.signals.exit_at_once)."""
    debug = bool(os.environ.get("GPUCLI_DEBUG"))
    ending = ending or JsonEnding("")

    def end(code: int, message: str) -> typer.Exit:
        error(message)
        ending.say(code, message)
        return typer.Exit(code)

    try:
        with stops_raise():
            yield
    except (typer.Exit, typer.Abort, click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
        raise  # Typer's and Click's own ends (typer.Exit is a RuntimeError): not ours to translate
    except GpucliError as exc:
        if debug:
            raise
        raise end(exc.exit_code, str(exc)) from None
    except KeyboardInterrupt as exc:
        if getattr(exc, "signum", signal.SIGINT) == signal.SIGTERM:  # gpucli.core.signals.Interrupted
            raise end(EXIT_SIGTERM, STOP_LINES[signal.SIGTERM]) from None
        raise end(EXIT_SIGINT, STOP_LINES[signal.SIGINT]) from None
    except Terminated:
        raise end(EXIT_SIGTERM, STOP_LINES[signal.SIGTERM]) from None
    except BrokenPipeError:  # `gpucli search ... | head`: the reader left; not a bug
        _silence_stdout()
        raise typer.Exit(EXIT_BROKEN_PIPE) from None
    except Exception as exc:  # the boundary: a bug becomes exit 3, not a traceback in a log
        if debug:
            raise
        raise end(EXIT_RUN_FAILED, f"internal error: {internal_message(exc)} (a bug in gpucli; rerun with "
                  "GPUCLI_DEBUG=1 for the traceback)") from None


@contextmanager
def stops_raise() -> Iterator[None]:
    """Until the engine installs its handlers (and after it restores them), SIGTERM raises
    `Terminated` and Ctrl-C KeyboardInterrupt, which `exit_codes` turns into exit 143 / 130
    with one line, no traceback, once what was under way has unwound (its `finally`s ran).
    Ctrl-C's handler is replaced only where it is the console script's exit-at-once one: a
    Ctrl-C ignored stays ignored, and Python's own already raises."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    signal.signal(signal.SIGTERM, _raise_terminated)
    if exits_at_once(previous[signal.SIGINT]):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        restore_handlers(previous)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def error(message: str) -> None:
    print(f"gpucli: error: {message}", file=sys.stderr, flush=True)


def internal_message(exc: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line, cut to `limit` characters (a log line, not a dump)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # no real file descriptor (a test runner's buffer)


def exit_without_teardown(exc: SystemExit) -> None:
    """Leave as `sys.exit` would, less the interpreter's teardown of every module (numpy, pyarrow,
    tokenizers...: ~0.3 s after the output was durable, a tenth of a short job's start-up; issue
    34). What an exit must still do is done first: other threads joined, the atexit handlers
    (logging, multiprocessing, executors), the standard streams flushed."""
    code = exc.code
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    _join_threads(EXIT_JOIN_S)
    _leave_after(EXIT_HANDLERS_S, status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`gpucli ... | head`): nothing more to say
            pass
    os._exit(status)


def _leave_after(deadline_s: float, status: int) -> None:
    """The exit handlers get `deadline_s`; then the process leaves without the rest of them.
    They join what multiprocessing left behind (a queue's feeder thread, child processes),
    and one waiting on a pipe that nobody reads would keep a cron job alive forever after
    its outcome was durable and printed (gpucli.engines.reader.ReaderProcesses.close
    now leaves none; this is the net under whatever else a library leaves)."""

    def leave() -> None:
        try:
            print(f"gpucli: note: the exit handlers did not finish within {deadline_s:g}s; leaving "
                  "without them (what the command wrote was complete before they ran)", file=sys.stderr, flush=True)
        finally:
            os._exit(status)

    timer = threading.Timer(deadline_s, leave)
    timer.daemon = True
    timer.start()


def _join_threads(deadline_s: float) -> None:
    """Join the other non-daemon threads, as the interpreter would, but within a deadline: the
    run's outcome is durable and printed by now, and a thread left waiting (an executor's idle
    worker after a sink failed, a send to a dead pipe) must not keep a cron job alive forever
    (a full disk printed its error, then never exited)."""
    end = time.monotonic() + deadline_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, end - time.monotonic()))


def exit_now_after_a_cut_ray_start(code: int) -> None:
    """A run whose private Ray was stopped while it started ends here, without the interpreter's
    finalization, in which Ray's half-started C++ side may crash (gpucli.engines.ray.connection.
    start_was_cut): the output and the ledger are closed and the summary is out by now."""
    connection = sys.modules.get("gpucli.engines.ray.connection")
    if connection is not None and connection.start_was_cut():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
