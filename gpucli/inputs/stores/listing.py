"""The walk of URL roots: keys under a prefix as blocks of `Source`, prefixes as directories.

The same contract as gpucli/inputs/walk.py's `walk_blocks`: blocks of `Source` and `Failure`, a
`WalkReport` filled for `--prune`, the include/exclude globs, names starting with '.' passed
over. A prefix is listed a page at a time with a '/' delimiter, 1000 keys a page (S3:
ListObjectsV2; GCS: objects.list with pageToken; Azure: List Blobs with a marker), each page a
block, so that memory holds one page and the prefixes still to list, never the tree: a prefix of a million keys is a thousand blocks. A prefix whose listing fails (access
denied, the store still failing after the retries, even on its last page) is `unlisted`: a
failure record names it and nothing under it is pruned, as for a directory that cannot be read.

A source's identity for the ledger comes from the listing: size, last-modified time (mtime, to
the second as stores give it) and ETag (S3, Azure) or generation (GCS): `Source.version`."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpucli.core.errors import UsageError
from gpucli.core.records import Failure, Source
from gpucli.core.stages import Stage
from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.retry import reason, retrying
from gpucli.inputs.stores.url import PROTOCOLS, StoreUrl, common_root, is_url, redact, relative

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
    objects = [_object_info(fs, u) for u in urls]
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


def _object_info(fs: Any, url: StoreUrl) -> dict | None:
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
        self.pages = {"s3fs": self._s3_pages, "gcsfs": self._gcs_pages, "adlfs": self._azure_pages}[
            PROTOCOLS[base.protocol]]

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

    def _s3_pages(self, prefix: str) -> Iterator[tuple[list[dict], list[str]]]:
        """(objects, sub-prefixes) of each page of ListObjectsV2 under `prefix/`."""
        kwargs: dict[str, Any] = {"Bucket": self.base.bucket, "Prefix": f"{prefix}/" if prefix else "",
                                  "Delimiter": "/", "MaxKeys": PAGE_KEYS}
        while True:
            page = filesystems.run(self.fs, retrying, lambda kw=dict(kwargs): self.fs._call_s3("list_objects_v2", **kw))
            objects = [{"key": c["Key"], "size": c["Size"], "mtime": c.get("LastModified"),
                        "version": c.get("ETag", "")} for c in page.get("Contents", [])]
            yield objects, [p["Prefix"].rstrip("/") for p in page.get("CommonPrefixes", [])]
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def _gcs_pages(self, prefix: str) -> Iterator[tuple[list[dict], list[str]]]:
        """(objects, sub-prefixes) of each page of objects.list under `prefix/` (gcsfs's one-page
        request; its `_ls` gathers every page of the prefix first)."""
        params: dict[str, Any] = {"prefix": f"{prefix}/" if prefix else None, "delimiter": "/",
                                  "maxResults": PAGE_KEYS}

        while True:
            page = filesystems.run(self.fs, retrying, lambda q=dict(params): self.fs._call(
                "GET", "b/{}/o", self.base.bucket, json_out=True, **q))
            objects = [{"key": i["name"], "size": int(i.get("size") or 0), "mtime": i.get("updated"),
                        "version": i.get("generation", "")} for i in page.get("items", [])]
            yield objects, [p.rstrip("/") for p in page.get("prefixes", [])]
            if not page.get("nextPageToken"):
                return
            params["pageToken"] = page["nextPageToken"]

    def _azure_pages(self, prefix: str) -> Iterator[tuple[list[dict], list[str]]]:
        """(objects, sub-prefixes) of each page of List Blobs under `prefix/`, through adlfs's
        service client (its `_ls` gathers every page of the prefix first)."""
        from azure.storage.blob import BlobProperties

        token: str | None = None
        while True:
            items, token = filesystems.run(self.fs, retrying, lambda t=token: self._azure_page(prefix, t))
            blobs = [i for i in items if isinstance(i, BlobProperties)]
            objects = [{"key": b.name, "size": b.size, "mtime": b.last_modified, "version": _quoted(b.etag)}
                       for b in blobs]
            yield objects, [i.name.rstrip("/") for i in items if not isinstance(i, BlobProperties)]
            if not token:
                return

    async def _azure_page(self, prefix: str, token: str | None) -> tuple[list[Any], str | None]:
        """One page from `token` on (a pager of its own, so that a retried page asks again for the same one)."""
        async with self.fs.service_client.get_container_client(self.base.bucket) as container:
            pager = container.walk_blobs(name_starts_with=f"{prefix}/" if prefix else None, delimiter="/",
                                         results_per_page=PAGE_KEYS).by_page(continuation_token=token)
            page = await pager.__anext__()
            items = [item async for item in page]
        return items, pager.continuation_token

    def _block(self, objects: list[dict]) -> list[Source | Failure]:
        out: list[Source | Failure] = []
        for obj in objects:
            key = obj["key"]
            rel = relative(key, self.base)
            name = posixpath.basename(key)
            if key.endswith("/") or not name:
                continue  # a "directory marker" a console made
            if name.startswith(".") or not self.flt.wants(rel):
                self.report.pass_over(name)
                continue
            out.append(self._source(key, obj))
        return out

    def _source(self, key: str, obj: dict) -> Source:
        """A Source for an object: `abspath` its URL, `version` its ETag or generation."""
        url = str(StoreUrl(self.base.protocol, self.base.bucket, key))
        mtime = obj.get("mtime") or _mtime_of(obj)
        return Source(-1, relative(key, self.base), url, int(obj.get("size") or 0), _ns(mtime),
                      version=str(obj.get("version") or _version_of(obj)))


def _quoted(etag: str | None) -> str:
    """An Azure ETag as adlfs's `_info` gives it (quoted), so that a root naming one blob and its
    prefix's listing give it the same version."""
    return f'"{etag.strip(chr(34))}"' if etag else ""


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
