"""URL roots: which strings are object-store URLs, their parts, and paths relative to a root.

No fsspec here: the walk and the reader ask `is_url` of every root and every source's
`abspath`, and the local path must stay as fast as it was (one regular-expression match per
root, a prefix test per read chunk)."""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass

from gpucli.core.errors import UsageError

# protocol -> (the fsspec package that serves it, the pip extra that installs it)
PROTOCOLS: dict[str, str] = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
                             "abfs": "adlfs", "abfss": "adlfs"}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# query keys that carry a credential (an Azure SAS, a presigned S3 URL, a GCS signed URL)
_SECRET_QUERY = re.compile(r"(sig|signature|x-amz-signature|x-amz-credential|x-goog-signature|token|key)=",
                           re.IGNORECASE)
# environment variables whose values are secrets: never in a message, whatever printed it
# (the Azure CLI's names and adlfs's: AZURE_STORAGE_KEY, AZURE_STORAGE_ACCOUNT_KEY)
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY",
              "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET",
              "AZURE_STORAGE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN")
# the secret parts of an Azure connection string (its account name and endpoints are not secrets)
_CONNECTION_SECRET = re.compile(r"((?:AccountKey|SharedAccessSignature|SharedAccessKey)=)([^;\s'\"]+)",
                                re.IGNORECASE)


def is_url(path: str) -> bool:
    """Whether a root (or a source's `abspath`) names an object in a store, not a local file."""
    return "://" in path and _URL.match(path) is not None


@dataclass(frozen=True)
class StoreUrl:
    """`protocol://bucket/key`; `key` has no leading or trailing slash ('' for a whole bucket)."""

    protocol: str
    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, url: str) -> StoreUrl:
        """A root as given, checked: a protocol we read, a bucket, no credential in it."""
        match = _URL.match(url)
        if match is None:
            raise UsageError(f"{url!r} is not a URL")
        protocol = match.group(1).lower()
        if protocol not in PROTOCOLS:
            known = ", ".join(f"{p}://" for p in PROTOCOLS)
            raise UsageError(f"{redact(url)}: gpucli reads local paths and {known} URLs, not {protocol}://")
        rest = url[match.end():]
        if "?" in rest or "#" in rest:
            raise UsageError(f"{redact(url)}: a URL root takes no query or fragment; credentials come from the "
                             "store's standard chain (environment, config files, instance roles), never the URL")
        bucket, _, key = rest.partition("/")
        if "@" in bucket or ":" in bucket:  # no bucket name holds ':'; a key with '/' in it splits at its first one
            raise UsageError(f"{redact(url)}: credentials in a URL are refused (argv is visible to every user of "
                             "the machine); set them in the environment or the store's config file")
        if not bucket:
            raise UsageError(f"{url}: name a bucket (e.g. {protocol}://my-bucket/prefix)")
        return cls(protocol, bucket, posixpath.normpath("/" + key).strip("/") if key.strip("/") else "")

    @property
    def path(self) -> str:
        """`bucket/key`, as fsspec names it."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    def __str__(self) -> str:
        return f"{self.protocol}://{self.path}"

    def child(self, rel: str) -> StoreUrl:
        return StoreUrl(self.protocol, self.bucket, f"{self.key}/{rel}" if self.key else rel)


def common_root(roots: list[StoreUrl]) -> StoreUrl:
    """Rows carry paths relative to this: the root prefix itself, or for several roots their
    deepest common prefix ending at a '/' (in one store); an object root's own prefix."""
    if len({r.protocol for r in roots}) > 1:
        raise UsageError("URL roots must share one protocol: " + ", ".join(map(str, roots)))
    if len({r.bucket for r in roots}) > 1:
        raise UsageError("URL roots must be in one bucket (rows' paths are relative to one root): "
                         + ", ".join(map(str, roots)))
    keys = [r.key.split("/") if r.key else [] for r in roots]
    common = []
    for parts in zip(*keys):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return StoreUrl(roots[0].protocol, roots[0].bucket, "/".join(common))


def relative(key: str, base: StoreUrl) -> str:
    """A key's path relative to the base's prefix (the row's `path`)."""
    return key[len(base.key) + 1:] if base.key else key


def redact(text: str) -> str:
    """`text` with anything that may be a credential removed: a URL's user-info and signed query,
    and the value of every secret variable of the store libraries' environment chain. Applied
    to every message gpucli writes about a URL root (failure records, notes, errors)."""
    text = re.sub(r"(://)[^/@\s]*@", r"\1***@", text)
    text = re.sub(r"(\?)[^\s]*", lambda m: "?***" if _SECRET_QUERY.search(m.group(0)) else m.group(0), text)
    text = _CONNECTION_SECRET.sub(r"\1***", text)
    for value in _secret_values():
        text = text.replace(value, "***")
    return text


def _secret_values() -> list[str]:
    """The secret variables' values, and the key (or signature) inside a connection string, which
    a message may quote alone; longest first, so that a value holding another goes whole."""
    values = [os.environ.get(name) or "" for name in SECRET_ENV]
    values += [m.group(2) for m in _CONNECTION_SECRET.finditer(os.environ.get("AZURE_STORAGE_CONNECTION_STRING", ""))]
    return sorted({v for v in values if len(v) >= 8}, key=len, reverse=True)
