"""A Qdrant server's calls retried within a budget (server.py makes them).

Server faults (connection refused, timeouts, 5xx, 429) are retried with exponential backoff
and jitter within a time budget; a 4xx fails at once with the server's message. Knobs (for
tests and slow links): GPUCLI_QDRANT_RETRIES (attempts, default 6), GPUCLI_QDRANT_RETRY_S
(budget per call, default 30), GPUCLI_QDRANT_BACKOFF_S (first pause, default 0.5),
GPUCLI_QDRANT_TIMEOUT_S (per request, default 10). Embedded mode's errors are final (edge/).

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

from gpucli.core.errors import GpucliError, RunFailedError, UsageError
from gpucli.output.sinks.qdrant.target import Target

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


def call_with_retries(target: Target, retry: Retry, what: str, fn: Callable[[], T]) -> T:
    """Run one server call; retry transient faults; raise RunFailedError (exit 3) when spent,
    GpucliError at once for a final one (a 4xx), the output named and the key never shown."""
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - sorted below
            wait = _transient(exc)
            if wait is None:
                raise _fatal(target, what, exc) from None
            pause = max(wait, retry.pause(attempt))
            spent = time.monotonic() - started
            if attempt >= retry.attempts or spent + pause > retry.budget_s:
                raise _spent(target, what, exc, attempt, spent) from None
            time.sleep(pause)


def _spent(target: Target, what: str, exc: BaseException, attempt: int, spent: float) -> RunFailedError:
    """Retries spent: the run itself failed (exit 3), as for any sink that stays unreachable."""
    state = "unreachable" if _network_error(getattr(exc, "source", exc)) else "kept failing"
    return RunFailedError(f"Qdrant at {target.display} {state}: {what} failed {attempt} time(s) "
                          f"over {spent:.1f}s, retries spent; last error: {describe_error(exc)}")


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
    return GpucliError(f"Qdrant at {target.display}: {what} failed: {describe_error(exc)}")


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


def describe_error(exc: BaseException) -> str:
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return f"HTTP {exc.status_code}: {server_message(exc)}"
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
