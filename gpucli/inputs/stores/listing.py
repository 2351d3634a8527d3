"""The walk of URL roots: keys under a prefix as blocks of `Source`, prefixes as directories.

The same contract as gpucli/inputs/walk.py's `walk_blocks`: blocks of `Source` and `Failure`, a
`WalkReport` filled for `--prune`, the include/exclude globs, names starting with '.' passed
over. A prefix is listed a page at a time with a '/' delimiter, 1000 keys a page (pages.py),
each page a block, so that memory holds one page and the prefixes still to list, never the
tree: a prefix of a million keys is a thousand blocks. A prefix whose listing fails (access
denied, the store still failing after the retries, even on its last page) is `unlisted`: a
failure record names it and nothing under it is pruned, as for a directory that cannot be read.
A root in a missing bucket, or one the credentials may not list, is refused before any work
(roots.py), as a missing or unreadable directory is; met here (the bucket deleted since), it is
a failure record too.

A source's identity for the ledger comes from the listing: size, last-modified time (mtime, to
the second as stores give it) and ETag (S3, Azure) or generation (GCS): `Source.version`."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpucli.core.errors import UsageError
from gpucli.core.records import Failure, Source
from gpucli.core.stages import SkipReason, Stage
from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.pages import Pages
from gpucli.inputs.stores.retry import reason, retrying
from gpucli.inputs.stores.url import StoreUrl, common_root, is_url, redact, relative

if TYPE_CHECKING:
    from gpucli.inputs.scope import WalkFilter, WalkReport

PAGE_KEYS = 1000  # keys (and sub-prefixes) per listing request: S3's and GCS's most, Azure's default 5000


def parse_roots(roots: list[str]) -> list[StoreUrl]:
    """The roots as URLs; local paths beside URLs are refused (rows are relative to one root)."""
    if not all(is_url(r) for r in roots):
        raise UsageError("give either local paths or URLs as PATH, not both: rows' paths are relative to one root")
    return [StoreUrl.parse(r) for r in roots]


def list_blocks(roots: list[str], flt: WalkFilter, report: WalkReport) -> Iterator[list[Source | Failure]]:
    """Every wanted object under the URL roots, each once, in blocks, ids numbered from 0."""
    urls = parse_roots(roots)
    fs = filesystems.filesystem(urls[0].protocol)
    objects = [object_info(fs, u) for u in urls]
    base = common_root([u if info is None else _parent(u) for u, info in zip(urls, objects)])
    lister = _Lister(fs, base, flt, report)
    next_id = 0
    for url, info in zip(urls, objects):
        for block in lister.root(url, info):
            for entry in block:
                if isinstance(entry, Source):
                    entry.id = next_id
                    next_id += 1
            yield block
    report.complete = True


def _parent(url: StoreUrl) -> StoreUrl:
    return StoreUrl(url.protocol, url.bucket, posixpath.dirname(url.key))


def object_info(fs: Any, url: StoreUrl) -> dict | None:
    """The listing entry of a root that names one object (`s3://b/docs/a.txt`), or None for a
    prefix (one HEAD per root; a bucket is a prefix)."""
    if not url.key:
        return None
    try:
        info = filesystems.run(fs, retrying, lambda: fs._info(str(url)))
    except Exception:  # noqa: BLE001 - not an object (or not visible as one): it is listed as a prefix
        return None
    return info if info.get("type") == "file" else None


class _Lister:
    """One walk's state: the base rows are relative to, the filter, the report."""

    def __init__(self, fs: Any, base: StoreUrl, flt: WalkFilter, report: WalkReport) -> None:
        self.fs, self.base, self.flt, self.report = fs, base, flt, report
        self.pages = Pages(fs, base, PAGE_KEYS)

    def root(self, url: StoreUrl, info: dict | None) -> Iterator[list[Source | Failure]]:
        """A root's blocks: the object it names (`info`), or what is under its prefix."""
        rel_root = relative(url.key, self.base) or "."
        self.report.roots.append(rel_root)
        if info is not None:
            yield [self._source(url.key, info)]
            return
        found = False
        for block in self._tree(url):
            found = found or bool(block)
            if block:
                yield block
        if not found and rel_root not in self.report.unlisted:
            self.report.empty_roots.append(rel_root)

    def _tree(self, root: StoreUrl) -> Iterator[list[Source | Failure]]:
        stack = [root.key]
        while stack:
            prefix = stack.pop()
            subdirs: list[str] = []
            yield from self._prefix(prefix, subdirs)
            stack.extend(reversed(subdirs))

    def _prefix(self, prefix: str, subdirs: list[str]) -> Iterator[list[Source | Failure]]:
        """One prefix's objects, a page at a time; its sub-prefixes go to `subdirs`."""
        pages = self.pages(prefix)
        rel_dir = relative(prefix, self.base) or "."
        try:
            for objects, prefixes in pages:
                subdirs.extend(p for p in prefixes if not posixpath.basename(p).startswith("."))
                yield self._block(objects)
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - any listing error: nothing under it is pruned
            self.report.unlisted.append(rel_dir)
            where = redact(str(StoreUrl(self.base.protocol, self.base.bucket, prefix)))
            yield [Failure(rel_dir, Stage.READ, f"cannot list {where}/: {reason(exc, 'list')}")]

    def _block(self, objects: list[dict]) -> list[Source | Failure]:
        out: list[Source | Failure] = []
        for obj in objects:
            key = obj["key"]
            rel = relative(key, self.base)
            name = posixpath.basename(key)
            if key.endswith("/") or not name:
                continue  # a "directory marker" a console made
            if name.startswith("."):
                continue  # a dot-file, left out as on disk (not counted: hidden files are not inputs)
            reason = self.flt.why_not(rel)
            if reason is None and self.flt.sniffs(name):
                reason = SkipReason.NO_READER  # an object is not sniffed: a request per extensionless one
            if reason is not None:
                self.report.pass_over(name, reason)
                continue
            out.append(self._source(key, obj))
        return out

    def _source(self, key: str, obj: dict) -> Source:
        """A Source for an object: `abspath` its URL, `version` its ETag or generation."""
        url = str(StoreUrl(self.base.protocol, self.base.bucket, key))
        mtime = obj.get("mtime") or _mtime_of(obj)
        return Source(-1, relative(key, self.base), url, int(obj.get("size") or 0), _ns(mtime),
                      version=str(obj.get("version") or _version_of(obj)))


def _version_of(info: dict) -> str:
    for name in ("generation", "ETag", "etag", "version_id", "VersionId"):  # GCS: generation, as its listing
        if info.get(name):
            return str(info[name])
    return ""


def _mtime_of(info: dict) -> Any:
    for name in ("LastModified", "last_modified", "updated", "mtime"):
        if info.get(name):
            return info[name]
    return None


def _ns(mtime: Any) -> int:
    """Nanoseconds since the epoch of a store's time (a datetime, an ISO string, seconds)."""
    if mtime is None:
        return 0
    if isinstance(mtime, str):
        mtime = datetime.fromisoformat(mtime.replace("Z", "+00:00"))
    if isinstance(mtime, datetime):
        return int(mtime.timestamp() * 1_000_000) * 1000
    return int(float(mtime) * 1e9)
