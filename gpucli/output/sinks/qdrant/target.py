"""What `--out qdrant...` names: a server URL or an embedded storage path, a collection, options.

Parsing only: nothing here connects, nothing touches the disk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpucli.core.errors import UsageError

API_KEY_ENV = "QDRANT_API_KEY"
DEFAULT_PORT = 6333
DEFAULT_BATCH = 128
BATCH_RANGE = (64, 256)
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,255}$")
OPTIONS = {"text": "true/false: store chunk text in the payload (default true)",
           "batch": "points per upsert, 64-256 (default 128)"}
SCHEMES = ("qdrant://", "qdrants://", "qdrant:")
URL_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)  # qdrant:http://..., qdrant:s3://...: not a local path


@dataclass(frozen=True)
class Target:
    """A parsed `qdrant...` output: a server URL or an embedded storage path, plus a collection."""

    collection: str
    url: str = ""  # server mode: http(s)://host:port[/prefix]
    path: str = ""  # embedded mode: the storage directory
    text: bool = True
    batch: int = DEFAULT_BATCH
    query: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return bool(self.path)

    @property
    def server(self) -> str:
        """host:port[/prefix] of a server target (no scheme: http and https name one server)."""
        return self.url.split("://", 1)[1] if self.url else ""

    @property
    def display(self) -> str:
        """The output as shown to people: no secrets (the key never is in it)."""
        if self.local:
            return f"qdrant:{self.path}/{self.collection}"
        scheme = "qdrants" if self.url.startswith("https:") else "qdrant"
        return f"{scheme}://{self.server}/{self.collection}"


def is_qdrant(target: str) -> bool:
    return target.lower().startswith(SCHEMES)


def parse_target(target: str) -> Target:
    """`qdrant://host:port/coll`, `qdrants://...` or `qdrant:PATH/coll` -> Target (UsageError if bad)."""
    lower = target.lower()
    if lower.startswith(("qdrant://", "qdrants://")):
        return _parse_server(target)
    if lower.startswith("qdrant:"):
        return _parse_local(target[len("qdrant:"):])
    raise UsageError(f"{target!r} is not a Qdrant output (qdrant://HOST:PORT/COLLECTION or qdrant:PATH/COLLECTION)")


def _parse_server(target: str) -> Target:
    parts = urlsplit(target)
    if "@" in parts.netloc:
        raise UsageError("a Qdrant URL must not carry credentials; put the API key in the environment variable "
                         f"{API_KEY_ENV}")
    options = _options(parts.query)
    scheme = "https" if parts.scheme.lower() == "qdrants" else "http"
    if not parts.hostname:
        raise UsageError("Qdrant URL needs a host: qdrant://HOST:PORT/COLLECTION")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise UsageError("Qdrant URL has a bad port: qdrant://HOST:PORT/COLLECTION") from None
    segments = [s for s in parts.path.split("/") if s]
    if not segments:
        raise UsageError("Qdrant URL names no collection: qdrant://HOST:PORT/COLLECTION")
    collection = _collection(segments[-1])
    prefix = "/" + "/".join(segments[:-1]) if len(segments) > 1 else ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Target(collection, url=f"{scheme}://{host}:{port}{prefix}", **options)


def _parse_local(rest: str) -> Target:
    scheme = URL_SCHEME.match(rest)
    if scheme:  # qdrant:http://host:6333/docs made a local directory named "http:" in the working directory
        raise UsageError(f"qdrant:{rest}: a server is named qdrant://HOST:PORT/COLLECTION "
                         f"(qdrants:// for HTTPS); qdrant:PATH/COLLECTION is embedded Qdrant in a local directory")
    path, _, query = rest.partition("?")
    options = _options(query)
    path = path.rstrip("/")
    storage, _, name = path.rpartition("/")
    if not storage or not name:
        raise UsageError("embedded Qdrant output needs a storage directory and a collection: qdrant:PATH/COLLECTION "
                         "(e.g. qdrant:./qdrant_data/docs)")
    return Target(_collection(name), path=storage, **options)


def _collection(name: str) -> str:
    if not NAME.match(name) or not name.strip("."):  # "." and ".." would name a directory of the state
        raise UsageError(f"Qdrant collection name {name!r}: use letters, digits, '_', '-' and '.'")
    return name


def _options(query: str) -> dict[str, Any]:
    raw = dict(parse_qsl(query, keep_blank_values=True))
    secret = [k for k in raw if "key" in k.lower() or "token" in k.lower()]
    if secret:
        raise UsageError(f"the Qdrant API key is read only from the environment variable {API_KEY_ENV}, "
                         "never from the URL")
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in OPTIONS.items())
        raise UsageError(f"unknown Qdrant output option(s) {', '.join(unknown)}; known: {known}")
    options: dict[str, Any] = {"query": raw}
    if "text" in raw:
        options["text"] = _flag(raw["text"])
    if "batch" in raw:
        options["batch"] = _batch(raw["batch"])
    return options


def _flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise UsageError(f"Qdrant option text={raw!r}: use true or false")
    return value in ("1", "true", "yes", "on")


def _batch(raw: str) -> int:
    try:
        batch = int(raw)
    except ValueError:
        batch = -1
    if not BATCH_RANGE[0] <= batch <= BATCH_RANGE[1]:
        raise UsageError(f"Qdrant option batch={raw!r}: points per upsert must be {BATCH_RANGE[0]}-{BATCH_RANGE[1]}")
    return batch
