"""One connection to the PostgreSQL server, the run's advisory lock on it, and every statement
gpucli sends, in transactions that are retried whole.

A run holds one connection (psycopg 3, autocommit: each `transaction` is one explicit
transaction). The writer's thread and the reader threads (ledger lookups) share it under a
lock, one transaction at a time. What can fail and what it becomes:

* the server refuses who we are (a wrong password, no such database, no privilege): UsageError
  (exit 2), one line, never the password;
* the server cannot be reached, or the connection drops (a restart, a network cut): the whole
  transaction is tried again on a new connection, with backoff, within a budget
  (GPUCLI_PG_RETRIES attempts, default 6; GPUCLI_PG_RETRY_S seconds, default 30;
  GPUCLI_PG_BACKOFF_S first pause, default 0.5); then RunFailedError (exit 3). A transaction that
  was cut off is rolled back by the server, and every transaction gpucli retries is idempotent;
* anything else the server says (a statement timeout, a full disk): RunFailedError (exit 3):
  what committed before is whole, and a rerun finishes the rest.

The run's lock is a session advisory lock keyed by the output's schema.table: a second writer
finds it taken and exits 75 at once; the server releases it when the session ends (a killed
run holds nothing). A new connection after a drop takes it again before any statement.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpucli.core.errors import RERUN_HINT, GpucliError, LockedError, RunFailedError, UsageError
from gpucli.output.sinks.postgres.target import Target

T = TypeVar("T")
INSTALL = "pip install 'gpucli[postgres]'"
FINAL_CLASSES = ("28", "3D", "42")  # who we are, no such database, no privilege: the command must change
RETRIED_STATES = {"40001", "40P01", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004"}


@dataclass(frozen=True)
class Retry:
    attempts: int = 6
    budget_s: float = 30.0
    backoff_s: float = 0.5
    max_pause_s: float = 8.0

    @classmethod
    def from_env(cls) -> Retry:
        values: dict[str, Any] = {}
        for attr, name, kind in (("attempts", "RETRIES", int), ("budget_s", "RETRY_S", float),
                                 ("backoff_s", "BACKOFF_S", float)):
            raw = os.environ.get(f"GPUCLI_PG_{name}")
            if raw is not None:
                try:
                    values[attr] = kind(raw)
                except ValueError:
                    raise UsageError(f"GPUCLI_PG_{name}: {raw!r} is not a valid {kind.__name__}") from None
        return cls(**values)

    def pause(self, attempt: int) -> float:
        return min(self.max_pause_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def psycopg_module() -> Any:
    """psycopg, or a UsageError naming the extra that brings it."""
    try:
        import psycopg
    except ImportError:
        raise UsageError(f"a PostgreSQL output needs psycopg, which the postgres extra installs: {INSTALL}") from None
    return psycopg


class Store:
    """The connection (made on first use, made again after a drop) and its lock."""

    def __init__(self, target: Target, lock: bool = False, retry: Retry | None = None) -> None:
        self.target = target
        self.retry = retry or Retry.from_env()
        self.locking = lock  # take the run's advisory lock on every new connection
        self._conn: Any = None
        self._guard = threading.RLock()
        self.psycopg = psycopg_module()

    # --- transactions ---------------------------------------------------------------------------
    def transaction(self, doing: str, work: Callable[[Any], T]) -> T:
        """`work(cursor)` in one transaction, tried again whole on a new connection while the server
        cannot be reached (the module's docstring)."""
        started, attempt = time.monotonic(), 0
        with self._guard:
            while True:
                attempt += 1
                try:
                    conn = self._connected()
                    with conn.transaction(), conn.cursor() as cursor:
                        return work(cursor)
                except self.psycopg.Error as exc:
                    if not self._transient(exc):
                        raise self.error(exc, doing) from None
                    self._drop()
                    spent = time.monotonic() - started
                    if attempt >= self.retry.attempts or spent >= self.retry.budget_s:
                        raise RunFailedError(f"{self.target.display}: {doing}: the server did not answer after "
                                             f"{attempt} attempts in {spent:.0f} s ({first_line(exc)}); "
                                             f"{RERUN_HINT}") from None
                    time.sleep(self.retry.pause(attempt))

    def _transient(self, exc: Exception) -> bool:
        state = getattr(exc, "sqlstate", None)
        if state in RETRIED_STATES:
            return True
        if state is not None:
            return False
        return isinstance(exc, self.psycopg.OperationalError) and not _refused_who(exc)

    def error(self, exc: Exception, doing: str) -> GpucliError:
        state = getattr(exc, "sqlstate", None) or ""
        if state[:2] in FINAL_CLASSES or _refused_who(exc):
            return UsageError(f"--out {self.target.display}: {doing}: {first_line(exc)}")
        return RunFailedError(f"{self.target.display}: {doing}: {first_line(exc)}"
                              + (f" [{state}]" if state else "") + f"; {RERUN_HINT}")

    # --- the connection and its lock ------------------------------------------------------------
    def connect(self) -> None:
        """Connect now (retried as a transaction is): a wrong password is said before any work."""
        self.transaction("connecting", lambda cursor: None)

    def _connected(self) -> Any:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._drop()
        conn = self.psycopg.connect(self.target.conninfo, autocommit=True, application_name=_application_name())
        try:
            if self.locking:
                self._lock(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _lock(self, conn: Any) -> None:
        key = f"gpucli:{self.target.qualified}"
        taken = conn.execute("select pg_try_advisory_lock(hashtext('gpucli'), hashtext(%s))", (key,)).fetchone()[0]
        if not taken:
            holder = conn.execute(
                "select a.application_name, a.client_addr, a.backend_start from pg_locks l join pg_stat_activity a "
                "on a.pid = l.pid where l.locktype = 'advisory' and l.classid::int = hashtext('gpucli') "
                "and l.objid::int = hashtext(%s) limit 1", (key,)).fetchone()
            who = f"{holder[0] or 'a session'}, since {holder[2]:%Y-%m-%d %H:%M:%S}" if holder else "another session"
            raise LockedError(f"another gpucli run holds the lock on {self.target.display} ({who}); wait for it "
                              "to finish, or use another table")

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
                pass

    def close(self) -> None:
        """Ends the session: the server releases the advisory lock with it."""
        with self._guard:
            self._drop()


def _refused_who(exc: Exception) -> bool:
    """libpq's own words for a refusal of who we are or where (no SQLSTATE before the session)."""
    text = str(exc).lower()
    return any(mark in text for mark in ("password authentication failed", "does not exist", "no password supplied",
                                         "authentication failed", "no pg_hba.conf entry", "role \"",
                                         "invalid connection option", "invalid uri", "invalid sslmode"))


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _application_name() -> str:
    return f"gpucli pid {os.getpid()} on {socket.gethostname()}"[:63]
