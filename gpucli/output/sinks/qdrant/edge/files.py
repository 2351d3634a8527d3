"""Where an embedded collection lives on disk, the storage's lock, and the collection's metadata
file (a shard keeps none of its own).

Layout of `qdrant:PATH/COLLECTION`:
    PATH/edge/COLLECTION/        the Edge shard (wal/, segments/, edge_config.json)
    PATH/edge/COLLECTION.json    the collection's metadata (gpucli.model, prompts...)
    PATH/.lock                   held while the storage is open: one process at a time. The same
                                 file and lock (flock) as qdrant-client's local mode, so the two
                                 never open one directory together.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gpucli.core.durable import write_durably
from gpucli.core.locks import FileLock

LOCK_FILE = ".lock"
EDGE_DIR = "edge"
LOCAL_MODE_DIR = "collection"  # qdrant-client's local mode: PATH/collection/NAME/storage.sqlite
CONFIG = "edge_config.json"  # Edge's own: the shard's vectors, as Qdrant's JSON


def shard_dir(storage: str | Path, name: str) -> Path:
    return Path(storage) / EDGE_DIR / name


def meta_file(storage: str | Path, name: str) -> Path:
    return Path(storage) / EDGE_DIR / f"{name}.json"


def is_shard(path: Path) -> bool:
    return (path / CONFIG).is_file()


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_json(target: Path, data: dict) -> None:
    """Written whole to a temporary file, synced, renamed, and the rename synced with the
    directory (core/durable.py): a crash or a power cut leaves the old or the new, never none."""
    target.parent.mkdir(parents=True, exist_ok=True)
    write_durably(target, json.dumps(data, ensure_ascii=False), target.with_name(target.name + ".tmp"))


def lock_storage(storage: Path) -> FileLock:
    """Take PATH/.lock as qdrant-client's local mode does (portalocker: flock, exclusive, not
    waiting; gpucli's one lock, core/locks.py): one process at a time has the storage open,
    whichever client it uses. Releasing the returned lock lets the next one in."""
    path = storage / LOCK_FILE
    if not path.exists():
        path.write_text("tmp lock file")
    return FileLock(path).take(f"the embedded Qdrant storage {storage} is in use by another process or client "
                               "(embedded mode allows one at a time; use a Qdrant server for concurrent access)")


def discard_new(storage: Path, name: str) -> None:
    """Take back a collection that a run made and never wrote to (it found no input): its shard,
    its metadata file, the `edge/` directory when nothing else is in it and then, when the
    storage holds no collection at all (nor one of qdrant-client's local mode), its lock file,
    so that a storage directory the run made is left empty for the run's own clean-up
    (Output.discard) to remove. Call it with the storage closed."""
    shutil.rmtree(shard_dir(storage, name), ignore_errors=True)
    meta_file(storage, name).unlink(missing_ok=True)
    try:
        (storage / EDGE_DIR).rmdir()  # only when empty: other collections stay
    except OSError:
        return
    if not (storage / LOCAL_MODE_DIR).exists():
        (storage / LOCK_FILE).unlink(missing_ok=True)
