"""One fsspec filesystem per protocol, opened with gpucli's settings.

Credentials come only from each library's standard chain (environment, config files, instance
roles): nothing here takes a key. The S3 endpoint of an S3-compatible store (MinIO, Ceph, R2,
a test server) is botocore's own `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`); a GCS emulator's
is `STORAGE_EMULATOR_HOST` (gcsfs reads it, and an emulator is asked without credentials, as
google-cloud-storage does); Azure's is the connection string's `BlobEndpoint`. The libraries'
retries are turned off: retry.py is the one policy (stacked, botocore's and s3fs's made 25
attempts of a throttled request; gcsfs's 6 and the Azure SDK's 10 would multiply ours the same way)."""

from __future__ import annotations

import functools
import os
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.inputs.stores.url import PROTOCOLS, redact

POOL_CONNECTIONS = 64  # HTTP connections per filesystem: reads in flight at once (botocore's default is 10)
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 10, 60


def _options(protocol: str) -> dict[str, Any]:
    if PROTOCOLS[protocol] == "s3fs":
        # max_concurrency 1: s3fs would HEAD every object first, to see whether to read it in ranges
        return {"max_concurrency": 1, "config_kwargs": {
            "retries": {"total_max_attempts": 1}, "max_pool_connections": POOL_CONNECTIONS,
            "connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S}}
    if PROTOCOLS[protocol] == "gcsfs":
        import aiohttp

        # gcsfs passes its requests_timeout to every request, None meaning none at all
        options: dict[str, Any] = {"requests_timeout": aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_S,
                                                                             sock_read=READ_TIMEOUT_S)}
        if _emulated_gcs():
            options["token"] = "anon"  # else google.auth looks for a metadata server first (seconds)
        return options
    return {}  # adlfs: the Azure SDK's timeouts (20 s to connect, 60 s between reads) are ours already


def _without_library_retries(fs: Any) -> None:
    """Each library's own retry loop off, so that retry.py's attempts are the attempts."""
    if hasattr(fs, "retries"):
        fs.retries = 1  # s3fs's own loop
    request = getattr(type(fs), "_request", None)
    if hasattr(request, "__wrapped__"):  # gcsfs: _request is wrapped in retry_request(retries=6)
        fs._request = functools.partial(request.__wrapped__, fs)
    policy = getattr(getattr(getattr(fs, "service_client", None), "_config", None), "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):  # the Azure SDK's, shared by its child clients
        policy.total_retries = 0


def _emulated_gcs() -> bool:
    return os.environ.get("STORAGE_EMULATOR_HOST", "") not in ("", "default")


def _quiet_azure_identity() -> None:
    """DefaultAzureCredential logs its whole chain of attempts (a dozen lines) as a warning before
    it raises the same text; the error it raises is gpucli's one line (roots.py): that log's
    warnings are not shown a second time."""
    import logging

    logging.getLogger("azure.identity").setLevel(logging.ERROR)


def _open(protocol: str, package: str) -> Any:
    import fsspec

    if package == "adlfs":
        _quiet_azure_identity()

    if package == "gcsfs" and _emulated_gcs():
        # gcsfs's default class (ExtendedGcsFileSystem) first asks the Storage Control gRPC API
        # each bucket's type, which an emulator does not serve: 60 s lost per bucket. Its core
        # class reads through the JSON API alone, as an emulator expects.
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(**_options(protocol))
    return fsspec.filesystem(protocol, **_options(protocol))


def filesystem(protocol: str) -> Any:
    """The (cached, per process) async fsspec filesystem for `protocol`; UsageError naming the
    extra when its library is missing."""
    package = PROTOCOLS[protocol]
    try:
        import fsspec  # noqa: F401 - present at all (_open imports it again)
    except ImportError:
        raise UsageError(f"{protocol}:// inputs need the cloud extra: pip install 'gpucli[cloud]'") from None
    try:
        fs = _open(protocol, package)
    except ImportError:
        raise UsageError(f"{protocol}:// inputs need {package}: pip install 'gpucli[cloud]' "
                         f"(or pip install {package})") from None
    except ValueError as exc:  # adlfs with no account to connect to (or a connection string it cannot parse)
        if package != "adlfs":
            raise
        raise UsageError(f"{protocol}:// inputs: {redact(str(exc))}; set AZURE_STORAGE_CONNECTION_STRING, or "
                         "AZURE_STORAGE_ACCOUNT_NAME and a credential (docs/buckets.md)") from None
    _without_library_retries(fs)
    if not getattr(fs, "async_impl", False):
        raise UsageError(f"{protocol}:// inputs need an async fsspec filesystem; {package} is not one here. "
                         "This is a bug.")
    return fs


def run(fs: Any, coroutine_fn: Any, *args: Any) -> Any:
    """`await coroutine_fn(*args)` on fsspec's I/O loop, from a plain thread (the walk's, a reader's)."""
    from fsspec.asyn import sync

    return sync(fs.loop, coroutine_fn, *args)
