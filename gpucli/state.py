"""What a cron run needs to do only new work: a ledger of inputs, and a lock on the output.

The ledger is SQLite in the sink's state directory (for a Parquet dataset, `DIR/_gpucli/`,
which dataset readers ignore). Per input path: size, mtime_ns, content hash, status, and the
location (part file) holding its current rows. The rules that keep the output exact:

* An input is marked done only after the part holding its rows is durable (renamed and
  fsynced). A part on disk that the ledger does not list was left by a crash between the
  two: it is deleted at the next start, and its inputs, never marked done, are redone.
* When an input is redone (its content changed) or pruned, its old location is recorded as
  stale in the same transaction; stale rows are removed from the sink at the end of the run,
  or at the start of the next one if the run died first. Removal is idempotent.
* A fingerprint of everything that changes the output (task, model and weights, dims,
  chunking, dtype, options) is stored; another fingerprint is an error unless `--full`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpucli.errors import LockedError, UsageError
from gpucli.records import Source

SCHEMA = """
create table if not exists meta (key text primary key, value text);
create table if not exists files (path text primary key, size integer, mtime_ns integer, digest text,
                                  status text, error text, location text, rows integer, updated real);
create table if not exists locations (name text primary key, rows integer, created real);
create table if not exists stale (location text, path text, primary key (location, path));
"""

SEEN = "create temp table if not exists seen (path text primary key)"


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def fingerprint(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Known:
    size: int
    mtime_ns: int
    digest: str
    status: str


class Ledger:
    """Thread-safe: reader threads look up, the writer thread marks done, the loop marks failed."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "ledger.sqlite"
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=full")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- fingerprint ----------------------------------------------------------------------
    def check_fingerprint(self, value: str, full: bool, describe: str) -> bool:
        """True when the output must be rebuilt from scratch (`--full`, or a new output)."""
        with self._lock:
            row = self._db.execute("select value from meta where key='fingerprint'").fetchone()
        if row is not None and row[0] != value and not full:
            raise UsageError(f"this output was made with other settings ({describe} differ from its ledger): "
                             "choose a new --out, or pass --full to rebuild it with the new settings")
        return full or row is None or row[0] != value

    def is_new(self) -> bool:
        with self._lock:
            return self._db.execute("select 1 from meta where key='fingerprint'").fetchone() is None

    def reset(self, value: str) -> None:
        with self._lock, self._db:
            self._db.execute("begin")
            for table in ("files", "locations", "stale", "meta"):
                self._db.execute(f"delete from {table}")
            self._db.execute("insert into meta values ('fingerprint', ?)", (value,))

    # --- lookups --------------------------------------------------------------------------
    def lookup(self, paths: list[str]) -> dict[str, Known]:
        found: dict[str, Known] = {}
        with self._lock:
            for start in range(0, len(paths), 500):
                chunk = paths[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(f"select path, size, mtime_ns, digest, status from files "
                                            f"where path in ({marks})", chunk):
                    found[row[0]] = Known(*row[1:])
        return found

    def locations(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self._db.execute("select name from locations")}

    def stale(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        with self._lock:
            for location, path in self._db.execute("select location, path from stale"):
                out.setdefault(location, set()).add(path)
        return out

    def done_paths(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._db.execute("select path from files where status='done'")]

    # --- what this run's walk saw, for --prune ----------------------------------------------
    # A temporary table of this connection (on disk, gone when the ledger closes): the set of
    # seen paths grows with the tree, so it does not live in the parent's memory.
    def mark_seen(self, paths: list[str]) -> None:
        """Called by reader threads, once per chunk of the walk."""
        with self._lock, self._db:
            self._db.execute(SEEN)
            self._db.execute("begin")
            self._db.executemany("insert or ignore into temp.seen values (?)", ((p,) for p in paths))

    def unseen_done(self) -> list[str]:
        """Inputs done earlier that this run's walk did not find."""
        with self._lock:
            self._db.execute(SEEN)
            return [row[0] for row in self._db.execute(
                "select path from files where status='done' and path not in (select path from temp.seen)")]

    def done_count(self) -> int:
        with self._lock:
            return self._db.execute("select count(*) from files where status='done'").fetchone()[0]

    # --- updates --------------------------------------------------------------------------
    def mark_done(self, sources: list[Source], rows_per_source: list[int], location: str | None) -> None:
        """One transaction, after the location is durable."""
        now = time.time()
        with self._lock, self._db:
            self._db.execute("begin")
            if location is not None:
                self._db.execute("insert or replace into locations values (?, ?, ?)",
                                 (location, sum(rows_per_source), now))
            # Rows an input had elsewhere become stale; then its new record (two statements
            # for the whole part: a part holds up to 10k inputs).
            self._db.executemany("insert or ignore into stale select location, path from files "
                                 "where path=? and location is not null and location != ?",
                                 ((source.path, location or "") for source in sources))
            self._db.executemany("insert or replace into files values (?, ?, ?, ?, 'done', '', ?, ?, ?)",
                                 ((source.path, source.size, source.mtime_ns, source.digest, location, rows, now)
                                  for source, rows in zip(sources, rows_per_source)))

    def mark_unchanged(self, source: Source) -> None:
        """Same content, new mtime (a touch, a copy): remember the new stat to skip faster next time."""
        with self._lock:
            self._db.execute("update files set size=?, mtime_ns=? where path=?",
                             (source.size, source.mtime_ns, source.path))

    def mark_failed(self, path: str, error: str) -> None:
        """A failed input keeps its old rows, if any, until it succeeds again."""
        with self._lock:
            self._db.execute("insert into files (path, status, error, updated) values (?, 'failed', ?, ?) "
                             "on conflict(path) do update set status=case when location is null then 'failed' "
                             "else status end, error=excluded.error, updated=excluded.updated",
                             (path, error, time.time()))

    def prune(self, paths: list[str]) -> None:
        """Forget these inputs; their rows become stale (removed at close), in one transaction."""
        with self._lock, self._db:
            self._db.execute("begin")
            rows = [(path,) for path in paths]
            self._db.executemany("insert or ignore into stale select location, path from files "
                                 "where path=? and location is not null and location != ''", rows)
            self._db.executemany("delete from files where path=?", rows)

    def clear_stale(self, stale: dict[str, set[str]]) -> None:
        with self._lock, self._db:
            self._db.execute("begin")
            for location, paths in stale.items():
                for path in paths:
                    self._db.execute("delete from stale where location=? and path=?", (location, path))

    def forget_location(self, name: str) -> None:
        with self._lock:
            self._db.execute("delete from locations where name=?", (name,))


class RunLock:
    """An exclusive flock on the output: released by the kernel when the holder dies, so a
    stale lock never blocks (it is simply taken over); the file names the holder."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "lock"
        self._fd: int | None = None

    def acquire(self, output: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockedError(f"another gpucli run holds the lock on {output} ({holder}); "
                              "wait for it to finish, or use another --out") from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
