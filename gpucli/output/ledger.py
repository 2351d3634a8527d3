"""What a cron run needs to do only new work: the ledger of inputs, and its decision per input.

The ledger is SQLite in the sink's state directory (beside the output: `OUT.parquet.gpucli/`,
`OUT.jsonl.gpucli/`; gpucli/output/state_dir.py, which also moves it from where earlier versions kept
it). Per input path: size, mtime_ns, content hash, status, the location (part file) holding
its current rows, and for an object in a bucket its ETag or generation (`version`, gpucli/inputs/stores/;
added to older ledgers when they are opened, '' for files). The rules that keep the output exact:

* An input is marked done only after the part holding its rows is durable (renamed and
  fsynced). A part on disk that the ledger does not list was left by a crash between the
  two: it is deleted at the next start, and its inputs, never marked done, are redone; only
  a part whose footer says gpucli wrote it is such a leftover (a user's file named like a
  part stays, as any file gpucli did not write does, `--full` included).
* When an input is redone (its content changed), fails (its rows were an earlier content's:
  an input is its current rows or one failure record, never both), is skipped (now a link
  that leaves the root) or is pruned, its old location is recorded as stale in the same
  transaction; stale rows are removed from the sink at the end of the run, or at the start
  of the next one if the run died first. Removal is idempotent. A failed input's record holds the failing content's size and mtime,
  so that an unchanged rerun counts it as a known failure.
* A location name the ledger ever listed is never given to new rows: the last committed
  name is kept in `meta` (`last_location`, kept across `--full`), and the sink numbers its
  next place above it, so a crashed write can never pass for a committed one.
* A sink that rewrites an output in place (JSON lines, whose locations are byte ranges)
  renames its locations in the same transaction that records the rewrite as pending
  (`meta.publish`); the rewritten file is complete and fsynced before, and put in place
  after, that commit; an open that finds the mark finishes the job (roll forward).
* `--full` empties the ledger first, in one transaction that sets `meta.resetting`, then the
  sink, then clears the mark: a kill in between leaves the mark, and the next open empties
  the sink again, so no ledger ever says "done" over rows that are gone.
* The settings that made the output are stored with their fingerprint; another fingerprint is
  an error unless `--full` (gpucli/output/fingerprint.py, which also migrates older ledgers).
* A damaged ledger (not a readable SQLite file) is never worked from: an incremental run
  stops naming it (LedgerDamaged), and `--full`, which reads it through first, sets it aside
  (`ledger.sqlite.damaged`) and starts a new one, which empties the output (as above). The
  output's rows are no ledger: they lack the settings, the failures and the stale marks.
* A sink whose store is transactional keeps its ledger there instead (PostgreSQL:
  gpucli/output/sinks/postgres/ledger.py, `Sink.ledger_in_store`): a part's rows, the removal of
  the rows they replace and the ledger entries commit in one transaction (`write_done`), so the
  rules above about orphaned parts and stale rows have nothing left to do.
* Errors of the file system or of the file (full, read-only, I/O) leave every method as one
  OutputError naming the ledger (`_Guarded`); a transaction that failed is rolled back whole.

The decision per input from what the ledger knows is gpucli/core/decision.py; what `--dry-run` and
`gpucli inspect` read through is gpucli/output/ledger_view.py (no lock, nothing created).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gpucli.core.decision import Known, Status
from gpucli.core.errors import OutputError, os_error, sqlite_error
from gpucli.core.records import Failure, Source
from gpucli.output.fingerprint import stamp

SCHEMA = """
create table if not exists meta (key text primary key, value text);
create table if not exists files (path text primary key, size integer, mtime_ns integer, digest text,
                                  status text, error text, location text, rows integer, updated real,
                                  version text not null default '');
