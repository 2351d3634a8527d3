"""One prefix's listing, a page at a time, in each store's own API: (objects, sub-prefixes) per
page, with a '/' delimiter (S3: ListObjectsV2; GCS: objects.list with pageToken; Azure: List
Blobs with a marker). The walk (listing.py) reads every page; the root check (roots.py) one
page of one key. An object is a dict: key, size, mtime, version (ETag or generation)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.retry import RetryPolicy, retrying
from gpucli.inputs.stores.url import PROTOCOLS, StoreUrl

Page = tuple[list[dict], list[str]]


@dataclass(frozen=True)
class Pages:
    """The pages of prefixes in one bucket: `keys` keys (and sub-prefixes) a page, each request
    through `retrying` (with `policy`, or retry.POLICY)."""

    fs: Any
    bucket: StoreUrl  # its protocol and bucket; the key is not read
    keys: int
    policy: RetryPolicy | None = None

    def __call__(self, prefix: str) -> Iterator[Page]:
        """Every page of the listing of `prefix/` ('' for the bucket's top)."""
        store = {"s3fs": self._s3, "gcsfs": self._gcs, "adlfs": self._azure}[PROTOCOLS[self.bucket.protocol]]
        return store(prefix)

    def _run(self, call: Any) -> Any:
        return filesystems.run(self.fs, retrying, call, self.policy)

    def _s3(self, prefix: str) -> Iterator[Page]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket.bucket, "Prefix": f"{prefix}/" if prefix else "",
                                  "Delimiter": "/", "MaxKeys": self.keys}
        while True:
            page = self._run(lambda kw=dict(kwargs): self.fs._call_s3("list_objects_v2", **kw))
            objects = [{"key": c["Key"], "size": c["Size"], "mtime": c.get("LastModified"),
                        "version": c.get("ETag", "")} for c in page.get("Contents", [])]
            yield objects, [p["Prefix"].rstrip("/") for p in page.get("CommonPrefixes", [])]
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def _gcs(self, prefix: str) -> Iterator[Page]:
        """gcsfs's one-page request (its `_ls` gathers every page of the prefix first)."""
        params: dict[str, Any] = {"prefix": f"{prefix}/" if prefix else None, "delimiter": "/",
                                  "maxResults": self.keys}
        while True:
            page = self._run(lambda q=dict(params): self.fs._call("GET", "b/{}/o", self.bucket.bucket,
                                                                  json_out=True, **q))
            objects = [{"key": i["name"], "size": int(i.get("size") or 0), "mtime": i.get("updated"),
                        "version": i.get("generation", "")} for i in page.get("items", [])]
            yield objects, [p.rstrip("/") for p in page.get("prefixes", [])]
            if not page.get("nextPageToken"):
                return
            params["pageToken"] = page["nextPageToken"]

    def _azure(self, prefix: str) -> Iterator[Page]:
        """Through adlfs's service client (its `_ls` gathers every page of the prefix first)."""
        from azure.storage.blob import BlobProperties

        token: str | None = None
        while True:
            items, token = self._run(lambda t=token: self._azure_page(prefix, t))
            blobs = [i for i in items if isinstance(i, BlobProperties)]
            objects = [{"key": b.name, "size": b.size, "mtime": b.last_modified, "version": _quoted(b.etag)}
                       for b in blobs]
            yield objects, [i.name.rstrip("/") for i in items if not isinstance(i, BlobProperties)]
            if not token:
                return

    async def _azure_page(self, prefix: str, token: str | None) -> tuple[list[Any], str | None]:
        """One page from `token` on (a pager of its own, so that a retried page asks again for the same one)."""
        async with self.fs.service_client.get_container_client(self.bucket.bucket) as container:
            pager = container.walk_blobs(name_starts_with=f"{prefix}/" if prefix else None, delimiter="/",
                                         results_per_page=self.keys).by_page(continuation_token=token)
            page = await pager.__anext__()
            items = [item async for item in page]
        return items, pager.continuation_token


def _quoted(etag: str | None) -> str:
    """An Azure ETag as adlfs's `_info` gives it (quoted), so that a root naming one blob and its
    prefix's listing give it the same version."""
    return f'"{etag.strip(chr(34))}"' if etag else ""
