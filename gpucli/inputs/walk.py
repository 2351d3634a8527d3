"""Find the input files under the roots: what is an input, under which name, each real file once.

The walk uses `os.scandir` (no stat per file beyond what the directory entry gives) and yields
a directory's entries as one block (`walk_blocks`). A FIFO, socket or device becomes a failure
record here, so that no reader ever opens one (it would block forever). Reading is
gpucli/engines/reader.py's job.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpucli.core.errors import UsageError
from gpucli.core.records import Failure, Source
from gpucli.core.stages import SkipReason, Stage
from gpucli.inputs.compressed import head, is_compressed
from gpucli.inputs.own_outputs import is_output_dir, outputs_among
from gpucli.inputs.scope import Found, WalkFilter, WalkReport
from gpucli.inputs.stores.url import is_url
from gpucli.inputs.text import SNIFF_BYTES, looks_like_text

NON_REGULAR = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device"}


def common_base(roots: list[Path]) -> Path:
    """Rows carry paths relative to this: the root directory itself, a file's directory,
    or for several roots their deepest common directory."""
    dirs = [r if r.is_dir() else r.parent for r in roots]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def walk(roots: list[str], flt: WalkFilter, exclude: Iterable[str | os.PathLike] = (),
         report: WalkReport | None = None) -> Iterator[Found]:
    """Every wanted file under the roots, one `Found` at a time (see `walk_blocks`)."""
    for block in walk_blocks(roots, flt, exclude, report):
        for entry in block:
            yield Found(source=entry) if isinstance(entry, Source) else Found(failure=entry)


def walk_blocks(roots: list[str], flt: WalkFilter, exclude: Iterable[str | os.PathLike] = (),
                report: WalkReport | None = None) -> Iterator[list[Source | Failure]]:
    """Yield every wanted file under the roots, in sorted order, each real file once, as
    blocks (a directory's entries at a time): an input's `Source`, or the `Failure` record of
    an entry that cannot be read. Blocks, not items: on a tree of one-sentence files, a
    generator step and a wrapper object per file were a third of the walk's CPU.

    `exclude`: paths never read, nor anything under them (the output, its failures file and
    its state: an output inside the input tree would otherwise read itself). Any other gpucli
    output under a root, its state and failures files gpucli wrote are skipped too (see
    `own_outputs.outputs_among`), unless given as a root. `report`, if given, is filled for `--prune`
    (see WalkReport). URL roots (`s3://bucket/prefix`) are listed by gpucli/inputs/stores/listing.py,
    under the same contract (outputs are local: `exclude` has nothing there)."""
    if any(is_url(r) for r in roots):
        from gpucli.inputs.stores.listing import list_blocks

        yield from list_blocks(roots, flt, report if report is not None else WalkReport())
        return
    paths = [Path(os.path.abspath(r)) for r in roots]
    for p in paths:
        if not p.exists() and not p.is_symlink():
            raise UsageError(f"{p}: no such file or directory")
    walker = _Walker(paths, flt, frozenset(os.path.realpath(e) for e in exclude), report or WalkReport())
    next_id = 0
    for block in walker.run():
        for entry in block:
            if isinstance(entry, Source):
                entry.id = next_id
                next_id += 1
        yield block
    walker.report.complete = True


WALK_BLOCK = 4096  # entries per block of the walk, at most


class _Walker:
    """One walk's state. Memory grows with the directories (each real directory is listed
    once) and with the files named through links or as roots, never with all files: a file
    found by listing is unique by construction, so only its other names need a check."""

    def __init__(self, roots: list[Path], flt: WalkFilter, exclude: frozenset[str], report: WalkReport) -> None:
        self.roots, self.flt, self.exclude, self.report = roots, flt, exclude, report
        self.base = common_base(roots)
        self.dir_roots = [(str(r), os.path.realpath(r)) for r in roots if r.is_dir()]
        self.seen_dirs: set[str] = set()
        self.aliases: set[tuple[int, int]] = set()  # (st_dev, st_ino) of files named by a link or as a root
        self.excluded_names: dict[str, set[str]] = {}  # real directory -> names in it never read
        for path in exclude:
            self.excluded_names.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))

    def run(self) -> Iterator[list[Source | Failure]]:
        for root in self.roots:
            rel = _rel(str(root), self.base)
            self.report.roots.append(rel)
            real_root = os.path.realpath(root)
            if _excluded(real_root, self.exclude):
                self.report.empty_roots.append(rel)  # a root inside the output: nothing of it is seen
                continue
            if not root.is_dir():
                yield _unwrapped(self._alias(str(root), rel, real_root, explicit=True))
            elif real_root not in self.seen_dirs:
                found = False
                for block in self._tree(str(root), real_root):
                    found = found or bool(block)
                    if block:
                        yield block
                if not found and rel not in self.report.unlisted:
                    self.report.empty_roots.append(rel)

    def _tree(self, root: str, real_root: str, start: tuple[str, str] | None = None) -> Iterator[list[Source | Failure]]:
        """The tree under `root`, or only under its directory `start` (path, real path)."""
        stack = [start or (root, real_root)]
        while stack:
            directory, real = stack.pop()
            if real in self.seen_dirs:
                continue  # two roots that overlap
            self.seen_dirs.add(real)
            try:
                with os.scandir(directory) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                rel = _rel(directory, self.base)
                self.report.unlisted.append(rel)
                yield [Failure(rel, Stage.READ, f"cannot list directory: {exc.strerror}")]
                continue
            if directory != root and is_output_dir(entries):
                continue  # another gpucli output (a Parquet dataset, an embedded Qdrant): not an input
            subdirs: list[tuple[str, str]] = []
            yield from self._entries(directory, real, entries, real_root, subdirs)
            stack.extend(reversed(subdirs))

    def _entries(self, directory: str, real: str, entries: list[os.DirEntry], real_root: str,
                 subdirs: list, excluded: set[str] | tuple[()] | None = None) -> Iterator[list[Source | Failure]]:
        """One directory's entries, in blocks of up to WALK_BLOCK. Plain files (the bulk of a
        tree) take a short path: the directory's relative path is computed once, and the entry's
        type comes from the listing (no system call); only their `stat` remains. Everything else
        goes through `_entry`. `excluded`: the names never read, when `entries` is not the whole
        listing they are learnt from."""
        rel_dir = _rel(directory, self.base)
        prefix = "" if rel_dir == "." else rel_dir + "/"
        excluded = self._excluded_names(real, entries) if excluded is None else excluded
        why_not = self.flt.why_not
        by_suffix = self.flt.suffixes if not self.flt.include and not self.flt.exclude else None
        out: list[Source | Failure] = []
        add = out.append
        for entry in entries:
            if len(out) >= WALK_BLOCK:  # a huge directory's inputs are not all held at once
                yield out
                out = []
                add = out.append
            name = entry.name
            try:
                plain = entry.is_file(follow_symlinks=False) and name.isascii() and name[0] != "."
            except OSError:
                plain = False
            if name in excluded:  # this run's output, or another gpucli output and its state
                continue
            if not plain:
                out.extend(_unwrapped(self._entry(entry, os.path.join(real, name), real_root, subdirs)))
                continue
            rel = prefix + name
            if not (by_suffix and name.lower().endswith(by_suffix)):
                reason = why_not(rel)
                if reason is not None:
                    out.extend(self._pass_over(rel, name, reason))
                    continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                add(Failure(rel, Stage.READ, f"cannot stat: {exc.strerror}"))
                continue
            if not stat.S_ISREG(st.st_mode):  # replaced since the listing
                out.extend(_unwrapped(self._file(entry.path, rel, explicit=False)))
                continue
            if self.flt.sniffs(name) and not _text_file(entry.path):
                out.extend(self._pass_over(rel, name, SkipReason.NO_READER))
                continue
            add(Source(-1, rel, entry.path, st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino))
        yield out

    def _pass_over(self, rel: str, name: str, reason: SkipReason) -> list[Failure]:
        """A file found and not read: counted by reason (and, for --dry-run, a skip record to list)."""
        self.report.pass_over(name, reason)
        if reason is SkipReason.EXCLUDED:
            self.report.saw_excluded(rel, self.flt)
        return [Failure(rel, Stage.SKIP, reason.value, cause=reason.value)] if self.report.list_skipped else []

    def _excluded_names(self, real: str, entries: list[os.DirEntry]) -> set[str] | tuple[()]:
        """Names in the directory `real` never read: this run's output and state, other outputs."""
        excluded = self.excluded_names.get(real, ())
        outputs = outputs_among(entries)
        return {*excluded, *outputs} if outputs else excluded

    def _entry(self, entry: os.DirEntry, real: str, real_root: str, subdirs: list) -> Iterator[Found]:
        """`real`: the entry's real path when it is not a link (its directory's real path + its name)."""
        if entry.name.startswith(".") or real in self.exclude:
            return
        rel = _rel(entry.path, self.base)
        try:
            link, is_dir = entry.is_symlink(), entry.is_dir(follow_symlinks=False)
        except OSError as exc:  # the type is unknown: it may be a directory, keep what is under it
            self.report.unlisted.append(rel)
            yield Found(failure=Failure(rel, Stage.READ, f"cannot stat: {exc.strerror}"))
            return
        if is_dir:
            subdirs.append((entry.path, real))
        elif not link:
            yield from self._file(entry.path, rel, explicit=False)
        elif _is_dir(entry):
            if not _inside(entry.path, real_root):
                yield Found(failure=Failure(rel, Stage.SKIP, "symlink to a directory outside the root; not followed",
                                            cause=SkipReason.OUTSIDE_ROOT.value))
            # else: its files are reached under their real path, each file once
        else:
            yield from self._alias(entry.path, rel, real_root, explicit=False)

    def _alias(self, path: str, rel: str, real_root: str, explicit: bool) -> Iterator[Found]:
        """A file named through a symlink, or given as a root: the same file may have another
        name in this walk. It is read under its real path (see `_read_bytes`)."""
        reason = None if explicit else self.flt.why_not(rel)
        if reason is not None:
            yield from (Found(failure=f) for f in self._pass_over(rel, rel, reason))
            return
        if os.path.islink(path) and not os.path.exists(path):
            reason = "symlink loop" if _is_loop(path) else f"dangling symlink (target {os.readlink(path)!r} missing)"
            yield Found(failure=Failure(rel, Stage.READ, reason))
            return
        target = os.path.realpath(path)
        if not explicit and not _inside(target, real_root):
            yield Found(failure=Failure(rel, Stage.SKIP, "symlink leaves the root; not followed",
                                        cause=SkipReason.OUTSIDE_ROOT.value))
            return
        if _excluded(target, self.exclude) or self._listed(target):
            return  # the output itself, or a file the walk of a directory root names by its real path
        yield from self._file(target, rel, explicit=True, alias=True)

    def _listed(self, real: str) -> bool:
        """Whether the walk of a directory root yields this real file under its own name."""
        for root, real_root in self.dir_roots:
            if not _inside(real, real_root) or real == real_root:
                continue
            inner = os.path.relpath(real, real_root)
            if any(part.startswith(".") for part in inner.split(os.sep)):
                continue
            if self.flt.wants(_rel(os.path.join(root, inner), self.base)):
                return True
        return False

    def _file(self, path: str, rel: str, explicit: bool, alias: bool = False) -> Iterator[Found]:
        reason = None if explicit else self.flt.why_not(rel)
        if reason is not None:
            yield from (Found(failure=f) for f in self._pass_over(rel, rel, reason))
            return
        try:
            st = os.stat(path)
        except OSError as exc:
            yield Found(failure=Failure(rel, Stage.READ, f"cannot stat: {exc.strerror}"))
            return
        kind = stat.S_IFMT(st.st_mode)
        if kind != stat.S_IFREG:
            yield Found(failure=Failure(rel, Stage.READ, f"not a regular file ({NON_REGULAR.get(kind, 'special file')})"))
            return
        if not explicit and self.flt.sniffs(rel.rsplit("/", 1)[-1]) and not _text_file(path):
            yield from (Found(failure=f) for f in self._pass_over(rel, rel, SkipReason.NO_READER))
            return
        if alias:
            if (st.st_dev, st.st_ino) in self.aliases:
                return  # named twice (two links, a link and a root, a root given twice)
            self.aliases.add((st.st_dev, st.st_ino))
        yield Found(source=Source(id=-1, path=rel, abspath=path, size=st.st_size, mtime_ns=st.st_mtime_ns,
                                  dev=st.st_dev, ino=st.st_ino))


