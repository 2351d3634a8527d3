"""The ledger of a PostgreSQL output, in the same database as its rows: what makes it exactly-once
by construction.

The same entries as the SQLite ledger (gpucli/output/ledger.py), in four tables of the output's
schema shared by every gpucli output there, keyed by the output's `schema.table`:
`gpucli_inputs` (an input's size, mtime, digest, status, rows), `gpucli_meta` (the settings and
their fingerprint, the reset mark), `gpucli_attempts`, and `gpucli_seen` (what this run's walk
found, for --prune; it survives a dropped connection, which a temporary table would not).

Where the SQLite ledger follows the rules at the top of ledger.py to keep a part file and its
ledger entries in step, here one transaction holds them together:

* a part (`write_done`): the old rows of its inputs done before (a changed file, a redone record),
  its new rows (COPY), and their ledger entries;
* failure records (`mark_failed`): the rows their inputs had, and their entries;
* `prune`: the rows of the inputs no longer found, and their entries.

So no row is ever stale and no location is ever orphaned: `stale` is always empty, and a kill, a
dropped connection or a server restart at any moment leaves each input's rows whole or absent,
with an entry that says which. Every transaction is idempotent, so the store may try it again.
"""

from __future__ import annotations

import time
from typing import Any

from gpucli.core.decision import Known, Status
from gpucli.core.keys import split_key
from gpucli.core.records import Failure, Source
from gpucli.output.fingerprint import stamp
from gpucli.output.sinks.postgres.store import Store

DONE, FAILED = Status.DONE.stored, Status.FAILED.stored
TABLES = """
create table if not exists {s}.gpucli_inputs (output text, path text, size bigint, mtime_ns bigint, digest text,
    status text, error text, rows integer, updated double precision, version text not null default '',
    primary key (output, path));
create index if not exists gpucli_inputs_digest on {s}.gpucli_inputs (output, digest);
create table if not exists {s}.gpucli_meta (output text, key text, value text, primary key (output, key));
create table if not exists {s}.gpucli_attempts (output text, path text, size bigint, mtime_ns bigint, count integer,
    primary key (output, path));
create table if not exists {s}.gpucli_seen (output text, path text, primary key (output, path));
"""


class RowsTable:
    """What the ledger asks of the sink's table inside its transactions (sink.py: PostgresSink)."""

    def copy(self, cursor: Any, table: Any) -> None: ...

    def delete_keys(self, cursor: Any, keys: list[str]) -> None: ...


class _WatchQueries:
    """What a watch asks of the ledger beside a run's (gpucli/output/watching.py), as the SQLite ledger's."""

    def next_pass(self: Any) -> None:
        pass  # write_done looks up each input's earlier rows itself

    def clear_seen(self: Any) -> None:
        self.close()  # a watch's next walk of the whole tree: this output's walk forgotten, as at the close

    def unseen_at(self: Any, paths: list[str], under: list[str]) -> list[str]:
        return [r[0] for r in self._run("reading the ledger", lambda c: c.execute(
            f"select path from {self.t['inputs']} i where output=%s and (path = any(%s) or exists (select 1 from "
            "unnest(%s::text[]) d where left(path, length(d) + 1) = d || '/')) and not exists (select 1 from "
            f"{self.t['seen']} s where s.output=i.output and s.path=i.path)", (self.output, paths, under)).fetchall())]


