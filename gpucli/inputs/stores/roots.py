"""A run's checks of URL roots, and the root its rows are relative to: gpucli/engines/run_inputs.py's
`check_roots` and `input_root` ask here when the roots are URLs (nothing of this module is
imported for local roots).

A root that cannot be listed is a run error, every time, before any work: nothing is written
(no output, no state folder, no lock, no failures file), and the tenth run says what the first
did. A bucket (or Azure container) that does not exist, a root the credentials may not list,
no credentials at all, or any other refusal of the store: one line naming the root, the cause
and, where credentials may be the cause, where they are looked for (UsageError, exit 2), as
for a missing or unreadable directory: the command or its environment must change. A store
that keeps failing (throttling, 5xx, unreachable) after the retries every request gets: exit 3
(RunFailedError), and a rerun tries again. A failure record for such a root made the second
run exit 0 (the root's record was a failure known from the first) and left an empty output
behind. What the store says later (an object gone after the listing, a prefix denied
under the root, a listing cut short on a later page) is a failure record, as an unreadable file
or subdirectory is."""

from __future__ import annotations

from typing import Any

from gpucli.core.errors import GpucliError, RunFailedError, UsageError
from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.listing import object_info, parse_roots
from gpucli.inputs.stores.pages import Pages
from gpucli.inputs.stores.retry import ErrorKind, GaveUp, classify, short
from gpucli.inputs.stores.url import PROTOCOLS, StoreUrl, common_root, redact

# Where each library looks for credentials (docs/buckets.md), for the line that refuses a root
CREDENTIALS = {
    "s3fs": "credentials are looked for in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
            "~/.aws/credentials and ~/.aws/config, then the instance's or container's role",
    "gcsfs": "credentials are looked for in GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default "
             "login, then the VM's service account",
    "adlfs": "credentials are looked for in AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME with "
             "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, then DefaultAzureCredential (az login, a "
             "managed identity)",
}


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
    """The first key under the root, in one request, retried as every request is (retry.py):
    anything but an answer is refused."""
    try:
        next(Pages(fs, url, keys=1)(url.key), None)
    except Exception as exc:  # noqa: BLE001 - every failure of the root's listing refuses the run
        refusal = _refusal(fs, url, exc)
        if refusal is not None:
            raise refusal from None


def _refusal(fs: Any, url: StoreUrl, exc: BaseException) -> GpucliError | None:
    """What a listing of the root that failed with `exc` ends the run with: exit 3 for a store
    that kept failing, exit 2 for anything else; None for a root naming an object that may be
    read, though not listed."""
    kind, root, package = classify(exc), redact(str(url)), PROTOCOLS[url.protocol]
    bucket = "container" if package == "adlfs" else "bucket"
    if isinstance(exc, GaveUp):
        return RunFailedError(f"{root}: cannot list it: the store kept failing ({exc}); nothing was written, and a "
                              "rerun tries again")
    if kind is ErrorKind.MISSING:  # a listing under an existing bucket is never missing, only empty
        return UsageError(f"{root}: no such {bucket} ({short(exc)}); check the {bucket} name in the URL"
                          + (" and the region" if package == "s3fs" else ""))
    if kind is ErrorKind.DENIED:
        if object_info(fs, url) is not None:  # an object root may be read without a listing
            return None
        return UsageError(f"{root}: access denied ({short(exc)}): the credentials may not list it; check the "
                          f"policy (or the key) for this prefix ({CREDENTIALS[package]})")
    return UsageError(f"{root}: cannot list it ({short(exc)}); {CREDENTIALS[package]}")


def url_input_root(paths: tuple[str, ...]) -> str:
    """The URL the rows' `path` is relative to (the metadata's `gpucli.root`): the root prefix,
    or the deepest common one (an object root's own prefix is resolved by the listing; here the
    roots as given)."""
    return str(common_root([StoreUrl.parse(p) for p in paths]))