class _Stopped(Exception):
    """The count was asked to stop (its number is no longer needed)."""


class _Counter(_Walker):
    """The walk of `_Walker`, with its rules, whose blocks are counts: a plain file that the
    filter wants is counted from its directory entry alone (no `stat`, no `Source`); every
    other entry takes the walk's own path, so that links, outputs, excluded names and the
    records of entries that cannot be read count as the walk yields them."""

    def __init__(self, roots: list[Path], flt: WalkFilter, exclude: frozenset[str],
                 stop: threading.Event | None) -> None:
        super().__init__(roots, flt, exclude, WalkReport())
        self.stop = stop

    def _entries(self, directory: str, real: str, entries: list[os.DirEntry], real_root: str,
                 subdirs: list) -> Iterator[int]:  # type: ignore[override]
        if self.stop is not None and self.stop.is_set():
            raise _Stopped
        excluded = self._excluded_names(real, entries)
        count = 0
        for entry in entries:
            name = entry.name
            try:
                plain = entry.is_file(follow_symlinks=False) and name.isascii() and name[0] != "."
            except OSError:
                plain = False
            if name in excluded:
                continue
            if not plain:
                count += len(_unwrapped(self._entry(entry, os.path.join(real, name), real_root, subdirs)))
            else:
                count += 1  # an input or a file passed over: both count (every file accounted for)
        yield count


