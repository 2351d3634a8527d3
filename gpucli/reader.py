"""Find input files under the roots and read them, off the event loop.

The walk uses `os.scandir` (no stat per file beyond what the directory entry gives);
reading goes in chunks of files per `asyncio.to_thread` call with several chunks in
flight (measured while planning: 1.1 s for 20k small files cold, against 3.4 s with
aiofiles). Nothing here ever opens a FIFO, socket or device: they would block forever.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucli.errors import InputError, UsageError
from gpucli.records import Failure, Item, Source
from gpucli.state import digest

NON_REGULAR = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device"}


@dataclass(frozen=True)
class WalkFilter:
    suffixes: tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def wants(self, rel: str) -> bool:
        """`--include` globs replace the task's suffixes; `--exclude` always wins.
        Globs match the relative path or the file name."""
        name = rel.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in self.exclude):
            return False
        if self.include:
            return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in self.include)
        return name.lower().endswith(self.suffixes) if self.suffixes else True


@dataclass(slots=True)
class Found:
    """What the walk yields: a readable source, or a record for a skipped/broken entry."""

    source: Source | None = None
    failure: Failure | None = None


def common_base(roots: list[Path]) -> Path:
    """Rows carry paths relative to this: the root directory itself, a file's directory,
    or for several roots their deepest common directory."""
    dirs = [r if r.is_dir() else r.parent for r in roots]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def walk(roots: list[str], flt: WalkFilter) -> Iterator[Found]:
    """Yield every wanted file under the roots, in sorted order, exactly once."""
    paths = [Path(os.path.abspath(r)) for r in roots]
    for p in paths:
        if not p.exists() and not p.is_symlink():
            raise UsageError(f"{p}: no such file or directory")
    base = common_base(paths)
    seen_dirs: set[str] = set()
    next_id = 0
    for root in paths:
        real_root = os.path.realpath(root)
        for found in _walk_one(root, real_root, base, flt, seen_dirs):
            if found.source is not None:
                found.source.id = next_id
                next_id += 1
            yield found


def _walk_one(root: Path, real_root: str, base: Path, flt: WalkFilter, seen: set[str]) -> Iterator[Found]:
    if not root.is_dir():
        yield from _entry(str(root), _rel(str(root), base), real_root, flt, explicit=True)
        return
    stack = [str(root)]
    while stack:
        directory = stack.pop()
        real = os.path.realpath(directory)
        if real in seen:
            continue  # a symlink cycle inside the root, or two roots that overlap
        seen.add(real)
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield Found(failure=Failure(_rel(directory, base), "read", f"cannot list directory: {exc.strerror}"))
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = _rel(entry.path, base)
            if not _is_dir(entry):
                yield from _entry(entry.path, rel, real_root, flt, explicit=False)
            elif not entry.is_symlink():
                subdirs.append(entry.path)
            elif _inside(entry.path, real_root):
                continue  # its files are reached under their real path: each file once
            else:
                yield Found(failure=Failure(rel, "skip", "symlink to a directory outside the root; not followed"))
        stack.extend(reversed(subdirs))


def _entry(path: str, rel: str, real_root: str, flt: WalkFilter, explicit: bool) -> Iterator[Found]:
    if not explicit and not flt.wants(rel):
        return
    if os.path.islink(path):
        target = os.path.realpath(path)
        if not os.path.exists(path):
            reason = "symlink loop" if _is_loop(path) else f"dangling symlink (target {os.readlink(path)!r} missing)"
            yield Found(failure=Failure(rel, "read", reason))
            return
        if not explicit and not _inside(target, real_root):
            yield Found(failure=Failure(rel, "skip", "symlink leaves the root; not followed"))
            return
    try:
        st = os.stat(path)
    except OSError as exc:
        yield Found(failure=Failure(rel, "read", f"cannot stat: {exc.strerror}"))
        return
    kind = stat.S_IFMT(st.st_mode)
    if kind != stat.S_IFREG:
        yield Found(failure=Failure(rel, "read", f"not a regular file ({NON_REGULAR.get(kind, 'special file')})"))
        return
    yield Found(source=Source(id=-1, path=rel, abspath=path, size=st.st_size, mtime_ns=st.st_mtime_ns))


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _is_loop(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == 40  # ELOOP
    return False


def _inside(path: str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _rel(path: str, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


# --- reading -------------------------------------------------------------------------------

@dataclass(slots=True)
class ReadResult:
    source: Source
    items: list[Item] | None
    failure: Failure | None
    seconds: float
    unchanged: bool = False  # done in an earlier run, same content: nothing to do


# path -> (size, mtime_ns, digest) of inputs an earlier run finished, for incremental runs
Lookup = Callable[[list[str]], dict[str, Any]]


def read_source(source: Source, prepare: Callable[[Source, bytes], list[Item]], max_bytes: int,
                known: Any = None) -> ReadResult:
    """Read one file and cut it into items; any problem becomes a failure record. With
    `known` (the ledger's entry), a file whose content hash is unchanged is not prepared."""
    t0 = time.perf_counter()
    try:
        data = _read_bytes(source, max_bytes)
        source.digest = digest(data)
        if known is not None and known.digest == source.digest:
            return ReadResult(source, None, None, time.perf_counter() - t0, unchanged=True)
        items = prepare(source, data)
        if not items:
            raise InputError("preprocess", "nothing to process in this file")
        failure = None
    except InputError as exc:
        items, failure = None, Failure(source.path, exc.stage, str(exc))
    except Exception as exc:  # a decoder bug must cost one file, not the run
        items, failure = None, Failure(source.path, "preprocess", f"{type(exc).__name__}: {exc}")
    return ReadResult(source, items, failure, time.perf_counter() - t0)


def _read_bytes(source: Source, max_bytes: int) -> bytes:
    try:
        fd = os.open(source.abspath, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError("read", f"cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError("read", "not a regular file")
        if st.st_size > max_bytes:
            raise InputError("read", f"file is {st.st_size / 2**20:.1f} MiB, over --max-file-mb "
                                     f"{max_bytes / 2**20:g}; raise the limit to read it")
        if st.st_size == 0:
            raise InputError("read", "empty file (0 bytes)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(min(st.st_size, max_bytes) + 1)  # not a max_bytes buffer per file
    except OSError as exc:
        raise InputError("read", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


async def read_all(
    found: Iterator[Found],
    prepare: Callable[[Source, bytes], list[Item]],
    max_bytes: int,
    chunk_files: int = 64,
    in_flight: int = 8,
    lookup: Lookup | None = None,
) -> AsyncIterator[ReadResult | Failure]:
    """Walk and read with `in_flight` thread calls of `chunk_files` files each, yielding
    results as chunks finish. The walk itself also runs in a thread. With `lookup`, files an
    earlier run finished are not even read when their size and mtime are unchanged."""

    def read_chunk(sources: list[Source]) -> list[ReadResult]:
        known = lookup([s.path for s in sources]) if lookup else {}
        results = []
        for s in sources:
            k = known.get(s.path)
            k = k if k is not None and k.status == "done" else None
            if k is not None and (k.size, k.mtime_ns) == (s.size, s.mtime_ns):
                s.digest = k.digest
                results.append(ReadResult(s, None, None, 0.0, unchanged=True))
            else:
                results.append(read_source(s, prepare, max_bytes, k))
        return results

    def next_chunk() -> tuple[list[Source], list[Failure], bool]:
        sources, failures = [], []
        for f in found:
            if f.source is not None:
                sources.append(f.source)
            elif f.failure is not None:
                failures.append(f.failure)
            if len(sources) >= chunk_files:
                return sources, failures, False
        return sources, failures, True

    pending: set[asyncio.Task] = set()
    done_walking = False
    while not done_walking or pending:
        while not done_walking and len(pending) < in_flight:
            sources, failures, done_walking = await asyncio.to_thread(next_chunk)
            for failure in failures:
                yield failure
            if sources:
                pending.add(asyncio.ensure_future(asyncio.to_thread(read_chunk, sources)))
        if not pending:
            break
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in finished:
            for result in task.result():
                yield result
