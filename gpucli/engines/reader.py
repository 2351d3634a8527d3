"""Read the inputs the walk found, off the event loop: bytes, content hash, `task.prepare_many`.

Reading goes in chunks of files, several chunks in flight, in reader threads (measured while
planning: 1.1 s for 20k small files cold, against 3.4 s with aiofiles) or in reader processes
(`ReaderProcesses`). The file opened is the one the walk found (gpucli/inputs/walk.py), and no other.
Objects in a bucket (an `abspath` that is a URL) are fetched a chunk at a time, all at once
(gpucli/inputs/stores/reading.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpucli.core.decision import Action, decide
from gpucli.core.errors import InputError
from gpucli.core.records import MOVED_IN_READ, Failure, Items, ReadChunk, Source
from gpucli.core.stages import SkipReason, Stage
from gpucli.inputs.compressed import inflate, is_compressed
from gpucli.inputs.stores.url import is_url
from gpucli.inputs.tables import Record, take_text
from gpucli.output.fingerprint import digest

# path -> (size, mtime_ns, digest, status) of inputs an earlier run knew, for incremental runs
Lookup = Callable[[list[str]], dict[str, Any]]


def read_chunk(sources: list[Source], task: Any, max_bytes: int, known: dict[str, Any] | None = None) -> ReadChunk:
    """Read files and cut them into one block with the task's `prepare_many`; any problem
    with one file becomes its failure record. With `known` (the ledger's entries), a file
    done earlier with the same size and mtime is not read, and one with the same content
    hash is not prepared."""
    chunk = ReadChunk(found=len(sources))
    todo, datas = [], []
    fetched = _fetched(sources, known, max_bytes) if sources and is_url(sources[0].abspath) else None
    for source in sources:
        decision = decide((known or {}).get(source.path), source)
        if decision.action is Action.UNCHANGED:
            source.digest = decision.done_digest
            chunk.unchanged.append(source)
            continue
        try:
            data = take_text(source)  # a table's record (gpucli/inputs/tables.py) carries its text
            if data is None:
                data = _read_bytes(source, max_bytes) if fetched is None else _taken(fetched, source)
                if is_compressed(source.path):  # notes.txt.gz: read as notes.txt (inputs/compressed.py)
                    data = inflate(source.path, data, max_bytes)
        except InputError as exc:
            chunk.failures.append(Failure(source.path, exc.stage, str(exc), cause=exc.cause))
            continue
        source.digest = digest(data)
        if decision.done_digest and decision.done_digest == source.digest:
            chunk.unchanged.append(source)
        else:
            todo.append(source)
            datas.append(data)
    if todo:
        chunk.block, failures = task.prepare_many(todo, datas)
        chunk.failures.extend(failures)
        running = set(chunk.block.source_ids.tolist()) if chunk.block is not None else set()
        chunk.sources = [s for s in todo if s.id in running]
    by_path = {s.path: s for s in sources}
    chunk.failures = [_with_stat(f, by_path.get(f.path)) for f in chunk.failures]
    return chunk


def _fetched(sources: list[Source], known: dict[str, Any] | None, max_bytes: int) -> dict[int, Any]:
    """Objects in a bucket (gpucli/inputs/stores/): the bytes of every one this chunk reads, fetched at
    once (many requests in flight), by source id; an unchanged object is not requested."""
    from gpucli.inputs.stores.reading import fetch

    wanted = [s for s in sources if decide((known or {}).get(s.path), s).action is Action.RUN]
    return dict(zip((s.id for s in wanted), fetch(wanted, max_bytes)))


def _taken(fetched: dict[int, Any], source: Source) -> bytes:
    data = fetched.pop(source.id)
    if isinstance(data, InputError):
        raise data
    return data


def _with_stat(failure: Failure, source: Source | None) -> Failure:
    import dataclasses

    return dataclasses.replace(failure, size=source.size, mtime_ns=source.mtime_ns) if source else failure


def _read_bytes(source: Source, max_bytes: int) -> bytes:
    """The bytes of the file the walk found, and of no other: the last component is opened
    without following a link (the walk gives a link's real target as `abspath`), and the
    opened file must be the one the walk stat'ed (device and inode), so a file swapped for a
    link, or a directory above it swapped for a link to another tree, is a failure record,
    not a read of what the link points to. The source takes the stat of the open file: a file
    rewritten after the walk has its rows and its ledger entry made from the content they hold."""
    try:
        fd = os.open(source.abspath, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(Stage.READ, "became a symbolic link after the walk; not followed") from None
        raise InputError(Stage.READ, f"cannot open: {exc.strerror}",
                         cause=MOVED_IN_READ if exc.errno == errno.ENOENT else "") from None
    try:
        st = os.fstat(fd)
        if source.ino and (st.st_dev, st.st_ino) != (source.dev, source.ino):
            raise InputError(Stage.READ, "replaced by another file after the walk; not read (a rerun reads it)",
                             cause=MOVED_IN_READ)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(Stage.READ, "not a regular file")
        source.size, source.mtime_ns = st.st_size, st.st_mtime_ns  # rewritten since the walk: the stat of what is read
        if st.st_size > max_bytes:  # a skip, not a failure: the limit is the user's choice
            raise InputError(Stage.SKIP, f"file is {st.st_size / 2**20:.1f} MiB, over --max-file-mb "
                                     f"{max_bytes / 2**20:g}; raise the limit to read it", cause=SkipReason.TOO_LARGE)
        if st.st_size == 0:
            raise InputError(Stage.READ, "empty file (0 bytes)")
        return _read_fd(fd, min(st.st_size, max_bytes) + 1)  # not a max_bytes buffer per file
    except OSError as exc:
        raise InputError(Stage.READ, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes, to the end of the file (plain `os.read`: a file object per file
    cost a fifth of the reader's time on one-sentence files)."""
    parts, got = [], 0
    while got < limit:
        part = os.read(fd, limit - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
        if got == limit - 1:  # the size fstat gave (the caller asks one more): no read just to see the end
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def read_chunks(
    found: Iterable[list[Source | Failure]],
    task: Any,
    max_bytes: int,
    chunk_files: int = 64,
    in_flight: int = 8,
    lookup: Lookup | None = None,
    seen: Callable[[list[str]], None] | None = None,
    busy: Any = contextlib.nullcontext(),
    processes: ReaderProcesses | None = None,
    attempts: Attempts | None = None,
) -> AsyncIterator[ReadChunk]:
    """Walk (`found`: the walk's blocks) and read `chunk_files` files at a time (a task's
    `read_weight` may count a file as several), `in_flight` chunks at once, yielding chunks as
    they finish. The walk runs in a thread. With `lookup`,
    files an earlier run finished are not even read when their size and mtime are unchanged.
    `seen` (for --prune) gets the paths of each chunk of the walk, inputs and failure records.
    `busy` (a context manager) times the reading. With `processes`, each chunk is read and
    prepared in a reader process: the thread that walked the chunk hands it over, and the event
    loop awaits the result (no thread waits for a reader). Without, reader threads read and
    prepare. With `attempts`, large inputs are recorded before they are prepared (`Attempts`)."""
    import asyncio  # here, not at the top: a reader process imports this module and needs no event loop

    def read(sources: list[Source]) -> ReadChunk:
        """One chunk in this thread (no reader processes)."""
        with busy:
            known = lookup([s.path for s in sources]) if lookup else None
            sources, refused, large = _guard_large(sources, attempts)
            chunk = read_chunk(sources, task, max_bytes, known)
            return _ended(chunk, refused, large, attempts)

    def hand_over(sources: list[Source]) -> Any:
        """One chunk to a reader process (in the walk's thread); the loop awaits `finish`. The
        chunk counts as busy until its reader is done with it, whoever awaits it (a stopped run
        drops the chunks it handed over)."""
        assert processes is not None, "a chunk handed to reader processes there are none of. This is a bug."
        busy.__enter__()
        try:
            known = lookup([s.path for s in sources]) if lookup else None
            sources, refused, large = _guard_large(sources, attempts)
            future = processes.submit(sources, max_bytes, known)
        except BaseException:
            busy.__exit__(None, None, None)
            raise
        future.add_done_callback(lambda _: busy.__exit__(None, None, None))
        return sources, refused, large, future

    async def finish(sources: list[Source], refused: list[Failure], large: list[str], future: Any) -> ReadChunk:
        assert processes is not None, "a chunk awaited from reader processes there are none of. This is a bug."
        chunk = await processes.result(future, sources)
        return await asyncio.to_thread(_ended, chunk, refused, large, attempts) if large \
            else _ended(chunk, refused, large, attempts)

    blocks = iter(found)
    rest: list[Source | Failure] = []  # what the last chunk left of a walk block
    weigh = getattr(task, "read_weight", None)  # files that count as several (documents), or None

    def next_sources() -> tuple[list[Source], list[Failure], bool, Any]:
        """The next chunk of the walk: (its sources, the walk's failure records, whether the walk
        ended, the chunk handed to a reader process if there are any)."""
        nonlocal rest
        sources, failures, size, weight, ended = [], [], 0, 0, False
        while True:
            block, rest = rest, []
            if not block:
                walked = next(blocks, None)
                if walked is None:
                    ended = True
                    break
                block = walked
            for i, entry in enumerate(block):
                if isinstance(entry, Source):
                    sources.append(entry)
                    size += entry.size
                    weight += 1 if weigh is None else weigh(entry.path)
                    if weight >= chunk_files or size >= CHUNK_BYTES:
                        rest = block[i + 1:]
                        break
                else:
                    failures.append(entry)
            else:
                continue
            break
        if seen is not None and (sources or failures):
            seen([s.path for s in sources] + [f.path for f in failures])
        handed = hand_over(sources) if processes is not None and sources else None
        return sources, failures, ended, handed

    pending: set[Any] = set()
    done_walking = False
    try:
        while not done_walking or pending:
            while not done_walking and len(pending) < in_flight:
                sources, failures, done_walking, handed = await asyncio.to_thread(next_sources)
                if failures:
                    yield ReadChunk(failures=failures, found=len(failures))
                if handed is not None:
                    pending.add(asyncio.ensure_future(finish(*handed)))
                elif sources:
                    pending.add(asyncio.ensure_future(asyncio.to_thread(read, sources)))
            if not pending:
                break
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for done in finished:
                yield done.result()
    finally:  # stopped, or one chunk failed the run: the others' outcomes no longer matter
        for task in pending:
            task.cancel()
            task.add_done_callback(_quiet)


def _ended(chunk: ReadChunk, refused: list[Failure], large: list[str], attempts: Attempts | None) -> ReadChunk:
    """A read chunk with the large inputs refused before reading; their attempts are over."""
    if large and attempts is not None:  # inputs are large only where attempts are recorded
        attempts.end(large)
    chunk.failures.extend(refused)
    chunk.found += len(refused)
    return chunk


def _quiet(task: Any) -> None:
    """Retrieve an abandoned read's outcome, so asyncio logs no 'exception never retrieved'."""
    if not task.cancelled():
        task.exception()


CHUNK_BYTES = 8 << 20  # a read chunk ends at `chunk_files` files or this many bytes of them
LARGE_INPUT_BYTES = 4 << 20  # inputs above this are recorded in the ledger before they are prepared
ATTEMPTS_BEFORE_REFUSING = 2


@dataclass
class Attempts:
    """Large inputs in the ledger while they are prepared: a file that killed its reader (the
    parent, or a reader process: out of memory on a huge text) is not tried a third time.
    Small inputs skip this, so the common path stays one ledger write per part."""

    begin: Callable[[list[Source]], dict[str, int]]
    end: Callable[[list[str]], None]


def _guard_large(sources: list[Source], attempts: Attempts | None) -> tuple[list[Source], list[Failure], list[str]]:
    """(sources to read, failure records for large inputs that crashed their reader twice,
    paths of the large inputs now recorded)."""
    large = [s for s in sources if s.size > LARGE_INPUT_BYTES] if attempts is not None else []
    if not large or attempts is None:
        return sources, [], []
    earlier = attempts.begin(large)
    bad = {p for p, count in earlier.items() if count >= ATTEMPTS_BEFORE_REFUSING}
    refused = [Failure(s.path, Stage.READ, f"the reader died twice while preparing this {s.size / 2**20:.0f} MiB file "
                       "(out of memory?); it is skipped until it changes: lower --max-file-mb to fail such files "
                       "at once, or give the machine more memory") for s in large if s.path in bad]
    return [s for s in sources if s.path not in bad], refused, [s.path for s in large]


class ReaderProcesses:
    """Reader processes: read, hash and prepare chunks of files on other cores than the parent's.

    Why: in threads, reading and tokenizing share the parent's GIL with the event loop, the
    walk, the accounting and the writer; on one-sentence files the parent then spends ~0.3 ms
    of CPU per file, and a GPU waits for it. A spawned process per reader (the task opened once
    in each, like a worker's `setup`) gives the parent's other work its own core. Signals are
    the parent's: a reader ignores them, and is stopped with the run."""

    def __init__(self, spec: Any, count: int) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        self.count = count
        self._manager: Any = None  # the pool's manager thread, from `close` to `join`
        self._pool = ProcessPoolExecutor(count, mp_context=mp.get_context("spawn"), initializer=_reader_init,
                                         initargs=(spec, count))

    def submit(self, sources: list[Source], max_bytes: int, known: dict[str, Any] | None) -> Any:
        """Read and prepare one chunk in a reader process: a future of what `result` takes."""
        from concurrent.futures.process import BrokenProcessPool

        from gpucli.core.signals import held_from_children

        try:
            with held_from_children():  # a submit may start a reader process
                return self._pool.submit(_reader_read, _SentSources.of(sources), max_bytes, known)
        except BrokenProcessPool:
            raise _died(sources) from None

    async def result(self, future: Any, sources: list[Source]) -> ReadChunk:
        """The `ReadChunk` of a submitted chunk, from what its reader sent back.

        Shielded: a stopped run cancels the task awaiting it, and that cancel reached the pool's
        future, which stayed among the pool's pending ones; once `close` killed the readers, the
        pool's manager thread set an error on each of them and died on the cancelled one with
        a traceback on stderr (InvalidStateError, CPython 3.11). The pool cancels its own
        futures at `close` (`cancel_futures`), and forgets them as it does."""
        import asyncio
        from concurrent.futures.process import BrokenProcessPool

        try:
            back = await asyncio.shield(asyncio.wrap_future(future))
        except BrokenProcessPool:
            raise _died(sources) from None
        return back.chunk(sources)

    def close(self) -> None:
        """Stop at once: the readers are killed, idle or mid-chunk (a run that stopped keeps
        nothing they would send). A reader killed while it sent a large chunk back leaves the
        executor's manager thread waiting for the rest of that message, and the call queue's
        feeder thread waiting to send a large chunk to readers that are gone; multiprocessing joins
        that feeder at exit, so the process never left (a full disk printed
        its error and summary, then hung). With the readers killed, the parent's copy of the
        result pipe's writing end is closed: the manager reads EOF, takes the pool for broken
        and closes the call pipe, which ends the feeder's send (EPIPE, which the executor
        ignores). Nothing in the parent writes to that pipe: only readers do.

        The readers killed are those in the pool's table after `shutdown` took its lock: one that a
        `submit` was starting was missed, and outlived the parent with the caller's pipes open."""
        pool = self._pool
        with getattr(pool, "_shutdown_lock", contextlib.nullcontext()):  # no submit half done: its manager is there
            processes = getattr(pool, "_processes", None)  # the table itself: shutdown forgets it
            self._manager = getattr(pool, "_executor_manager_thread", None) or self._manager  # `join` waits for it
        writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)  # shutdown forgets it
        pool.shutdown(wait=False, cancel_futures=True)  # after a submit under way: no more readers start
        for process in list((processes or {}).values()):  # idle now, or reading for a run that stopped
            if process.is_alive():
                process.kill()
        if writer is not None:  # EOF once the killed readers are gone (the kernel closes their ends)
            writer.close()

    def join(self, timeout: float) -> None:
        """After `close`, off the loop: the manager thread ended, its queues freed here. Freed at its very
        end, their semaphores' unlink and unregister were cut by the exit: "1 leaked semaphore"."""
        manager, self._manager = self._manager, None
        if manager is not None:
            manager.join(timeout)
        del manager  # the queues' last reference: their finalizers run now, here

def _died(sources: list[Source]) -> Exception:
    from gpucli.core.errors import RunFailedError

    names = ", ".join(s.path for s in sources[:3]) + (", ..." if len(sources) > 3 else "")
    return RunFailedError(f"a reader process died while preparing {len(sources)} file(s) ({names}), probably out "
                          "of memory; what was written is kept, and a rerun goes on (a large file that kills its "
                          "reader twice becomes a failure record)")


_READER_TASK: Any = None


def _reader_init(spec: Any, readers: int = 1) -> None:
    from gpucli.core.signals import leave_to_parent
    from gpucli.inputs.documents import sandbox
    from gpucli.tasks import create_task

    leave_to_parent()
    sandbox.SHARING_CORES = readers  # each reader's extraction children get a share of the cores
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per reader process
    global _READER_TASK
    _READER_TASK = create_task(spec)
    _READER_TASK.open()


def _reader_read(sent: _SentSources, max_bytes: int, known: dict[str, Any] | None) -> _ReadBack:
    sources = sent.sources()
    return _ReadBack.of(read_chunk(sources, _READER_TASK, max_bytes, known), sources)


@dataclass(slots=True)
class _SentSources:
    """A chunk's sources as columns on their way to a reader process: pickling a list of
    `Source` objects cost ten times as much, in the parent and in the reader alike."""

    columns: tuple

    @staticmethod
    def of(sources: list[Source]) -> _SentSources:
        """The columns, a table record's text included (taken out of the parent's record)."""
        return _SentSources(tuple(zip(*[(s.id, s.path, s.abspath, s.size, s.mtime_ns, s.dev, s.ino, take_text(s),
                                         s.version) for s in sources])))

    def sources(self) -> list[Source]:
        """The sources again, an object's ETag included (the ledger's decision compares it)."""
        return [Source(i, path, abspath, size, mtime, "", dev, ino, version) if text is None
                else Record(i, path, abspath, size, mtime, "", dev, ino, version, data=text)
                for i, path, abspath, size, mtime, dev, ino, text, version in zip(*self.columns)]


@dataclass(slots=True)
class _ReadBack:
    """A reader process's `ReadChunk`, with the sources named by position in the chunk sent
    (the parent has them) and only what the reader learnt of them: their digests."""

    block: Items | None
    failures: list[Failure]
    running: list[int]
    unchanged: list[int]
    digests: list[str]
    found: int

    @staticmethod
    def of(chunk: ReadChunk, sources: list[Source]) -> _ReadBack:
        position = {s.id: i for i, s in enumerate(sources)}
        return _ReadBack(chunk.block, chunk.failures, [position[s.id] for s in chunk.sources],
                         [position[s.id] for s in chunk.unchanged], [s.digest for s in sources], chunk.found)

    def chunk(self, sources: list[Source]) -> ReadChunk:
        for source, content_digest in zip(sources, self.digests):
            source.digest = content_digest
        return ReadChunk([sources[i] for i in self.running], self.block, self.failures,
                         [sources[i] for i in self.unchanged], self.found)