def count_inputs(roots: list[str], flt: WalkFilter, exclude: Iterable[str | os.PathLike] = (),
                 stop: threading.Event | None = None) -> int | None:
    """How many entries `walk_blocks` yields for the same arguments (inputs, and the records
    of entries it cannot read) and how many files it passes over (the report's `passed_over`), learnt without a `stat` per file nor an object per input:
    the progress's total, known long before the reader has been everywhere. Memory grows
    with the directories only, as the walk's. A hint: files may come and go before the walk
    reaches them. None when `stop` was set before the count ended, and for URL roots (a second
    listing of a bucket costs requests; the progress shows no total there)."""
    if any(is_url(r) for r in roots):
        return None
    paths = [Path(os.path.abspath(r)) for r in roots if os.path.lexists(r)]
    counter = _Counter(paths, flt, frozenset(os.path.realpath(e) for e in exclude), stop)
    try:
        return sum(block if isinstance(block, int) else len(block) for block in counter.run()) + \
            counter.report.passed_over
    except _Stopped:
        return None


def _text_file(path: str) -> bool:
    """An extensionless file (README, AUTHORS, a script) whose first bytes are text (text.looks_like_text);
    an executable or other binary is not read."""
    try:
        if is_compressed(path):
            return looks_like_text(head(path, SNIFF_BYTES))
        with open(path, "rb", buffering=0) as file:
            return looks_like_text(file.read(SNIFF_BYTES))
    except OSError:
        return True  # unreadable now: the reader reads it and says why


