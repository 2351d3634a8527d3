"""Talking to Qdrant: one sync client per output, every call retried within a budget.

Server faults (connection refused, timeouts, 5xx, 429) are retried with exponential backoff
and jitter within a time budget; a 4xx fails at once with the server's message. Knobs (for
tests and slow links): GPUCLI_QDRANT_RETRIES (attempts, default 6), GPUCLI_QDRANT_RETRY_S
(budget per call, default 30), GPUCLI_QDRANT_BACKOFF_S (first pause, default 0.5),
GPUCLI_QDRANT_TIMEOUT_S (per request, default 10). Embedded mode's errors are final.

The API key comes only from the `QDRANT_API_KEY` environment variable and is never shown.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from gpucli.core.errors import (
    RERUN_HINT,
    GpucliError,
    LockedError,
    OutputError,
    RunFailedError,
    UsageError,
    os_error,
    sqlite_error,
)
from gpucli.output.sinks.qdrant.target import API_KEY_ENV, Target

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """Bounded retries: at most `attempts` tries, no new pause once `budget_s` is spent."""

    attempts: int = 6
    budget_s: float = 30.0
    backoff_s: float = 0.5
    max_pause_s: float = 8.0
    timeout_s: float = 10.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Retry:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for attr, name, kind in (("attempts", "RETRIES", int), ("budget_s", "RETRY_S", float),
                                 ("backoff_s", "BACKOFF_S", float), ("timeout_s", "TIMEOUT_S", float)):
            raw = env.get(f"GPUCLI_QDRANT_{name}")
            if raw is None:
                continue
            try:
                values[attr] = kind(raw)
            except ValueError:
                raise UsageError(f"GPUCLI_QDRANT_{name}: {raw!r} is not a valid {kind.__name__}") from None
        retry = cls(**values)
        if retry.attempts < 1 or retry.budget_s < 0 or retry.backoff_s < 0 or retry.timeout_s <= 0:
            raise UsageError("GPUCLI_QDRANT_RETRIES must be >= 1, the _S settings >= 0 (TIMEOUT_S > 0)")
        return retry

    def pause(self, attempt: int) -> float:
        """Exponential backoff with jitter: between half and all of base * 2^(attempt-1)."""
        base = min(self.max_pause_s, self.backoff_s * 2 ** (attempt - 1))
        return base * random.uniform(0.5, 1.0)


class Connection:
    """A sync QdrantClient (a server) or an EdgeClient (embedded: edge.py) plus the retry
    policy; shared by the sink and `gpucli search`. Calls are made one at a time (the writer
    awaits each), possibly from different threads of asyncio's pool."""

    def __init__(self, target: Target, retry: Retry | None = None) -> None:
        self.target = target
        self.retry = retry or Retry.from_env()
        self.notices: list[str] = []  # for the user: a collection moved from local mode (embedded)
        self.client = self._connect()

    def _connect(self) -> Any:
        return self._open_embedded() if self.target.local else self._open_server()

    def _open_embedded(self) -> Any:
        """Qdrant Edge in this process (edge.py); a collection an earlier gpucli left in qdrant-client's
        local mode is moved into it first (local_mode.py), with a notice."""
        from gpucli.output.sinks.qdrant.edge import EdgeClient
        from gpucli.output.sinks.qdrant.local_mode import move_to_edge

        moved = self._call_embedded("moving the local-mode collection", lambda: move_to_edge(self.target))
        if moved:
            self.notices.append(moved)
        try:
            return self._call_embedded("opening the storage", lambda: EdgeClient(self.target.path))
        except LockedError as exc:
            raise LockedError(f"{self.target.display}: {exc}") from None

    def _open_server(self) -> Any:
        import warnings

        from qdrant_client import QdrantClient

        key = os.environ.get(API_KEY_ENV) or None
        with warnings.catch_warnings():
            if urlsplit(self.target.url).hostname in ("localhost", "127.0.0.1", "::1"):  # plain http is fine here
                warnings.filterwarnings("ignore", message="Api key is used with an insecure connection")
            return QdrantClient(url=self.target.url, api_key=key, timeout=max(1, round(self.retry.timeout_s)),
                                check_compatibility=False)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one client call; retry transient server faults; raise RunFailedError (exit 3) when spent."""
        return self._call_embedded(what, fn) if self.target.local else self._call_server(what, fn)

    def _call_embedded(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except GpucliError:
            raise
        except OSError as exc:  # the storage's files: a full disk, a read-only one, named (exit 3)
            raise os_error(exc, self.target.path) from None
        except Exception as exc:  # noqa: BLE001 - embedded errors are final; name the output
            stored = _storage_error(exc, self.target) or _edge_error(exc, self.target)
            if stored is not None:
                raise stored from None
            raise GpucliError(f"{self.target.display}: {what} failed: {_describe(exc)}") from None

    def _call_server(self, what: str, fn: Callable[[], T]) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - sorted below
                wait = _transient(exc)
                if wait is None:
                    raise _fatal(self.target, what, exc) from None
                pause = max(wait, self.retry.pause(attempt))
                spent = time.monotonic() - started
                if attempt >= self.retry.attempts or spent + pause > self.retry.budget_s:
                    raise self._spent(what, exc, attempt, spent) from None
                time.sleep(pause)

    def _spent(self, what: str, exc: BaseException, attempt: int, spent: float) -> RunFailedError:
        """Retries spent: the run itself failed (exit 3), as for any sink that stays unreachable."""
        state = "unreachable" if _network_error(getattr(exc, "source", exc)) else "kept failing"
        return RunFailedError(f"Qdrant at {self.target.display} {state}: {what} failed {attempt} time(s) "
                           f"over {spent:.1f}s, retries spent; last error: {_describe(exc)}")

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing must not mask the run's own error
            pass


def _transient(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (0 if it did not) when worth retrying; None when final."""
    from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, ResourceExhaustedResponse):
        return float(min(exc.retry_after_s, 30))
    if isinstance(exc, UnexpectedResponse):
        code = exc.status_code or 0
        return 0.0 if code >= 500 or code in (408, 429) else None
    if isinstance(exc, ResponseHandlingException):
        return 0.0 if _network_error(exc.source) else None
    return 0.0 if _network_error(exc) else None


