"""A run's checks of URL roots, and the root its rows are relative to.

gpucli/job.py checks that every root exists on disk (`check_roots`) and names the rows' root
in the output's metadata (`input_root`) with local paths only. Until it asks this module for
URL roots itself (a one-line hook in each of the two functions, left to the owner of job.py),
`accept_url_roots` wraps the two, once, for a run whose roots are URLs: the local path keeps
job.py's own functions untouched, and nothing of this module is imported for it."""

from __future__ import annotations

from gpucli.stores.url import StoreUrl, common_root, is_url


def check_url_roots(paths: tuple[str, ...]) -> None:
    """Each URL root parses (a protocol we read, a bucket, no credential in it) and the roots
    are all URLs in one bucket. Whether a prefix holds anything is the listing's to say: an
    empty prefix is an empty root (exit 3 unless --allow-empty), an unlistable one a failure."""
    from gpucli.stores.listing import parse_roots

    common_root(parse_roots(list(paths)))


def url_input_root(paths: tuple[str, ...]) -> str:
    """The URL the rows' `path` is relative to (the metadata's `gpucli.root`): the root prefix,
    or the deepest common one (an object root's own prefix is resolved by the listing; here the
    roots as given)."""
    return str(common_root([StoreUrl.parse(p) for p in paths]))


def accept_url_roots(paths: tuple[str, ...]) -> None:
    """Make gpucli.job's root checks take URL roots, when these `paths` hold any (see above)."""
    if not any(is_url(p) for p in paths):
        return
    from gpucli import job

    if getattr(job.check_roots, "takes_urls", False):
        return
    local_check, local_root = job.check_roots, job.input_root

    def check_roots(paths: tuple[str, ...]) -> None:
        return check_url_roots(paths) if any(is_url(p) for p in paths) else local_check(paths)

    def input_root(paths: tuple[str, ...]) -> str:
        return url_input_root(paths) if paths and all(is_url(p) for p in paths) else local_root(paths)

    check_roots.takes_urls = True  # type: ignore[attr-defined]
    job.check_roots, job.input_root = check_roots, input_root
