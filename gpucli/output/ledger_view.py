"""An output's ledger, read only: for `--dry-run` and `gpucli inspect`, which must neither wait
for nor disturb a run that may be writing it (no lock, nothing created)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpucli.core.decision import Known, Status
from gpucli.core.errors import DAMAGED_HINT, LedgerDamaged, OutputError, sqlite_error

DONE = Status.DONE.stored


class ReadOnlyLedger:
    """An output's ledger read without the lock (a run may be writing it) and without creating
    anything; empty when there is none. For `--dry-run` and `gpucli inspect`.

    A WAL ledger opened read-only still gets `-wal` and `-shm` files made beside it, so one
    without a `-wal` (closed cleanly: no run is writing it, its rows are all in the main file)
    is opened `immutable`, which makes and locks nothing: the output stays byte for byte as it
    was. With a `-wal` (a run is writing, or one died) both files are there already, and a
    plain read-only open sees what that run committed; so does a second try when a run began
    writing between the look for a `-wal` and the first read. Either way the file's header is
    read at once: a file that is no ledger is said here, not by the first lookup. `check`: read
    the file through first (quick_check, which reads all of it); a damaged file is
    LedgerDamaged, which names it and says what to do."""

    def __init__(self, path: Path, check: bool = True) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        if not path.is_file():
            return
        wal = path.with_name(path.name + "-wal").exists()
        error: sqlite3.Error | None = None
        for options in ([] if wal else ["immutable=1"]) + ["mode=ro"]:
            try:
                self._db = sqlite3.connect(f"{path.resolve().as_uri()}?{options}", uri=True)
                cursor = self._db.execute("pragma quick_check(1)" if check else "select 'ok' from sqlite_master limit 1")
                verdict = (cursor.fetchone() or ("ok",))[0]
                break
            except sqlite3.Error as exc:
                self.close()
                error = exc
        else:
            raise (sqlite_error(error, str(path)) or OutputError(str(path), f"cannot read it: {error}")) from None
        if verdict != "ok":
            self.close()
            raise LedgerDamaged(str(path), verdict, DAMAGED_HINT)

    @property
    def exists(self) -> bool:
        return self._db is not None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def lookup(self, paths: list[str]) -> dict[str, Known]:
        if self._db is None:
            return {}
        found = {}
        version = "version" if self._has_version() else "''"  # a ledger older than bucket inputs: files only
        for path in paths:
            row = self._db.execute(f"select size, mtime_ns, digest, status, {version} from files where path=?",
                                   (path,)).fetchone()
            if row is not None:
                found[path] = Known(row[0], row[1], row[2], Status.of_stored(row[3]), row[4])
        return found

    def _has_version(self) -> bool:
        return any(row[1] == "version" for row in self._db.execute("pragma table_info(files)"))

    def done_paths(self) -> set[str]:
        if self._db is None:
            return set()
        return {row[0] for row in self._db.execute("select path from files where status=?", (DONE,))}

    def meta(self, key: str) -> str | None:
        if self._db is None:
            return None
        row = self._db.execute("select value from meta where key=?", (key,)).fetchone()
        return row[0] if row else None

    def counts(self) -> dict[Status, int]:
        """Inputs per status ({} without a ledger)."""
        if self._db is None:
            return {}
        return {Status.of_stored(status): count
                for status, count in self._db.execute("select status, count(*) from files group by status")}

    def done_rows(self) -> int:
        if self._db is None:
            return 0
        return self._db.execute("select coalesce(sum(rows), 0) from files where status=?", (DONE,)).fetchone()[0]

    def last_update(self) -> float | None:
        """When an input's record last changed (a Unix time), None for an empty ledger."""
        if self._db is None:
            return None
        return self._db.execute("select max(updated) from files").fetchone()[0]