def _network_error(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


def _fatal(target: Target, what: str, exc: BaseException) -> GpucliError:
    from qdrant_client.http.exceptions import UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        hint = " (check QDRANT_API_KEY)" if exc.status_code in (401, 403) else ""
        return GpucliError(f"Qdrant at {target.display} refused {what}: HTTP {exc.status_code}: "
                           f"{server_message(exc)}{hint}")
    return GpucliError(f"Qdrant at {target.display}: {what} failed: {_describe(exc)}")


def server_message(exc: Any) -> str:
    """The server's own words from an error response (`status.error`), else its raw body."""
    content = getattr(exc, "content", b"") or b""
    try:
        body = json.loads(content)
        status = body.get("status") if isinstance(body, dict) else None
        if isinstance(status, dict) and status.get("error"):
            return str(status["error"])
    except (ValueError, TypeError):
        pass
    text = content.decode("utf-8", "replace").strip()
    return text[:300] if text else (getattr(exc, "reason_phrase", "") or "no message")


def _describe(exc: BaseException) -> str:
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return f"HTTP {exc.status_code}: {server_message(exc)}"
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _storage_error(exc: Exception, target: Target) -> OutputError | None:
    """Local mode (read once, to move a collection to Edge: local_mode.py) keeps points in SQLite:
    a file system that is full, read-only or failing is the output side failing (OutputError:
    exit 3, the path named, a rerun resumes), not one batch's upsert; None for any other error."""
    import sqlite3

    if not isinstance(exc, sqlite3.Error):
        return None
    return sqlite_error(exc, os.path.join(target.path, "collection", target.collection, "storage.sqlite"))


def _edge_error(exc: Exception, target: Target) -> OutputError | None:
    """Qdrant Edge reports a failing file system in its message (`No space left on device (os
    error 28)`): the output side failing, as an OutputError (exit 3, the path named, a rerun
    resumes); None for any other error."""
    import errno as errnos
    import re

    found = re.search(r"\(os error (\d+)\)", str(exc))
    if found is None:
        return None
    number = int(found.group(1))
    name = errnos.errorcode.get(number, "")
    return OutputError(os.path.join(target.path, "edge", target.collection),
                       f"{os.strerror(number)}" + (f" [{name}]" if name else ""), RERUN_HINT)
