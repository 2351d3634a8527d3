"""SHA-256 of large files (model weights, exported graphs), remembered by the file's identity.

Every worker of every run checked the same 90 MB files again: the default model's weights
against its package's digests, the exported ONNX graph against its sidecar (~0.2 s of each
worker's start). A digest is remembered on disk under the per-user cache
(`$XDG_CACHE_HOME/gpucli/models/digests/`), keyed by the file's real path, size, modification and
change times (nanoseconds) and inode, as git's index remembers what it hashed: a rewrite, a
reinstall or a `touch` makes a new key. Like git's "racy" rule, a file changed within the last
`RACY_S` seconds is hashed every time and not remembered, because a write in the same clock
tick as the hash would leave its times unchanged. A cache that cannot be written only costs the
hash next time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

from gpucli.core.durable import write_durably

RACY_S = 2.0
HEX = frozenset("0123456789abcdef")


def default_cache_root() -> Path:
    """The per-user cache: $XDG_CACHE_HOME/gpucli, else ~/.cache/gpucli."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpucli"


def file_sha256(path: str | Path, cache_root: Path | None = None) -> str:
    """The hex SHA-256 of the file's bytes, remembered under `cache_root` (default: the per-user
    cache) by the file's identity (see the module doc)."""
    st = os.stat(path)
    stamp = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"
    memo = (cache_root or default_cache_root()) / "digests" / hashlib.sha256(stamp.encode()).hexdigest()[:40]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        known = memo.read_text(encoding="ascii").strip()
        if len(known) == 64 and all(c in HEX for c in known):  # a damaged memo is hashed again, not trusted
            return known
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    hexdigest = digest.hexdigest()
    if time.time() - max(st.st_mtime, st.st_ctime) > RACY_S:
        with contextlib.suppress(OSError):
            memo.parent.mkdir(parents=True, exist_ok=True)
            write_durably(memo, hexdigest, memo.with_name(f".{memo.name}.{os.getpid()}.tmp"))
    return hexdigest
