"""Which store errors are worth another try, how many tries, and what a failure record says.

One policy for listing and reading alike, ours rather than the libraries' (botocore and s3fs
each retry on their own, and stacked they made 25 attempts of one throttled request): the
filesystem is opened with theirs off (filesystems.py), and every request goes through
`retrying`. Transient: throttling (503 SlowDown, 429), 5xx, timeouts, a connection reset or a
body cut short. Not transient: a missing object (deleted between the listing and the read),
access denied; those become failure records at once, with a reason a user can act on."""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpucli.inputs.stores.url import redact

T = TypeVar("T")


class ErrorKind(enum.Enum):
    TRANSIENT = "transient"  # try again after a pause
    MISSING = "missing"  # no such key (or bucket)
    DENIED = "denied"  # the credentials may not do this
    OTHER = "other"  # anything else: no retry, the error as it is


# S3's codes, Azure's (x-ms-error-code) and the HTTP status; gcsfs gives the status alone
_MISSING_CODES = {"NoSuchKey", "NoSuchBucket", "NotFound", "404", "ContainerNotFound", "BlobNotFound",
                  "ResourceNotFound"}
_DENIED_CODES = {"AccessDenied", "Forbidden", "403", "AllAccessDisabled", "InvalidAccessKeyId",
                 "SignatureDoesNotMatch", "AccountProblem", "AuthorizationFailure", "AuthenticationFailed",
                 "AuthorizationPermissionMismatch", "AuthorizationSourceIPMismatch", "AuthorizationProtocolMismatch",
                 "InsufficientAccountPermissions", "AccountIsDisabled"}
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestTimeout",
                    "RequestTimeoutException", "InternalError", "ServiceUnavailable", "503", "500", "502", "504",
                    "429", "RequestLimitExceeded", "ServerBusy", "OperationTimedOut"}
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_DENIED_STATUS = {401, 403}
# exception classes (by name: aiohttp, botocore, fsspec, urllib3, requests, azure-core, gcsfs need not be
# imported to be known); a subclass counts (requests' ProxyError, gcsfs's answer to a 502, is a ConnectionError)
_TRANSIENT_TYPES = {"ClientPayloadError", "ServerDisconnectedError", "ClientConnectionError", "ClientOSError",
                    "ServerTimeoutError", "HTTPClientError", "ConnectionClosedError", "EndpointConnectionError",
                    "ReadTimeoutError", "ConnectTimeoutError", "IncompleteRead", "ResponseStreamingError",
                    "FSTimeoutError", "TimeoutError", "ConnectionError", "ResponseParserError", "ProtocolError",
                    "ServiceRequestError", "ServiceResponseError", "IncompleteReadError", "ChecksumError"}


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; the pause before try n+1 is base * 2**n (at most `cap`), with
    jitter (half to all of it), so that many readers throttled together do not come back together."""

    attempts: int = 6
    base_s: float = 0.2
    cap_s: float = 5.0

    def delay(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * 2**attempt) * random.uniform(0.5, 1.0)


POLICY = RetryPolicy()


class GaveUp(Exception):
    """A transient error that lasted every attempt."""

    def __init__(self, last: BaseException, attempts: int) -> None:
        super().__init__(f"after {attempts} attempts: {short(last)}")
        self.last, self.attempts = last, attempts


async def retrying(call: Callable[[], Awaitable[T]], policy: RetryPolicy | None = None) -> T:
    """`call()`, tried again after a pause while it fails with a transient error, at most
    `policy.attempts` times in all (then GaveUp); any other error goes up at once."""
    policy = policy or POLICY
    for attempt in range(policy.attempts):
        try:
            return await call()
        except Exception as exc:  # classified, and raised again unless transient
            if classify(exc) is not ErrorKind.TRANSIENT:
                raise
            if attempt == policy.attempts - 1:
                raise GaveUp(exc, policy.attempts) from exc
            await asyncio.sleep(policy.delay(attempt))
    raise AssertionError("unreachable: the loop returns or raises. This is a bug.")


def classify(exc: BaseException) -> ErrorKind:
    """The kind of a store error, looking through the chain (s3fs turns a botocore ClientError
    into an OSError whose cause is the original)."""
    for link in _chain(exc):
        if isinstance(link, GaveUp):
            return ErrorKind.TRANSIENT
        code, status = _code(link)
        if code in _MISSING_CODES or status == 404:
            return ErrorKind.MISSING
        if code in _DENIED_CODES or status in _DENIED_STATUS or _gcs_forbidden(link):
            return ErrorKind.DENIED
        if code in _TRANSIENT_CODES or status in _TRANSIENT_STATUS:
            return ErrorKind.TRANSIENT
        if isinstance(link, FileNotFoundError):
            return ErrorKind.MISSING
        if isinstance(link, PermissionError):
            return ErrorKind.DENIED
        if any(cls.__name__ in _TRANSIENT_TYPES for cls in type(link).__mro__):
            return ErrorKind.TRANSIENT
    return ErrorKind.OTHER


def reason(exc: BaseException, doing: str = "read") -> str:
    """What a failure record says: what happened and what to do, never a credential."""
    kind = classify(exc)
    if isinstance(exc, GaveUp):
        return redact(f"cannot {doing}: the store kept failing ({exc}); a rerun tries again")
    if kind is ErrorKind.MISSING and doing == "list":
        return redact(f"no such bucket ({short(exc)}): check the URL's bucket name and the region")
    if kind is ErrorKind.MISSING:
        return "the object is gone (deleted after the listing?); not read: a rerun no longer lists it"
    if kind is ErrorKind.DENIED:
        return redact(f"access denied ({short(exc)}): the credentials may not {doing} this; check the policy "
                      "for this prefix")
    return redact(f"cannot {doing}: {short(exc)}")


def short(exc: BaseException) -> str:
    """An error in a line: the store's code and status when it gave one, else its type and text."""
    for link in _chain(exc):
        code, status = _code(link)
        if code or status:
            return f"{code or 'HTTP'} ({status})" if status else str(code)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return redact(f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in out and len(out) < 8:
        out.append(link)
        link = link.__cause__ or link.__context__
    return out


def _code(exc: BaseException) -> tuple[str, int]:
    """(error code, HTTP status) of a store's error: botocore's ClientError (a response dict),
    azure-core's HttpResponseError (error_code, status_code), gcsfs's HttpError (code: the
    status), aiohttp's ClientResponseError (status); ('', 0) for anything else."""
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str((response.get("Error") or {}).get("Code") or "")
        status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        return code, status
    name, module = type(exc).__name__, type(exc).__module__
    if module.startswith("azure.") and hasattr(exc, "status_code"):
        code = getattr(exc, "error_code", None)
        return str(getattr(code, "value", code) or ""), int(getattr(exc, "status_code", 0) or 0)
    if name == "HttpError" and module.startswith("gcsfs"):
        return "", int(exc.code) if str(getattr(exc, "code", "")).isdigit() else 0  # type: ignore[attr-defined]
    if name.startswith("ClientResponse"):
        return "", int(getattr(exc, "status", 0) or 0)
    return "", 0


def _gcs_forbidden(exc: BaseException) -> bool:
    """gcsfs's answer to a 403: a plain OSError whose text starts 'Forbidden:'."""
    return type(exc) is OSError and str(exc).startswith("Forbidden")
