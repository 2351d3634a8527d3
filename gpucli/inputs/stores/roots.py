"""A run's checks of URL roots, and the root its rows are relative to: gpucli/engines/run_inputs.py's
`check_roots` and `input_root` ask here when the roots are URLs (nothing of this module is
imported for local roots).

A root in a bucket (or Azure container) that does not exist, or one the credentials may not
list, is refused before any work with one line naming it (UsageError, exit 2), as a missing or
unreadable directory is: the command must change, and a rerun as it is would only fail again.
What the store says later (an object gone after the listing, a prefix denied under the root, a
store that keeps failing) is a failure record, as an unreadable file or subdirectory is."""

from __future__ import annotations

from typing import Any

from gpucli.core.errors import UsageError
from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.listing import object_info, parse_roots
from gpucli.inputs.stores.pages import Pages
from gpucli.inputs.stores.retry import ErrorKind, RetryPolicy, classify, short
from gpucli.inputs.stores.url import PROTOCOLS, StoreUrl, common_root, redact

# The check's one request per root is not retried: a transient fault is the walk's to retry and,
# should it last, to report in a failure record (a rerun tries again), as before this check.
ONE_TRY = RetryPolicy(attempts=1)


def check_url_roots(paths: tuple[str, ...]) -> None:
    """Each URL root parses (a protocol we read, a bucket, no credential in it), the roots are
    all URLs in one bucket, the bucket exists and each root may be listed. Whether a prefix
    holds anything is the listing's to say: an empty prefix is an empty root (exit 3 unless
    --allow-empty)."""
    urls = parse_roots(list(paths))
    common_root(urls)
    fs = filesystems.filesystem(urls[0].protocol)
    for url in urls:
        _check_listable(fs, url)


def _check_listable(fs: Any, url: StoreUrl) -> None:
    """The first key under the root, in one request: a missing bucket or a denied listing is
    refused; any other fault is left to the walk."""
    try:
        next(Pages(fs, url, keys=1, policy=ONE_TRY)(url.key), None)
    except Exception as exc:  # noqa: BLE001 - classified: a refusal, or the walk's to meet again
        refusal = _refusal(fs, url, exc)
        if refusal is not None:
            raise refusal from None


def _refusal(fs: Any, url: StoreUrl, exc: BaseException) -> UsageError | None:
    """What the user must fix, for a listing of the root that failed with `exc`; None when a
    rerun as it is may succeed."""
    kind, root = classify(exc), redact(str(url))
    bucket = "container" if PROTOCOLS[url.protocol] == "adlfs" else "bucket"
    if kind is ErrorKind.MISSING:  # a listing under an existing bucket is never missing, only empty
        return UsageError(f"{root}: no such {bucket} ({short(exc)}); check the {bucket} name in the URL"
                          + (" and the region" if PROTOCOLS[url.protocol] == "s3fs" else ""))
    if kind is ErrorKind.DENIED and object_info(fs, url) is None:  # an object root may be read without a listing
        return UsageError(f"{root}: access denied ({short(exc)}): the credentials may not list it; check the "
                          "policy (or the key) for this prefix")
    return None


def url_input_root(paths: tuple[str, ...]) -> str:
    """The URL the rows' `path` is relative to (the metadata's `gpucli.root`): the root prefix,
    or the deepest common one (an object root's own prefix is resolved by the listing; here the
    roots as given)."""
    return str(common_root([StoreUrl.parse(p) for p in paths]))
