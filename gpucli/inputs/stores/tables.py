"""`embed --from s3://bucket/posts.parquet`: a table in object storage, read from a local copy.

A table is one object read whole (Parquet's footer is at its end, CSV and JSON lines are read
row by row from the start), so it is copied once per process to a temporary file, streamed (no
table in memory), and gpucli/inputs/tables.py reads the copy as it reads a local table. The record keys
are `NAME//ID` as for a local table (NAME the object's name); the records' mtime is the
object's last-modified time, so that an unchanged table's records are unchanged on a rerun."""

from __future__ import annotations

import atexit
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass

from gpucli.core.errors import UsageError
from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.listing import _ns
from gpucli.inputs.stores.retry import reason, retrying
from gpucli.inputs.stores.url import StoreUrl

_COPIES: dict[str, LocalCopy] = {}


@dataclass(frozen=True)
class LocalCopy:
    path: str  # the temporary file
    name: str  # the object's name: the records' table in their keys
    mtime_ns: int  # the object's last-modified time


def local_copy(url: str) -> LocalCopy:
    """The table's local copy, made on the first call of this process (UsageError when the
    object cannot be read: a --from that names nothing usable is bad usage, exit 2)."""
    if url in _COPIES:
        return _COPIES[url]
    parsed = StoreUrl.parse(url)
    fs = filesystems.filesystem(parsed.protocol)
    directory = tempfile.mkdtemp(prefix="gpucli-table-")
    atexit.register(shutil.rmtree, directory, True)
    name = posixpath.basename(parsed.key)
    target = os.path.join(directory, name or "table")
    try:
        info = filesystems.run(fs, retrying, lambda: fs._info(str(parsed)))
        if info.get("type") != "file":
            raise UsageError(f"--from {parsed}: not an object (a prefix?); name one table")
        filesystems.run(fs, retrying, lambda: fs._get_file(str(parsed), target))
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the table cannot be read: say why, as for a local one
        raise UsageError(f"--from {parsed}: {reason(exc)}") from None
    copy = LocalCopy(target, name, _ns(info.get("LastModified") or info.get("last_modified") or info.get("updated")))
    _COPIES[url] = copy
    return copy
