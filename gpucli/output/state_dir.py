"""Where an output keeps its state (ledger, run lock): found, moved from an earlier place, undone.

Every sink names one state directory, `Sink.state_dir`: `OUT.gpucli/` beside a Parquet dataset
directory or a JSON lines file, `COLLECTION.gpucli/` beside an embedded Qdrant storage, a per-user
directory for a Qdrant server (sinks/qdrant/state_dir.py). A Parquet dataset directory then holds
only its parts (and hidden `.inprogress` files while one is written), which every reader takes
whole: pyarrow, pandas, polars (`read_parquet` and `scan_parquet` on the directory), DuckDB.

Earlier gpucli kept a Parquet output's state inside the dataset directory (`OUT.parquet/_gpucli/`:
`Sink.earlier_state_dirs`). Until a run moves it, whatever only reads the ledger (what the output
was made with, `inspect`, `search`, `--dry-run`) finds it there (`ledger_dir`). The next run moves
it (`adopt`) before it takes its lock: holding the earlier lock (an earlier gpucli still writing
the output refuses the move, exit 75), one `rename` of the whole directory, so the ledger goes with
its `-wal` and `-shm`, its lock and a ledger set aside as damaged; a kill leaves the state in one
place or the other, never split, and the next run finds it and moves it again. A new place that
already holds a ledger is refused (which of two ledgers is right is the user's call); one a run left
holding nothing but its lock file is replaced.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpucli.core.durable import fsync_dir
from gpucli.core.errors import LedgerDamaged, UsageError
from gpucli.core.locks import FileLock
from gpucli.output.ledger import Ledger, made_with

if TYPE_CHECKING:
    from gpucli.output.sinks import Sink

LEDGER = "ledger.sqlite"
LOCK = "lock"
SQLITE_FILES = (LEDGER, LEDGER + "-wal", LEDGER + "-shm", LEDGER + "-journal")


def ledger_dir(sink: Sink) -> Path:
    """The state directory that holds the output's ledger now: `state_dir`, or an earlier one no
    run has moved yet; `state_dir` when neither has one (a new output) or none can be looked at
    (the open says why)."""
    for directory in (sink.state_dir, *sink.earlier_state_dirs()):
        try:
            if (directory / LEDGER).is_file():
                return directory
        except OSError:  # a directory above it this user may not search
            break
    return sink.state_dir


def adopt(earlier: Path, state: Path) -> bool:
    """Move the state directory `earlier` to `state` in one rename; True when it moved. Called
    before the run lock is taken (it is in the directory that moves)."""
    try:
        lock = FileLock(earlier / LOCK).take(f"an earlier gpucli run holds {(earlier / LOCK).absolute()}; the "
                                             f"output's ledger moves to {state} once that run has ended")
    except (FileNotFoundError, NotADirectoryError):
        return False  # nothing there (or moved by a run beside this one)
    with lock:
        if not earlier.is_dir():
            return False  # moved by a run beside this one since this one looked
        _clear_place(state, earlier)
        try:
            os.rename(earlier, state)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise UsageError(f"cannot move {earlier.absolute()} to {state.absolute()} (another file system): "
                                 "move it there yourself, then rerun") from None
            raise
    fsync_dir(earlier.parent)  # the name gone from the dataset directory ...
    fsync_dir(state.parent)  # ... and the new one beside it
    return True


def _clear_place(state: Path, earlier: Path) -> None:
    """A directory already at `state` is replaced only when it holds nothing but a lock no run holds
    (a run that stopped before making its ledger); a ledger there is refused: there are two."""
    try:
        names = set(os.listdir(state))
    except FileNotFoundError:
        return
    if names - {LOCK}:
        raise UsageError(f"this output has a state directory {state.absolute()} and another one, left by an "
                         f"earlier gpucli, in {earlier.absolute()}. Keep one: delete {earlier.absolute()} (a rerun "
                         f"checks the output against {state.absolute()}), or delete {state.absolute()} to keep the "
                         "earlier one")
    if LOCK in names:
        _remove_free_lock(state / LOCK)
    state.rmdir()


def _remove_free_lock(path: Path) -> None:
    with FileLock(path, create=False).take(f"another gpucli run holds the lock {path.absolute()}"):
        path.unlink()


def own_paths(sink: Sink) -> list[str]:
    """What a walk must never read: the output itself (a Parquet directory, a JSONL file, an
    embedded Qdrant's storage directory), its failures file and its state directory. Inside the
    input tree they would be read as inputs (`.jsonl` and `.json` are embed suffixes, and the
    failures file exists before the walk)."""
    return [str(p) for p in (_on_disk(sink), sink.failures_path, sink.state_dir) if str(p)]


def _on_disk(sink: Sink) -> str:
    """The output's own path on disk; "" for a Qdrant server's collection."""
    parsed = getattr(sink, "parsed", None)  # a Qdrant target: only embedded mode is on disk
    return (parsed.path if parsed.local else "") if parsed is not None else sink.target


def refuse_foreign(sink: Sink) -> None:
    """gpucli never deletes what it did not write: an output with content but no ledger is refused
    before anything is created."""
    try:
        if (sink.state_dir / LEDGER).exists():
            return
        content = sink.foreign()
    except OSError as exc:
        raise UsageError(f"--out {sink.display}: cannot use it: {_os_message(exc)}") from None
    if content:
        raise UsageError(f"--out {sink.display} already holds {content} that gpucli did not write (it has no "
                         f"ledger in {sink.state_dir}); gpucli never deletes what it did not write: "
                         "choose a new or empty --out, or move those files away")


def open_ledger(state: Path, version: str, incremental: bool, notices: list[str]) -> Ledger:
    """The ledger; for `--full` read through first, and when damaged set aside (as
    `ledger.sqlite.damaged`) for a new one: --full rebuilds the output, and the new ledger
    empties it (a new ledger with --full resets the sink). An incremental run never goes on
    from a damaged ledger (LedgerDamaged: which file, and what to do): its rows cannot be
    trusted to say what is done, and what else it held (the settings the output was made
    with, failures, stale rows not yet removed) is not in the output's parts."""
    try:
        return Ledger(state, version, check=not incremental)
    except LedgerDamaged as exc:
        if incremental:
            raise
        set_aside(Path(exc.path))
        notices.append(f"the damaged ledger {exc.path} was set aside as {exc.path}.damaged; "
                       "--full rebuilds the output and a new ledger")
        return Ledger(state, version, check=True)


def sink_ledger(sink: Sink, version: str, incremental: bool, notices: list[str]) -> Ledger:
    """The output's ledger: SQLite in its state directory (`open_ledger`), or, for a sink that keeps
    it in the store itself (PostgreSQL: `Sink.ledger_in_store`), the store's."""
    if sink.ledger_in_store:
        return sink.open_ledger(version)
    return open_ledger(sink.state_dir, version, incremental, notices)


def settings_made_with(sink: Sink) -> dict | None:
    """What the output was made with (ledger.made_with), wherever its ledger is."""
    return sink.made_with() if sink.ledger_in_store else made_with(ledger_dir(sink))


def set_aside(ledger: Path) -> None:
    """A damaged ledger and its WAL files, renamed `*.damaged` beside it (replacing an older one)."""
    for suffix in ("", "-wal", "-shm"):
        path = ledger.with_name(ledger.name + suffix)
        if path.exists():
            os.replace(path, ledger.with_name(ledger.name + ".damaged" + suffix))


def missing_dirs(sink: Sink) -> list[Path]:
    """What an open may create that does not exist yet, deepest first: the state directory, the
    output's own (a Parquet dataset directory, now beside it) and the directories above them."""
    missing: set[Path] = set()
    for directory in (sink.state_dir, Path(_on_disk(sink) or sink.state_dir)):
        directory = directory.absolute()
        for path in (directory, *directory.parents):
            if os.path.lexists(path):
                break
            missing.add(path)
    return sorted(missing, key=lambda path: len(path.parts), reverse=True)


def remove_created(state: Path, created: list[Path]) -> None:
    """Undo a failed open: the lock and ledger files in the state directory, when it made it,
    then each directory it made, deepest first, while it is empty (never anything else; an
    output that is a file is no directory and stays)."""
    for name in (LOCK, *SQLITE_FILES) if state.absolute() in created else ():
        try:
            (state / name).unlink(missing_ok=True)
        except OSError:
            pass
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            pass


def _os_message(exc: OSError) -> str:
    where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    return f"{exc.strerror or exc} ({where})"


