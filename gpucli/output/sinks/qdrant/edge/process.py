"""A run's embedded collection in a process of its own: an EdgeClient in a child, its calls
(protocol.py) forwarded over a pipe as typed messages.

Why: Qdrant Edge's Python binding holds the GIL for every call and converts each payload value
on its own (~2-3 us a string; with gpucli's payload, 33 us of CPU a point in all, 21 of them
building the points). In the run's own process that time is taken from its reader and batcher
threads, which share the GIL: at 100k points the run's process spent 9.2-9.9 s of CPU where a
Parquet run's spends 4.3-4.9 s; with this child, 4.3 s (benchmarks/RESULTS-qdrant.md). The
child runs beside the run, on another core; the parent sends a write's rows as Arrow buffers
and waits on the pipe with the GIL released.

`gpucli search` and `gpucli snapshot` keep their EdgeClient in their own process: one query
needs no second interpreter.

The child: started with the stop signals held, then ignoring them (a Ctrl-C or SIGTERM is the
parent's to decide, gpucli/core/signals.py: the parent closes the sink, which ends the child).
It opens the storage and holds its lock (a LockedError comes back before any work); it ends at
once when the parent's end of the pipe closes (the parent died), as a killed process would: what
the flushes made durable stays, and the lock goes with it. An index build stays in the indexer's
own process (indexer.py), which a Ctrl-C stops.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gpucli.core.errors import GpucliError, LockedError, OutputError, RunFailedError, UsageError
from gpucli.output.sinks.qdrant.edge import files
from gpucli.output.sinks.qdrant.edge.client import EdgeClient, move_local_mode
from gpucli.output.sinks.qdrant.protocol import Described, Found, NewCollection, Rows, Search, Selection
from gpucli.output.sinks.qdrant.target import Target


class Method(Enum):
    """The calls of protocol.Client the child answers (its EdgeClient's methods of that name)."""

    EXISTS = "exists"
    DESCRIBE = "describe"
    CREATE = "create"
    SET_METADATA = "set_metadata"
    DROP = "drop"
    UPSERT = "upsert"
    PRESENT = "present"
    DELETE = "delete"
    SEARCH = "search"
    SAMPLE_PAYLOAD = "sample_payload"
    FLUSH = "flush"
    INDEX = "index"


@dataclass(frozen=True)
class Open:
    """The first message: the collection to open; the answer is the notices of opening it."""

    target: Target


@dataclass(frozen=True)
class Call:
    method: Method
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Close:
    """The last message: close the shard (flushed) and end."""


@dataclass(frozen=True)
class Answer:
    value: Any = None


class ErrorKind(Enum):
    FAILED = "failed"  # GpucliError: exit 1
    USAGE = "usage"  # exit 2
    LOCKED = "locked"  # exit 75
    RUN_FAILED = "run_failed"  # exit 3
    OUTPUT = "output"  # the file system: exit 3


@dataclass(frozen=True)
class Refusal:
    """An error of the child's EdgeClient as it crosses the pipe (an exception whose __init__
    takes other arguments than its `args` does not unpickle), rebuilt by the parent."""

    kind: ErrorKind
    message: str
    path: str = ""
    cause: str = ""
    hint: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> Refusal:
        if isinstance(exc, OutputError):
            return cls(ErrorKind.OUTPUT, str(exc), exc.path, exc.cause, exc.hint)
        for kind, error in ((ErrorKind.USAGE, UsageError), (ErrorKind.LOCKED, LockedError),
                            (ErrorKind.RUN_FAILED, RunFailedError), (ErrorKind.FAILED, GpucliError)):
            if isinstance(exc, error):
                return cls(kind, str(exc))
        return cls(ErrorKind.FAILED, f"the Qdrant Edge process failed: {type(exc).__name__}: {exc}. This is a bug.")

    def error(self) -> GpucliError:
        match self.kind:
            case ErrorKind.OUTPUT:
                return OutputError(self.path, self.cause, self.hint)
            case ErrorKind.USAGE:
                return UsageError(self.message)
            case ErrorKind.LOCKED:
                return LockedError(self.message)
            case ErrorKind.RUN_FAILED:
                return RunFailedError(self.message)
        return GpucliError(self.message)


class EdgeProcess:
    """protocol.Client for the embedded collection `target`, answered by an EdgeClient in a child
    process; calls are made one at a time (the writer awaits each)."""

    def __init__(self, target: Target) -> None:
        import multiprocessing as mp

        from gpucli.core.signals import held_from_children

        self.target = target
        self.shard_dir = files.shard_dir(target.path, target.collection)
        self.notices = move_local_mode(target)  # here: qdrant-client's warnings become this run's notes
        self._calling = threading.Lock()
        context = mp.get_context("spawn")
        self._conn, child_end = context.Pipe(duplex=True)
        self._child = context.Process(target=serve, args=(child_end,), daemon=True,
                                      name=f"gpucli-qdrant-edge-{target.collection}")
        # Ended however this object goes: closed, collected, or left at exit (then before multiprocessing
        # joins its children, which would wait forever on a child that ignores SIGTERM and waits for a call)
        self._ended = weakref.finalize(self, _end, self._conn, self._child)
        try:
            with held_from_children():
                self._child.start()
            child_end.close()
            self.notices += self._ask(Open(target))
        except BaseException:
            self._ended()
            raise

    def _ask(self, message: Open | Call | Close) -> Any:
        with self._calling:
            try:
                self._conn.send(message)
                reply = self._conn.recv()
            except (EOFError, OSError):
                self._child.join(5)
                raise GpucliError(f"{self.target.display}: the Qdrant Edge process ended unexpectedly (exit code "
                                  f"{self._child.exitcode}); what was written stays, a rerun resumes") from None
        if isinstance(reply, Refusal):
            raise reply.error()
        return reply.value

    def exists(self) -> bool:
        return self._ask(Call(Method.EXISTS))

    def describe(self) -> Described:
        return self._ask(Call(Method.DESCRIBE))

    def create(self, new: NewCollection) -> None:
        self._ask(Call(Method.CREATE, (new,)))

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._ask(Call(Method.SET_METADATA, (metadata,)))

    def drop(self) -> None:
        self._ask(Call(Method.DROP))

    def upsert(self, rows: Rows) -> None:
        self._ask(Call(Method.UPSERT, (rows,)))

    def present(self, ids: list[str]) -> set[str]:
        return self._ask(Call(Method.PRESENT, (ids,)))

    def delete(self, selection: Selection) -> None:
        self._ask(Call(Method.DELETE, (selection,)))

    def search(self, search: Search) -> list[Found]:
        return self._ask(Call(Method.SEARCH, (search,)))

    def sample_payload(self, keys: list[str]) -> dict[str, Any] | None:
        return self._ask(Call(Method.SAMPLE_PAYLOAD, (keys,)))

    def flush(self) -> None:
        self._ask(Call(Method.FLUSH))

    def index(self) -> bool:
        return self._ask(Call(Method.INDEX))

    def close(self) -> None:
        """The child closes its shard and ends; then the storage's lock is released."""
        try:
            if self._ended.alive and self._child.is_alive():
                self._ask(Close())
        finally:
            self._ended()


def _end(conn: Any, child: Any) -> None:
    """Close the pipe (a child still waiting for a call ends on it) and wait for the child: the
    storage's lock goes with it."""
    conn.close()
    if child.pid is not None:
        child.join(30)
        if child.is_alive():  # a shard that would not close: the WAL keeps what was flushed
            child.kill()
            child.join()


def serve(conn: Any) -> None:
    """The child: open the collection, answer calls until Close or until the parent is gone."""
    from gpucli.core.signals import leave_to_parent

    leave_to_parent()
    served = _Served()
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the parent is gone: end as it did, keeping what was flushed
                os._exit(0)
            try:
                reply: Answer | Refusal = Answer(served.close() if isinstance(message, Close)
                                                 else served.handle(message))
            except BaseException as exc:  # noqa: BLE001 - every error goes back to the parent, typed
                reply = Refusal.of(exc)
            conn.send(reply)
            if isinstance(message, Close):
                return
    finally:
        served.close()


class _Served:
    """The child's EdgeClient, once `Open` came."""

    def __init__(self) -> None:
        self.client: EdgeClient | None = None

    def handle(self, message: Open | Call) -> Any:
        match message:
            case Open(target=target) if self.client is None:
                self.client = EdgeClient(target)  # the storage locked by this process, while it lives
                return self.client.notices
            case Call(method=method, args=args) if self.client is not None:
                return getattr(self.client, method.value)(*args)
        raise GpucliError(f"the Qdrant Edge process got {message!r} out of turn. This is a bug.")

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()
