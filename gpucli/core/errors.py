"""Typed errors; each carries the exit code the CLI turns it into."""

from __future__ import annotations

from typing import Any

from gpucli.core.stages import Stage

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_RUN_FAILED = 3
EXIT_LOCKED = 75
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class GpucliError(Exception):
    """A failure of the whole run, reported without a traceback."""

    exit_code = EXIT_FAILED


class UsageError(GpucliError):
    """Bad flags, config or model choice: the user must change the command."""

    exit_code = EXIT_USAGE


class RunFailedError(GpucliError):
    """The run itself failed, or refused to do something that would lose data."""

    exit_code = EXIT_RUN_FAILED


class LockedError(GpucliError):
    """Another run holds the lock on this output."""

    exit_code = EXIT_LOCKED


class WorkerSetupError(GpucliError):
    """A worker could not load its model; carries the worker's own message."""


class InputError(Exception):
    """One input cannot be processed; becomes a failure record, the run goes on.

    `stage` is where it failed (a `Stage`; its plain word is taken too).
    """

    def __init__(self, stage: Stage | str, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.stage = Stage(stage)
        self.cause = cause  # the failure record's cause: a skip's SkipReason, say


class OutputError(RunFailedError):
    """An operating-system error of the output side: the output, its ledger, its failures file
    or its state directory (disk full, over quota, read-only, I/O error, permission denied).
    One line that names the path and the cause, never "a bug": what is durable stays, and a
    rerun once the cause is fixed resumes exactly. Before any work the output is refused
    (UsageError, exit 2); during a run it stops the run (exit 3). `summary`: the counts when it
    stopped, set by the engine, which the CLI prints (with --json too)."""

    def __init__(self, path: str, cause: str, hint: str = "") -> None:
        self.path, self.cause, self.hint = str(path), cause, hint
        self.summary: Any = None  # a RunSummary (core/summary.py)
        super().__init__(f"{self.path}: {cause}" + (f"; {hint}" if hint else ""))

    @property
    def full(self) -> bool:
        """The file system is full or over quota: the run failed (exit 3) wherever it met it,
        before any work too, since the same command succeeds once there is space."""
        return any(mark in self.cause for mark in FULL_MARKS)


FULL_MARKS = ("[ENOSPC]", "[EDQUOT]", "SQLITE_FULL", "No space left on device")


class LedgerDamaged(OutputError):
    """The ledger's file is not a readable SQLite database (truncated, overwritten): no run
    can trust it, so none goes on with it; `--full` sets it aside and starts a new one."""

    def __init__(self, path: str, cause: str, hint: str = "") -> None:
        super().__init__(path, cause, hint)
        self.args = (f"{path} is damaged ({cause})" + (f"; {hint}" if hint else ""),)


RERUN_HINT = "complete parts are kept; fix that and rerun: the run resumes where it stopped"
DAMAGED_HINT = ("rerun with --full to rebuild the output and its ledger, or move the output away and "
                "start a new one")


def os_error(exc: OSError, path: str | None = None) -> OutputError:
    """An OSError of an output-side file as one OutputError: its own file name when it has one
    (`path` otherwise), its cause in words and by errno name (`No space left on device [ENOSPC]`)."""
    import errno as errnos

    where = exc.filename if exc.filename is not None else path
    if exc.filename2 is not None:
        where = f"{exc.filename} -> {exc.filename2}"
    name = errnos.errorcode.get(exc.errno or 0, "")
    cause = (exc.strerror or str(exc)) + (f" [{name}]" if name else "")
    return OutputError(str(where or "the output"), cause, RERUN_HINT)


def sqlite_error(exc: Exception, path: str) -> OutputError | None:
    """A SQLite error of the ledger at `path` that the file system or the file itself caused, as
    an OutputError (LedgerDamaged for a damaged file); None for any other (a bug: it goes up as is).
    SQLite does not say which errno it met: a full or read-only file system is told by statvfs."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return LedgerDamaged(path, str(exc), DAMAGED_HINT)
    if not name.startswith(("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")):
        return None
    return OutputError(path, f"{_file_system_cause(path) or exc} [{name}]", RERUN_HINT)


def _file_system_cause(path: str) -> str:
    import os

    try:
        info = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return ""
    if info.f_flag & os.ST_RDONLY:
        return "Read-only file system"
    if info.f_bavail == 0 or info.f_favail == 0:
        return "No space left on device (or over quota)"
    return ""
