"""Calls that may never end: run in child processes, each call under a time limit and a memory cap.

Why: document extraction runs third-party parsers (PDFium, lxml, zip readers) on whatever files
a tree holds, and one hostile or pathological file can loop, or eat memory, inside C code that
no Python timeout can interrupt, in a thread that cannot be stopped. In a child process it can:
past its time limit the child is killed (and replaced on the next call), the file becomes a
failure record, and the run goes on. A memory cap (RLIMIT_AS) turns a decompression bomb into a
MemoryError in the child instead of the host's OOM killer choosing a victim. The children also
spread CPU-bound extraction over the host's cores while the parent's threads only wait.

Each child has its own Pipe: a process killed while it holds a shared queue's read lock wedges the
others (measured with the workers: SIGKILL of one wedged the others in 3 of 4 trials). Several
threads may call `map` at once: the idle children are shared, each call keeps as many of them
busy as it has calls left. Children start on first use, ignore the stop signals (the parent stops
the run), and leave when the parent is gone (EOF on their Pipe when idle; a thread that watches
the parent's pid when busy).

What crosses a Pipe is typed, as the worker protocol's messages are (core/records.py): a call is
a frozen dataclass that the child's handler dispatches with `match` (gpucli/inputs/documents/calls.py
for the documents'), the reply one of `Returned`, `Refused` (an InputError, its stage kept),
`OutOfMemory`, `Crashed`, and an idle child leaves on `Stop`. The handler is a module-level function,
pickled by reference: a move that breaks it fails at the import of its module, not at run time
in a child.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage

# Processes of one run that each keep a pool (reader processes): a pool's default size is its share of
# the cores, so that the children never outnumber the cores several times over.
SHARING_CORES = 1


def default_size() -> int:
    from gpucli.models.devices import host_cores

    return max(1, host_cores() // max(1, SHARING_CORES))


@dataclass(frozen=True)
class Stop:
    """To an idle child: leave."""


@dataclass(frozen=True)
class Returned:
    """The call's return value."""

    value: Any


@dataclass(frozen=True)
class Refused:
    """The call raised an InputError: the input fails with this stage and reason."""

    stage: Stage
    reason: str


@dataclass(frozen=True)
class OutOfMemory:
    """The call ran into the child's memory cap (a MemoryError)."""


@dataclass(frozen=True)
class Crashed:
    """The call raised anything else (a parser's bug): `error` names it, in one line."""

    error: str


Reply = Returned | Refused | OutOfMemory | Crashed


@dataclass(frozen=True)
class Limits:
    """What one call may take. `timeout_s` is wall time from the moment the child got the call."""

    timeout_s: float = 120.0
    memory_mb: int = 4096  # address space of a child (its libraries included)

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("the time limit must be above 0 seconds")


class _Child:
    """One child process and the parent's end of its Pipe."""

    def __init__(self, handler: Callable[[Any], Any], limits: Limits) -> None:
        import multiprocessing as mp

        from gpucli.core.signals import held_from_children

        context = mp.get_context("spawn")
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_child_main, args=(child_conn, handler, limits.memory_mb),
                                       name="gpucli-extract", daemon=False)
        with held_from_children():  # no stop signal lands in the child before it ignores them
            self.process.start()
        child_conn.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        """An idle child: asked to leave, killed if it does not at once."""
        try:
            self.conn.send(Stop())
        except OSError:
            pass
        self.process.join(1)
        self.kill()


