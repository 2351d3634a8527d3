"""Typed errors; each carries the exit code the CLI turns it into."""

from __future__ import annotations

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

    `stage` is one of read / decode / preprocess / infer / write / skip.
    """

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
