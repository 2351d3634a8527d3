"""One fsspec filesystem per protocol, opened with gpucli's settings.

Credentials come only from each library's standard chain (environment, config files, instance
roles): nothing here takes a key. The S3 endpoint of an S3-compatible store (MinIO, Ceph, R2,
a test server) is botocore's own `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`). The libraries'
retries are turned off: retry.py is the one policy (stacked, botocore's and s3fs's made 25
attempts of a throttled request)."""

from __future__ import annotations

from typing import Any

from gpucli.errors import UsageError
from gpucli.stores.url import PROTOCOLS

POOL_CONNECTIONS = 64  # HTTP connections per filesystem: reads in flight at once (botocore's default is 10)
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 10, 60


def _options(protocol: str) -> dict[str, Any]:
    if PROTOCOLS[protocol] == "s3fs":
        # max_concurrency 1: s3fs would HEAD every object first, to see whether to read it in ranges
        return {"max_concurrency": 1, "config_kwargs": {
            "retries": {"total_max_attempts": 1}, "max_pool_connections": POOL_CONNECTIONS,
            "connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S}}
    return {}


def filesystem(protocol: str) -> Any:
    """The (cached, per process) async fsspec filesystem for `protocol`; UsageError naming the
    extra when its library is missing."""
    package = PROTOCOLS[protocol]
    try:
        import fsspec
    except ImportError:
        raise UsageError(f"{protocol}:// inputs need the cloud extra: pip install 'gpucli[cloud]'") from None
    try:
        fs = fsspec.filesystem(protocol, **_options(protocol))
    except ImportError:
        raise UsageError(f"{protocol}:// inputs need {package}: pip install 'gpucli[cloud]' "
                         f"(or pip install {package})") from None
    if hasattr(fs, "retries"):
        fs.retries = 1  # s3fs's own loop (retry.py retries)
    if not getattr(fs, "async_impl", False):
        raise UsageError(f"{protocol}:// inputs need an async fsspec filesystem; {package} is not one here. "
                         "This is a bug.")
    return fs


def run(fs: Any, coroutine_fn: Any, *args: Any) -> Any:
    """`await coroutine_fn(*args)` on fsspec's I/O loop, from a plain thread (the walk's, a reader's)."""
    from fsspec.asyn import sync

    return sync(fs.loop, coroutine_fn, *args)
