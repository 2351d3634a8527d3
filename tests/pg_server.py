"""A real PostgreSQL 16 with pgvector for the tests, from the `pgserver` wheel (no system install):
started once per session on a unix socket in a temporary directory, one database per test,
restarted (`pg_ctl -m immediate restart`: a crash as the server sees it) when a test asks. A role
with a password (`pwuser`, scram-sha-256 through pg_hba.conf) lets the tests refuse a wrong one."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote

PASSWORD = "s3cret-pw"  # the password role's, which no output, log or state path may show


class PgServer:
    def __init__(self) -> None:
        """In a directory of its own under the system's temporary directory, not pytest's: pytest's
        is private to root (0700), and a server started as root runs as the user `pgserver`."""
        import pgserver

        self.base = Path(tempfile.mkdtemp(prefix="gpucli-pg-"))
        self.base.chmod(0o755)
        self.server = pgserver.get_server(self.base / "pgdata", cleanup_mode="delete")
        self.pgdata = self.server.pgdata
        self.host = self.server.get_postmaster_info().socket_dir
        self._names = itertools.count()
        self.execute("postgres", f"create role pwuser login superuser password '{PASSWORD}'")
        hba = self.pgdata / "pg_hba.conf"
        hba.write_text("local all pwuser scram-sha-256\n" + hba.read_text())
        self.ctl("reload")

    def ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", *args], pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def restart(self) -> None:
        """An immediate stop (no checkpoint: the server recovers from its WAL), then a start with
        the options pgserver started it with (no TCP, the socket in its directory)."""
        self.ctl("-m", "immediate", "stop")
        try:
            self.ctl("-o", '-h ""', "-o", f"-k {self.host}", "-l", str(self.pgdata / "log"), "start")
        except Exception as exc:
            raise RuntimeError(f"the server did not start again: {(self.pgdata / 'log').read_text()[-3000:]}") from exc

    def execute(self, database: str, sql: str) -> list:
        import psycopg

        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def dsn(self, database: str, user: str = "postgres", password: str = "") -> str:
        secret = f":{quote(password)}" if password else ""
        return f"postgresql://{user}{secret}@/{database}?host={quote(str(self.host))}"

    def new_database(self) -> str:
        name = f"t{next(self._names)}"
        self.execute("postgres", f"create database {name}")
        return name

    def out(self, database: str, table: str = "docs", **options: str) -> str:
        extra = "".join(f"&{k}={v}" for k, v in options.items())
        return f"{self.dsn(database)}&table={table}{extra}"

    def stop(self) -> None:
        try:
            self.ctl("-m", "immediate", "stop")
        except Exception:  # noqa: BLE001 - already stopped
            pass
        self.server._postmaster_info = None  # stopped above (a restart left pgserver a stale pid): only delete
        self.server.cleanup()
        shutil.rmtree(self.base, ignore_errors=True)