create table if not exists locations (name text primary key, rows integer, created real);
create table if not exists stale (location text, path text, primary key (location, path));
create table if not exists attempts (path text primary key, size integer, mtime_ns integer, count integer);
create index if not exists files_digest on files (digest);
"""

SEEN = "create temp table if not exists seen (path text primary key)"
DONE, FAILED = Status.DONE.stored, Status.FAILED.stored  # as `files.status` holds them


def made_with(directory: Path) -> dict | None:
    """The settings an existing output was made with, read without the lock and without creating
    anything (the run's backend is chosen from them before the output is opened): None for a new
    output (no ledger, or none with a fingerprint yet); {} for a ledger that predates stored
    settings (gpucli 0.1). A ledger that cannot be read gives None: opening it says why."""
    path = directory / "ledger.sqlite"
    try:
        if not path.is_file():
            return None
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            meta = dict(db.execute("select key, value from meta where key in ('fingerprint', 'settings')").fetchall())
        finally:
            db.close()
    except (sqlite3.Error, OSError):
        return None
    if "fingerprint" not in meta:
        return None
    try:
        settings = json.loads(meta.get("settings") or "{}")
    except ValueError:
        return {}
    return settings if isinstance(settings, dict) else {}


class _Guarded:
    """The ledger's lock, which also names the ledger in its errors: every statement runs under
    it, so an error the file system or the file caused (disk full, read-only, I/O error, a
    damaged file) leaves any method as one OutputError naming the ledger (errors.sqlite_error);
    any other goes up as it is (a bug)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def __enter__(self) -> _Guarded:
        self._lock.acquire()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self._lock.release()
        if exc is not None:
            translated = _ledger_error(exc, self.path)
            if translated is not None:
                raise translated from exc


def _ledger_error(exc: BaseException, path: Path) -> OutputError | None:
    if isinstance(exc, OutputError):
        return None
    if isinstance(exc, OSError):
        return os_error(exc, str(path))
    return sqlite_error(exc, str(path)) if isinstance(exc, sqlite3.Error) else None


def _add_version_column(db: sqlite3.Connection) -> None:
    """A ledger written before objects in buckets were inputs gets the `version` column ('' for
    every file, which is what a file's Source carries: its decisions stay the same)."""
    if "version" not in {row[1] for row in db.execute("pragma table_info(files)")}:
        db.execute("alter table files add column version text not null default ''")


class _LedgerFile:
    """The ledger's file: the connection, its guard, and the output-wide entries of `meta` (the
    settings, the reset mark). Thread-safe; errors as `_Guarded` says."""

    def __init__(self, directory: Path, gpucli_version: str = "", check: bool = False) -> None:
        """`gpucli_version` (of this process) is stored with the settings: see `_only_new_options`.
        `check`: read every page first (`pragma quick_check`, ~0.1 s per 500k inputs), so that a
        damaged file is found now, not part way through the run."""
        self.gpucli_version = gpucli_version
        self._earlier_rows: bool | None = None  # inputs with rows before this run's first part (mark_done)
        self.path = directory / "ledger.sqlite"
        self._lock = _Guarded(self.path)
        self._db = None
        with self._lock:
            directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                self._db.execute("pragma journal_mode=wal")
                self._db.execute("pragma synchronous=full")
                self._db.executescript(SCHEMA)
                _add_version_column(self._db)
                if check and self._db.execute("pragma quick_check(1)").fetchone()[0] != "ok":
                    raise sqlite3.DatabaseError("pragma quick_check found it damaged")
            except BaseException as exc:
                self._db.close()
                if isinstance(exc, sqlite3.DatabaseError) and not getattr(exc, "sqlite_errorname", ""):
                    exc.sqlite_errorname = "SQLITE_CORRUPT"  # our own check's verdict
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- meta -----------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("select value from meta where key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str | None) -> None:
        with self._lock:
            if value is None:
                self._db.execute("delete from meta where key=?", (key,))
            else:
                self._db.execute("insert or replace into meta values (?, ?)", (key, value))

    def set_metas(self, values: dict[str, str]) -> None:
        """Several meta entries in one transaction (the settings and their fingerprint)."""
        with self._lock, self._db:
            self._db.execute("begin")
            self._db.executemany("insert or replace into meta values (?, ?)", values.items())

    def is_new(self) -> bool:
        with self._lock:
            return self._db.execute("select 1 from meta where key='fingerprint'").fetchone() is None

    def reset(self, settings: dict, resetting: bool = False) -> None:
        """Forget every input, in one transaction. `resetting`: the sink is emptied next, and
        the mark stays until `reset_done` (an open that finds it empties the sink again).
        `last_location` survives: names stay unique within the output for good."""
        with self._lock, self._db:
            self._db.execute("begin")
            for table in ("files", "locations", "stale"):
                self._db.execute(f"delete from {table}")
            self._db.execute("delete from meta where key not in ('last_location')")
            self._db.executemany("insert into meta values (?, ?)", (
                *stamp(settings, self.gpucli_version).items(), *((("resetting", "1"),) if resetting else ())))

    def resetting(self) -> bool:
        return self.meta("resetting") is not None

    def reset_done(self) -> None:
        self.set_meta("resetting", None)


class _SeenPaths(_LedgerFile):
    """What a walk saw, for --prune, and what a watch saw go."""

    # --- what this run's walk saw, for --prune ----------------------------------------------
    # A temporary table of this connection (on disk, gone when the ledger closes): the set of
    # seen paths grows with the tree, so it does not live in the parent's memory.
    def mark_seen(self, paths: list[str]) -> None:
        """Called by reader threads, once per chunk of the walk."""
        with self._lock, self._db:
            self._db.execute(SEEN)
            self._db.execute("begin")
            self._db.executemany("insert or ignore into temp.seen values (?)", ((p,) for p in paths))

    def clear_seen(self) -> None:
        """A watch's next walk of the whole tree starts with nothing seen."""
        with self._lock:
            self._db.execute(SEEN)
            self._db.execute("delete from temp.seen")

    def unseen_done(self) -> list[str]:
        """Inputs done earlier that this run's walk did not find."""
        with self._lock:
            self._db.execute(SEEN)
            return [row[0] for row in self._db.execute(
                "select path from files where status=? and path not in (select path from temp.seen)", (DONE,))]

    def next_pass(self) -> None:
        """A watch's next pass: inputs done by an earlier pass have rows elsewhere (mark_done)."""
        self._earlier_rows = None

    def unseen_at(self, paths: list[str], under: list[str]) -> list[str]:
        """The inputs known at `paths` and under the directories `under` (`d/...`: a range of the
        primary key, '0' being the character after '/') that this walk did not see."""
        query = "select path from files where path >= ? and path < ? and path not in (select path from temp.seen)"
        with self._lock:
            self._db.execute(SEEN)
            return [row[0] for start, end in [*((p, p + "\0") for p in paths), *((d + "/", d + "0") for d in under)]
                    for row in self._db.execute(query, (start, end))]


class Ledger(_SeenPaths):
    """Thread-safe: reader threads look up, the writer thread marks done, failed and unchanged
    (the event loop never writes it: gpucli/output/commit.py).
    Errors of the file system or of the file are OutputError (LedgerDamaged: see `_Guarded`)."""

    # --- lookups --------------------------------------------------------------------------
    def lookup(self, paths: list[str]) -> dict[str, Known]:
        found: dict[str, Known] = {}
        with self._lock:
            for start in range(0, len(paths), 500):
                chunk = paths[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(f"select path, size, mtime_ns, digest, status, version from files "
                                            f"where path in ({marks})", chunk):
                    found[row[0]] = Known(row[1], row[2], row[3], Status.of_stored(row[4]), row[5])
        return found

    def done_with_digests(self, digests: list[str]) -> dict[str, tuple[str, str | None, int]]:
        """digest -> (key, location, rows) of one done input with that content, for the digests
        some done input has (identical content embedded once: gpucli/output/dedup.py)."""
        found: dict[str, tuple[str, str | None, int]] = {}
        with self._lock:
            for start in range(0, len(digests), 500):
                chunk = digests[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(f"select digest, path, location, rows from files where status=? "
                                            f"and digest in ({marks}) order by path", [DONE, *chunk]):
                    found.setdefault(row[0], (row[1], row[2], row[3]))
        return found

    # --- large inputs that a reader may not survive ---------------------------------------
    def begin_attempts(self, sources: list[Source]) -> dict[str, int]:
        """Record that these inputs are being prepared now (committed before the reader starts),
        and return how many earlier attempts at the same content (size and mtime) never ended."""
        earlier: dict[str, int] = {}
        with self._lock, self._db:
            self._db.execute("begin")
            for s in sources:
                row = self._db.execute("select size, mtime_ns, count from attempts where path=?", (s.path,)).fetchone()
                count = row[2] if row and (row[0], row[1]) == (s.size, s.mtime_ns) else 0
                earlier[s.path] = count
                self._db.execute("insert or replace into attempts values (?, ?, ?, ?)",
                                 (s.path, s.size, s.mtime_ns, count + 1))
        return earlier

    def end_attempts(self, paths: list[str]) -> None:
        """The reader came back for these inputs (rows to come, or a failure record)."""
        with self._lock, self._db:
            self._db.execute("begin")
            self._db.executemany("delete from attempts where path=?", ((p,) for p in paths))

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
            return [row[0] for row in self._db.execute("select path from files where status=?", (DONE,))]

    def has_done(self) -> bool:
        with self._lock:
            return bool(self._db.execute("select exists(select 1 from files where status=?)", (DONE,)).fetchone()[0])

    def done_count(self) -> int:
        with self._lock:
            return self._db.execute("select count(*) from files where status=?", (DONE,)).fetchone()[0]

    # --- updates --------------------------------------------------------------------------
    def write_done(self, sink: Any, table: Any, sources: list[Source], rows_per_source: list[int]) -> None:
        """A part: the sink makes it durable, then its inputs are marked done (the first rule above).
        (A ledger in the store itself writes both in one transaction: sinks/postgres/ledger.py.)"""
        self.mark_done(sources, rows_per_source, sink.write(table))

    def mark_done(self, sources: list[Source], rows_per_source: list[int], location: str | None) -> None:
        """One transaction, after the location is durable."""
        now = time.time()
        with self._lock, self._db:
            self._db.execute("begin")
            if location is not None:
                self._db.execute("insert or replace into locations values (?, ?, ?)",
                                 (location, sum(rows_per_source), now))
                self._db.execute("insert or replace into meta values ('last_location', ?)", (location,))
            # Rows an input had elsewhere become stale; then its new record (two statements
            # for the whole part: a part holds up to 10k inputs). An input has rows elsewhere
            # only from an earlier run: when none had a location at this run's first part (a
            # first run), the lookup per input is skipped.
            if self._earlier_rows is None:
                self._earlier_rows = self._db.execute(
                    "select exists(select 1 from files where location is not null)").fetchone()[0] == 1
            if self._earlier_rows:
                self._db.executemany("insert or ignore into stale select location, path from files "
                                     "where path=? and location is not null and location != ?",
                                     ((source.path, location or "") for source in sources))
            self._db.executemany("insert or replace into files (path, size, mtime_ns, digest, status, error, "
                                 "location, rows, updated, version) values (?, ?, ?, ?, ?, '', ?, ?, ?, ?)",
                                 ((source.path, source.size, source.mtime_ns, source.digest, DONE, location, rows, now,
                                   source.version) for source, rows in zip(sources, rows_per_source)))

    def mark_unchanged(self, sources: list[Source]) -> None:
        """Same content (a touch, a copy: maybe a new mtime): remember the stat to skip faster
        next time. One transaction per read chunk; rows whose stat is the same are not written."""
        with self._lock, self._db:
            self._db.execute("begin")
            self._db.executemany("update files set size=?, mtime_ns=?, version=? where path=? "
                                 "and (size!=? or mtime_ns!=? or version!=?)",
                                 ((s.size, s.mtime_ns, s.version, s.path, s.size, s.mtime_ns, s.version)
                                  for s in sources))

    def mark_failed(self, failures: list[Failure]) -> int:
        """One transaction for all: each input is failed with its content's size and mtime, and
        the rows it had (an earlier version's) become stale, removed at close like a changed
        input's: an input ends as its current rows or one failure record, never both, and a
        failure's stat is the failing content's, so an unchanged rerun knows it. Returns how many
        are known failures: failed before, with the same size and mtime (unchanged)."""
        if not failures:
            return 0
        known, now = 0, time.time()
        with self._lock, self._db:
            self._db.execute("begin")
            for f in failures:
                row = self._db.execute("select status, size, mtime_ns from files where path=?", (f.path,)).fetchone()
                known += row is not None and row[0] == FAILED and (row[1], row[2]) == (f.size, f.mtime_ns)
                self._db.execute("insert or ignore into stale select location, path from files "
                                 "where path=? and location is not null and location != ''", (f.path,))
                self._db.execute("insert or replace into files (path, size, mtime_ns, status, error, updated) "
                                 "values (?, ?, ?, ?, ?, ?)", (f.path, f.size, f.mtime_ns, FAILED, f.error, now))
        return known

    def prune(self, paths: list[str]) -> None:
        """Forget these inputs; their rows become stale (removed at close), in one transaction."""
        with self._lock, self._db:
            self._db.execute("begin")
            rows = [(path,) for path in paths]
            self._db.executemany("insert or ignore into stale select location, path from files "
                                 "where path=? and location is not null and location != ''", rows)
            self._db.executemany("delete from files where path=?", rows)

    def forget(self, paths: list[str]) -> list[str]:
        """`prune` of the paths the ledger knows (a skip record's path: usually none); returns them."""
        with self._lock:
            known = [path for path in paths
                     if self._db.execute("select 1 from files where path=?", (path,)).fetchone() is not None]
        if known:
            self.prune(known)
        return known

    def clear_stale(self, stale: dict[str, set[str]]) -> None:
        with self._lock, self._db:
            self._db.execute("begin")
            for location, paths in stale.items():
                for path in paths:
                    self._db.execute("delete from stale where location=? and path=?", (location, path))

    def rename_locations(self, renamed: dict[str, str | None], stale: dict[str, set[str]] | None = None,
                         publish: str | None = None) -> None:
        """One transaction: the sink moved rows (old name -> new name; None: no rows left);
        `stale` entries were applied (cleared); `publish` marks the rewrite still to put in place.
        Two names may become one (a merge). An input whose current rows share their location
        with its stale rows cannot keep them apart: it is forgotten, so it is redone."""
        with self._lock, self._db:
            self._db.execute("begin")
            for location, paths in (stale or {}).items():
                self._db.executemany("delete from stale where location=? and path=?",
                                     ((location, path) for path in paths))
            moves = [(old, new) for old, new in renamed.items() if old != new]
            for step, (old, new) in itertools.product((0, 1), moves):  # via temporary names: no clashes
                self._move(f"(moving) {old}" if step else old, new if step else f"(moving) {old}")
            self._db.execute("delete from files where exists (select 1 from stale s "
                             "where s.path=files.path and s.location=files.location)")
            if publish is not None:
                self._db.execute("insert or replace into meta values ('publish', ?)", (publish,))

    def _move(self, old: str, new: str | None) -> None:
        db = self._db
        if new is None:
            db.execute("delete from locations where name=?", (old,))
            db.execute("update files set location=null where location=?", (old,))
            db.execute("delete from stale where location=?", (old,))
            return
        rows = db.execute("select coalesce(sum(rows), 0), min(created) from locations where name in (?, ?)",
                          (old, new)).fetchone()
        db.execute("delete from locations where name in (?, ?)", (old, new))
        db.execute("insert into locations values (?, ?, ?)", (new, rows[0], rows[1]))
        db.execute("update files set location=? where location=?", (new, old))
        db.execute("update or ignore stale set location=? where location=?", (new, old))
        db.execute("delete from stale where location=?", (old,))
