"""Where a Qdrant output keeps its ledger, run lock and failures file (see gpucli/output/ledger.py).

Embedded mode: beside the storage (`PATH/COLLECTION.gpucli/`, `PATH/COLLECTION.failures.jsonl`),
so that the storage and its state travel together.

Server mode: in a per-user state directory keyed by server and collection,

    $XDG_STATE_HOME/gpucli/qdrant/HOST_PORT[_PREFIX]/COLLECTION/    (default ~/.local/state/gpucli/...)
    DIR/qdrant/HOST_PORT[_PREFIX]/COLLECTION/                        with --state-dir DIR

holding `ledger.sqlite`, `lock` and `failures.jsonl`. Every run of this user that writes one
collection then shares one ledger and one lock, whatever directory cron starts it from, and
the failures file never lands on a Parquet output's of the same name (`./docs.failures.jsonl`).
The lock is a flock on this host: two hosts writing one collection do not see each other's.

Earlier versions kept a server target's state in the current directory
(`./COLLECTION.gpucli/HOST-PORT[-PREFIX]/`). `adopt_legacy` moves such a ledger into the state
directory on the first run that finds it, never leaving it behind silently: it copies the
ledger with SQLite's backup (which takes in its write-ahead log), renames the copy into place,
then removes the old files. A marker file (`moved-from`) written before the rename lets a run
that follows a crash mid-move finish the removal instead of mistaking the old ledger for a
second one. The old failures file is left where it is: it may be a Parquet output's.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from gpucli.core.durable import replace_durably, write_durably
from gpucli.core.errors import GpucliError, UsageError
from gpucli.core.locks import FileLock
from gpucli.output.sinks.qdrant.target import Target

LEDGER = "ledger.sqlite"
MOVED_FROM = "moved-from"
FAILURES = "failures.jsonl"
_SQLITE_FILES = (LEDGER, LEDGER + "-wal", LEDGER + "-shm", "lock")


def state_root(chosen: str = "", environ: Mapping[str, str] | None = None) -> Path:
    """`--state-dir`, else $XDG_STATE_HOME/gpucli, else ~/.local/state/gpucli (a relative
    XDG_STATE_HOME is ignored, as the XDG spec says)."""
    if chosen:
        return Path(chosen).expanduser().absolute()
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "gpucli"


def server_key(target: Target) -> str:
    """host_port[_prefix], safe as one directory name: `db.example.com_6333_api_qdrant`
    (an IPv6 host keeps its colons as dashes: `--1_6333`)."""
    parts = urlsplit(target.url)
    host = (parts.hostname or "").replace(":", "-")
    key = f"{host}_{parts.port}" + parts.path.replace("/", "_")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def server_state_dir(target: Target, root: Path) -> Path:
    return root / "qdrant" / server_key(target) / target.collection


def embedded_state_dir(target: Target) -> Path:
    return Path(target.path) / f"{target.collection}.gpucli"


def legacy_state_dir(target: Target) -> Path:
    """Where gpucli before the per-user state directory kept a server target's state (relative
    to the directory it ran from)."""
    server = re.sub(r"[^A-Za-z0-9_.-]+", "-", target.server).strip("-")
    return Path(f"{target.collection}.gpucli") / server


def adopt_legacy(legacy: Path, state: Path) -> bool:
    """Move a ledger left in `legacy` by an earlier version into `state`; True when one moved.
    A UsageError when both hold a ledger of their own: which one is right is the user's call."""
    state.mkdir(parents=True, exist_ok=True)
    if not (legacy / LEDGER).is_file():
        (state / MOVED_FROM).unlink(missing_ok=True)
        return False
    with _legacy_lock(legacy):
        if not (state / LEDGER).exists():
            _write_synced(state / MOVED_FROM, str(legacy.absolute()))
            _copy_ledger(legacy / LEDGER, state)
        elif _moved_from(state) != str(legacy.absolute()):
            raise UsageError(_two_ledgers(legacy, state))
        _remove_legacy(legacy)
    (state / MOVED_FROM).unlink(missing_ok=True)
    return True


def _moved_from(state: Path) -> str:
    try:
        return (state / MOVED_FROM).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _two_ledgers(legacy: Path, state: Path) -> str:
    return (f"this Qdrant collection has a ledger in {state} and another one, left by an earlier gpucli, in "
            f"{legacy.absolute()}. gpucli now keeps one ledger per server and collection, whatever directory it "
            f"runs from. Keep one: delete {legacy.absolute()} (the collection's points stay; a rerun checks "
            f"them against {state}), or delete {state} to adopt the older one")


@contextlib.contextmanager
def _legacy_lock(legacy: Path) -> Iterator[None]:
    """Holds the old location's run lock while its ledger moves: an earlier gpucli still running
    from that directory would otherwise write to a ledger that is being taken away."""
    path = legacy / "lock"
    if not path.exists():
        yield
        return
    with FileLock(path, create=False).take(f"an earlier gpucli run holds {path.absolute()}; its ledger moves to "
                                           "the per-user state directory once that run has ended"):
        yield


def _copy_ledger(source: Path, state: Path) -> None:
    """SQLite's online backup (the old ledger's WAL included) into a temporary file, fsynced,
    then renamed into place: the new ledger appears whole or not at all."""
    temporary = state / (LEDGER + ".moving")
    temporary.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(source)
        try:
            dst = sqlite3.connect(temporary)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        temporary.unlink(missing_ok=True)
        raise GpucliError(f"cannot move the ledger {source.absolute()} to {state}: {exc}") from None
    for stale in (LEDGER + "-wal", LEDGER + "-shm"):  # of a ledger deleted by hand: never replay them on this one
        (state / stale).unlink(missing_ok=True)
    replace_durably(temporary, state / LEDGER)  # core/durable.py


def _remove_legacy(legacy: Path) -> None:
    for name in _SQLITE_FILES:
        (legacy / name).unlink(missing_ok=True)
    for directory in (legacy, legacy.parent):
        try:
            directory.rmdir()  # only when empty: anything else in it is not ours to delete
        except OSError:
            break


def _write_synced(path: Path, text: str) -> None:
    write_durably(path, text + "\n")  # core/durable.py
