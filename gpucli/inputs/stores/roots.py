"""A run's checks of URL roots, and the root its rows are relative to: gpucli/engines/job.py's
`check_roots` and `input_root` ask here when the roots are URLs (nothing of this module is
imported for local roots)."""

from __future__ import annotations

from gpucli.inputs.stores.url import StoreUrl, common_root


def check_url_roots(paths: tuple[str, ...]) -> None:
    """Each URL root parses (a protocol we read, a bucket, no credential in it) and the roots
    are all URLs in one bucket. Whether a prefix holds anything is the listing's to say: an
    empty prefix is an empty root (exit 3 unless --allow-empty), an unlistable one a failure."""
    from gpucli.inputs.stores.listing import parse_roots

    common_root(parse_roots(list(paths)))


def url_input_root(paths: tuple[str, ...]) -> str:
    """The URL the rows' `path` is relative to (the metadata's `gpucli.root`): the root prefix,
    or the deepest common one (an object root's own prefix is resolved by the listing; here the
    roots as given)."""
    return str(common_root([StoreUrl.parse(p) for p in paths]))
