"""Inputs in object storage (`gpucli embed s3://bucket/prefix`), read through fsspec.

    url.py          what a URL root is, its parts, paths relative to it, redaction (no fsspec import)
    filesystems.py  one fsspec filesystem per protocol, opened with our retry and pool settings
    retry.py        which errors are transient, bounded retries with backoff, the reason a failure gives
    pages.py        one prefix's listing a page at a time, in each store's own API
    listing.py      the walk of a prefix: pages of keys as blocks of `Source`, prefixes as directories
    reading.py      the bytes of many objects at once (latency-bound: many requests in flight)
    roots.py        the checks before any work (a missing bucket, a root that may not be listed: exit 2)
                    and the root a run's rows are relative to, for URL roots

The local path never imports fsspec: `url.is_url` is a string test, and everything else here is
imported only when a root is a URL. Outputs stay local (see docs/buckets.md for why).
"""