class PgLedger(_WatchQueries):
    """The Ledger's methods (gpucli/output/ledger.py), each one transaction of the store."""

    def __init__(self, store: Store, rows: RowsTable, gpucli_version: str = "", create: bool = True) -> None:
        """`create` False: what only reads it (--dry-run) creates nothing; `exists` says if there is one."""
        self.store, self.rows = store, rows
        self.gpucli_version = gpucli_version
        self.output = store.target.qualified
        self.path = store.target.display  # named in messages, as the SQLite ledger's file is
        s = store.target.schema
        self.t = {name: f"{s}.gpucli_{name}" for name in ("inputs", "meta", "attempts", "seen")}

        def create_tables(cursor: Any) -> None:
            cursor.execute("select pg_advisory_xact_lock(hashtext('gpucli'), hashtext('gpucli:ledger tables'))")
            cursor.execute(f"create schema if not exists {s}")
            for statement in filter(str.strip, TABLES.format(s=s).split(";")):
                cursor.execute(statement)
            cursor.execute(f"delete from {self.t['seen']} where output=%s", (self.output,))

        if create:
            store.transaction("creating the ledger tables", create_tables)
            self.exists = True
        else:
            self.exists = store.transaction("reading the ledger", lambda c: c.execute(
                "select to_regclass(%s) is not null", (self.t["meta"],)).fetchone()[0]) and not self.is_new()

    def _run(self, doing: str, work: Any) -> Any:
        return self.store.transaction(doing, work)

    def close(self) -> None:
        self._run("clearing the walk's paths",
                  lambda c: c.execute(f"delete from {self.t['seen']} where output=%s", (self.output,)))

    # --- meta -----------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._run("reading the ledger", lambda c: c.execute(
            f"select value from {self.t['meta']} where output=%s and key=%s", (self.output, key)).fetchone())
        return row[0] if row else None

    def set_meta(self, key: str, value: str | None) -> None:
        self.set_metas({key: value})

    def set_metas(self, values: dict[str, str | None]) -> None:
        def work(c: Any) -> None:
            for key, value in values.items():
                c.execute(f"delete from {self.t['meta']} where output=%s and key=%s", (self.output, key))
                if value is not None:
                    c.execute(f"insert into {self.t['meta']} values (%s, %s, %s)", (self.output, key, value))

        self._run("writing the ledger", work)

    def is_new(self) -> bool:
        return self.meta("fingerprint") is None

    def reset(self, settings: dict, resetting: bool = False) -> None:
        def work(c: Any) -> None:
            for name in ("inputs", "attempts"):
                c.execute(f"delete from {self.t[name]} where output=%s", (self.output,))
            c.execute(f"delete from {self.t['meta']} where output=%s and key != 'last_location'", (self.output,))
            entries = {**stamp(settings, self.gpucli_version), **({"resetting": "1"} if resetting else {})}
            c.executemany(f"insert into {self.t['meta']} values (%s, %s, %s)",
                          [(self.output, k, v) for k, v in entries.items()])

        self._run("resetting the ledger", work)

    def resetting(self) -> bool:
        return self.meta("resetting") is not None

    def reset_done(self) -> None:
        self.set_meta("resetting", None)

    # --- lookups --------------------------------------------------------------------------------
    def lookup(self, paths: list[str]) -> dict[str, Known]:
        rows = self._run("reading the ledger", lambda c: c.execute(
            f"select path, size, mtime_ns, digest, status, version from {self.t['inputs']} "
            "where output=%s and path = any(%s)", (self.output, paths)).fetchall())
        return {r[0]: Known(r[1], r[2], r[3], Status.of_stored(r[4]), r[5]) for r in rows}

    def done_with_digests(self, digests: list[str]) -> dict[str, tuple[str, str | None, int]]:
        rows = self._run("reading the ledger", lambda c: c.execute(
            f"select digest, path, rows from {self.t['inputs']} where output=%s and status=%s "
            "and digest = any(%s) order by path", (self.output, DONE, digests)).fetchall())
        found: dict[str, tuple[str, str | None, int]] = {}
        for digest, path, count in rows:
            found.setdefault(digest, (path, self.output, count))
        return found

    def begin_attempts(self, sources: list[Source]) -> dict[str, int]:
        def work(c: Any) -> dict[str, int]:
            known = {r[0]: r[1:] for r in c.execute(
                f"select path, size, mtime_ns, count from {self.t['attempts']} where output=%s and path = any(%s)",
                (self.output, [s.path for s in sources])).fetchall()}
            earlier = {}
            for s in sources:
                row = known.get(s.path)
                earlier[s.path] = row[2] if row and (row[0], row[1]) == (s.size, s.mtime_ns) else 0
            c.executemany(f"insert into {self.t['attempts']} values (%s, %s, %s, %s, %s) on conflict (output, path) "
                          "do update set size=excluded.size, mtime_ns=excluded.mtime_ns, count=excluded.count",
                          [(self.output, s.path, s.size, s.mtime_ns, earlier[s.path] + 1) for s in sources])
            return earlier

        return self._run("writing the ledger", work)

    def end_attempts(self, paths: list[str]) -> None:
        self._run("writing the ledger", lambda c: c.execute(
            f"delete from {self.t['attempts']} where output=%s and path = any(%s)", (self.output, paths)))

    def locations(self) -> set[str]:
        return {self.output} if self.has_done() else set()

    def stale(self) -> dict[str, set[str]]:
        return {}  # rows go in the transaction that makes them stale (module docstring)

    def done_paths(self) -> list[str]:
        return [r[0] for r in self._run("reading the ledger", lambda c: c.execute(
            f"select path from {self.t['inputs']} where output=%s and status=%s", (self.output, DONE)).fetchall())]

    def mark_seen(self, paths: list[str]) -> None:
        self._run("writing the ledger", lambda c: c.execute(
            f"insert into {self.t['seen']} select %s, unnest(%s::text[]) on conflict do nothing", (self.output, paths)))

    def unseen_done(self) -> list[str]:
        return [r[0] for r in self._run("reading the ledger", lambda c: c.execute(
            f"select path from {self.t['inputs']} i where output=%s and status=%s and not exists "
            f"(select 1 from {self.t['seen']} s where s.output=i.output and s.path=i.path)",
            (self.output, DONE)).fetchall())]

    def has_done(self) -> bool:
        return self.done_count() > 0

    def done_count(self) -> int:
        return self._run("reading the ledger", lambda c: c.execute(
            f"select count(*) from {self.t['inputs']} where output=%s and status=%s",
            (self.output, DONE)).fetchone()[0])

    # --- updates: rows and entries together -----------------------------------------------------
    def write_done(self, sink: Any, table: Any, sources: list[Source], rows_per_source: list[int]) -> None:
        """One transaction: the earlier rows of these inputs, the part's rows (by `self.rows`, the
        sink), their entries."""
        keys, now = [s.path for s in sources], time.time()

        def work(c: Any) -> None:
            earlier = [r[0] for r in c.execute(
                f"select path from {self.t['inputs']} where output=%s and path = any(%s) and status=%s",
                (self.output, keys, DONE)).fetchall()]
            self.rows.delete_keys(c, earlier)
            self.rows.copy(c, table)
            c.execute(
                f"insert into {self.t['inputs']} (output, path, size, mtime_ns, digest, status, error, rows, updated, "
                "version) select %s, * from unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::text[], "
                "%s::text[], %s::int[], %s::float8[], %s::text[]) on conflict (output, path) do update set "
                "size=excluded.size, mtime_ns=excluded.mtime_ns, digest=excluded.digest, status=excluded.status, "
                "error=excluded.error, rows=excluded.rows, updated=excluded.updated, version=excluded.version",
                (self.output, keys, [s.size for s in sources], [s.mtime_ns for s in sources],
                 [s.digest for s in sources], [DONE] * len(keys), [""] * len(keys), list(rows_per_source),
                 [now] * len(keys), [s.version for s in sources]))

        self._run("writing rows", work)

    def mark_done(self, sources: list[Source], rows_per_source: list[int], location: str | None) -> None:
        raise TypeError("a PostgreSQL output marks inputs done with their rows: write_done")

    def mark_unchanged(self, sources: list[Source]) -> None:
        self._run("writing the ledger", lambda c: c.executemany(
            f"update {self.t['inputs']} set size=%s, mtime_ns=%s, version=%s where output=%s and path=%s "
            "and (size!=%s or mtime_ns!=%s or version!=%s)",
            [(s.size, s.mtime_ns, s.version, self.output, s.path, s.size, s.mtime_ns, s.version) for s in sources]))

    def mark_failed(self, failures: list[Failure]) -> int:
        """One transaction: the rows the failed inputs had go with their new entries."""
        if not failures:
            return 0
        now = time.time()

        def work(c: Any) -> int:
            keys = [f.path for f in failures]
            before = {r[0]: r[1:] for r in c.execute(
                f"select path, status, size, mtime_ns from {self.t['inputs']} where output=%s and path = any(%s)",
                (self.output, keys)).fetchall()}
            known = sum(1 for f in failures if (row := before.get(f.path)) is not None and row[0] == FAILED
                        and (row[1], row[2]) == (f.size, f.mtime_ns))
            self.rows.delete_keys(c, [key for key, row in before.items() if row[0] == DONE])
            c.executemany(
                f"insert into {self.t['inputs']} (output, path, size, mtime_ns, digest, status, error, rows, updated) "
                "values (%s, %s, %s, %s, null, %s, %s, null, %s) on conflict (output, path) do update set "
                "size=excluded.size, mtime_ns=excluded.mtime_ns, digest=null, status=excluded.status, "
                "error=excluded.error, rows=null, updated=excluded.updated",
                [(self.output, f.path, f.size, f.mtime_ns, FAILED, f.error, now) for f in failures])
            return known

        return self._run("writing failure records", work)

    def prune(self, paths: list[str]) -> None:
        def work(c: Any) -> None:
            self.rows.delete_keys(c, paths)
            c.execute(f"delete from {self.t['inputs']} where output=%s and path = any(%s)", (self.output, paths))

        if paths:
            self._run("removing the rows of removed inputs", work)

    def forget(self, paths: list[str]) -> list[str]:
        known = list(self.lookup(paths))
        self.prune(known)
        return known

    def clear_stale(self, stale: dict[str, set[str]]) -> None:
        pass

    def forget_location(self, name: str) -> None:
        pass

    def rename_locations(self, renamed: dict[str, str | None], stale: dict[str, set[str]] | None = None,
                         publish: str | None = None) -> None:
        pass


def split_keys(keys: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Files by path; a table's records by path and id (gpucli/core/keys.py)."""
    files, records = [], []
    for key in keys:
        path, record_id = split_key(key)
        (files.append(path) if record_id is None else records.append((path, record_id)))
    return files, records