def _unwrapped(found: Iterable[Found]) -> list[Source | Failure]:
    return [f.source if f.source is not None else f.failure for f in found]


def _excluded(real: str, exclude: frozenset[str]) -> bool:
    """`real` or a directory above it is excluded."""
    while exclude:
        if real in exclude:
            return True
        parent = os.path.dirname(real)
        if parent == real:
            return False
        real = parent
    return False


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _is_loop(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _inside(path: str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _rel(path: str, base: Path) -> str:
    """The row's `path`: relative, posix separators, and always valid UTF-8. A name the file
    system holds as bytes that are not UTF-8 (Latin-1 from an old archive) has each such byte
    written as `\\xNN` (Python's backslashreplace): a Parquet string, a JSON line and the
    ledger all take it, and it reads as the name did. (Only a name that already holds the
    four characters `\\xNN` can look the same.) The file is opened by `Source.abspath`,
    which keeps the original bytes."""
    prefix = str(base).rstrip(os.sep) + os.sep
    if os.sep == "/" and path.startswith(prefix):  # the walk's own paths: no relpath per file (a third of the walk)
        rel = path[len(prefix):]
    else:
        rel = Path(os.path.relpath(path, base)).as_posix()
    return rel if rel.isascii() else os.fsencode(rel).decode("utf-8", "backslashreplace")