class Sandbox:
    """`handler` (a module-level function, which dispatches on its call's type) run on calls in
    up to `size` children, each call under `limits`."""

    def __init__(self, handler: Callable[[Any], Any], size: int, limits: Limits) -> None:
        from multiprocessing import util

        self.handler, self.size, self.limits = handler, max(1, size), limits
        self._idle: list[_Child] = []
        self._alive: set[_Child] = set()  # idle or busy
        self._started = 0  # children alive or starting
        self._free = threading.Condition()
        self._closed = False
        # before multiprocessing joins the children at exit (it runs finalizers first)
        self._finalizer = util.Finalize(self, Sandbox.close, args=(self,), exitpriority=10)

    def map(self, calls: list[Any]) -> list[Any]:
        """Each call's return value, or the `InputError` it raised, ran out of time or memory
        with, or died of, in the order of `calls`."""
        from multiprocessing.connection import wait

        results: list[Any] = [None] * len(calls)
        pending = deque(range(len(calls)))
        running: dict[_Child, tuple[int, float]] = {}
        while pending or running:
            while pending:
                child = self._take(wait_for_one=not running)
                if child is None:
                    break
                i = pending.popleft()
                if self._send(child, calls[i]):
                    running[child] = (i, time.monotonic() + self.limits.timeout_s)
                else:
                    pending.appendleft(i)
                    self._lost(child)
            if not running:
                continue
            deadline = min(d for _, d in running.values())
            ready = set(wait([c.conn for c in running] + [c.process.sentinel for c in running],
                             timeout=max(0.0, deadline - time.monotonic())))
            for child, (i, due) in list(running.items()):
                if child.conn in ready or child.process.sentinel in ready:
                    results[i] = self._receive(child)
                    del running[child]
                elif time.monotonic() >= due:
                    results[i] = InputError(Stage.DECODE, f"took over {self.limits.timeout_s:g} s to extract, "
                                                      "stopped (--extract-timeout raises the limit)")
                    del running[child]
                    self._lost(child)
        return results

    def _send(self, child: _Child, call: Any) -> bool:
        try:
            child.conn.send(call)
            return True
        except (OSError, ValueError):  # died while idle
            return False

    def _receive(self, child: _Child) -> Any:
        """The answer of a child that spoke or died; a child that died is replaced later."""
        try:
            if child.conn.poll():
                reply = child.conn.recv()
                self._give_back(child)
                return outcome(reply, self.limits)
        except (EOFError, OSError):
            pass
        child.process.join(1)
        code = child.process.exitcode
        self._lost(child)
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return InputError(Stage.DECODE, f"the extractor process died ({how}) on this file; a malformed or hostile "
                                    "document?")

    # --- the shared children ------------------------------------------------------------------
    def _take(self, wait_for_one: bool) -> _Child | None:
        """An idle child (started if there is room); with `wait_for_one`, waits for one."""
        with self._free:
            while True:
                if self._closed:
                    raise RuntimeError("the extraction pool was closed while in use (the run is stopping)")
                if self._idle:
                    return self._idle.pop()
                if self._started < self.size:
                    self._started += 1
                    break
                if not wait_for_one:
                    return None
                self._free.wait()
        try:
            child = _Child(self.handler, self.limits)
        except BaseException:
            with self._free:
                self._started -= 1
                self._free.notify()
            raise
        with self._free:
            self._alive.add(child)
        return child

    def _give_back(self, child: _Child) -> None:
        with self._free:
            if self._closed:
                self._alive.discard(child)
                child.stop()
                return
            self._idle.append(child)
            self._free.notify()

    def _lost(self, child: _Child) -> None:
        child.kill()
        with self._free:
            self._alive.discard(child)
            self._started -= 1
            self._free.notify()

    def close(self) -> None:
        """Stop the idle children and kill the busy ones: at exit (a stopped run) nothing waits
        for a file still being extracted; a call still waiting on one gets a failure for it."""
        with self._free:
            self._closed, idle, self._idle = True, self._idle, []
            busy = self._alive - set(idle)
            self._alive = set()
            self._free.notify_all()
        for child in idle:
            child.stop()
        for child in busy:
            if child.process.is_alive():
                child.process.kill()
            child.process.join(5)
        self._finalizer.cancel()  # closed: the exit hook need not hold this pool any longer


def outcome(reply: Reply, limits: Limits) -> Any:
    """What `map` gives for a child's reply: the value, or the input's InputError."""
    match reply:
        case Returned(value=value):
            return value
        case Refused(stage=stage, reason=reason):
            return InputError(stage, reason)
        case OutOfMemory():
            return InputError(Stage.DECODE, f"needed over {limits.memory_mb} MiB of memory to extract; not read")
        case Crashed(error=error):
            return InputError(Stage.DECODE, f"the extractor failed: {error}")
    raise TypeError(f"a child answered {reply!r}, which is no reply. This is a bug.")


# --- inside a child ----------------------------------------------------------------------------

def _child_main(conn: Any, handler: Callable[[Any], Any], memory_mb: int) -> None:
    from gpucli.core.signals import leave_to_parent

    leave_to_parent()  # and die with the parent
    _cap_memory(memory_mb)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        match message:
            case Stop():
                return
            case call:
                conn.send(answer(handler, call))


def answer(handler: Callable[[Any], Any], call: Any) -> Reply:
    """In a child: the handler's reply to one call."""
    try:
        return Returned(handler(call))
    except InputError as exc:
        return Refused(exc.stage, str(exc))
    except MemoryError:
        return OutOfMemory()
    except Exception as exc:  # noqa: BLE001 - a parser's bug costs one file, never the run
        text = str(exc).strip().splitlines()
        return Crashed(f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": "))


def _cap_memory(memory_mb: int) -> None:
    try:
        import resource

        limit = memory_mb << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):  # not on this platform: the time limit still holds
        pass
