"""The per-user cache of exported ONNX graphs: where an entry lives, its key, and writing it once.

Cache. `$XDG_CACHE_HOME/gpucli/onnx/<key>/model.onnx` (default `~/.cache`), where the key is a
digest of: the model's weight and config files, the exporter and modelling code versions (torch,
transformers), the opset and the quantization. An entry is written under an exclusive lock
(gpucli/core/locks.py, on `<key>/.lock`; released by the kernel if the exporter dies) and put in
place durably (gpucli/core/durable.py: tmp file, fsync, `os.replace`, the directory's fsync); then
a sidecar `model.json` holding the .onnx's sha256 is written the same way, last. A reader trusts
the .onnx only when its bytes hash to the sidecar's sha256 (a check remembered by the file's
identity: gpucli/models/digests.py): a corrupt, truncated or half-written file is rebuilt (under
the lock), never loaded. Two runs exporting at once: one exports, the other waits on the lock and
then loads what the first wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from gpucli.core.durable import replace_durably, write_durably
from gpucli.core.errors import UsageError
from gpucli.core.locks import FileLock
from gpucli.models.backends.onnx.quantize import quantize_recipe
from gpucli.models.digests import default_cache_root, file_sha256

FORMAT = 1  # bump when what this module writes changes
MODEL_FILE = "model.onnx"
SIDECAR_FILE = "model.json"
LOCK_FILE = ".lock"
WEIGHT_GLOBS = ("config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
                "pytorch_model.bin.index.json")


# --- where, and under which key ----------------------------------------------------------------
def weight_files(model_dir: str | Path) -> list[Path]:
    """The files whose bytes decide the exported graph: config and weights, not the tokenizer."""
    root = Path(model_dir)
    found = {p for pattern in WEIGHT_GLOBS for p in root.glob(pattern) if p.is_file()}
    if not any(p.name != "config.json" and not p.name.endswith(".json") for p in found):
        raise UsageError(f"model at {root}: no weights (*.safetensors or pytorch_model*.bin) to export to ONNX")
    return sorted(found)


def files_digest(files: list[Path], cache_root: Path) -> str:
    """sha256 over the files' names and contents. Each file's own digest is memoised under its
    (path, size, mtime, inode), so later runs do not hash a large model again (90 MB: 50 ms)."""
    outer = hashlib.sha256()
    for file in files:
        outer.update(f"{file.name}\0{_file_digest(file, cache_root)}\n".encode())
    return outer.hexdigest()


def _file_digest(file: Path, cache_root: Path) -> str:
    return file_sha256(file, cache_root)  # remembered by the file's identity (gpucli/models/digests.py)


def package_version(package: str) -> str:
    """An installed distribution's version, "none" when it is not installed (no import)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def cache_key(kind: str, weights: str, opset: int, quantize: str | None, graph: str = "") -> dict[str, Any]:
    """Everything that decides the bytes of an entry: `graph` names what is done to the export
    (GRAPH_RECIPE). Versions come from package metadata: computing a key imports neither torch
    nor onnxruntime."""
    key = {"format": FORMAT, "kind": kind, "weights": weights, "opset": int(opset),
           "exporter": f"torch {package_version('torch')} onnx.export dynamo=False",
           "transformers": package_version("transformers"), "quantize": quantize or ""}
    if graph:
        key["graph"] = f"onnxruntime {package_version('onnxruntime')} {graph}"
    if quantize:
        key["quantizer"] = f"onnxruntime {package_version('onnxruntime')} quantize_dynamic {quantize_recipe()}"
    return key


def entry_dir(cache_root: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cache_root / "onnx" / digest


# --- one cache entry, written atomically ---------------------------------------------------------
def cached_model(directory: Path, key: dict[str, Any], build: Callable[[Path], None],
                 cache_root: Path | None = None) -> tuple[Path, bool]:
    """(`directory/model.onnx`, verified, and whether this call built it). `build(tmp)` writes
    the model when the entry is missing or does not match its sidecar. Safe against concurrent
    builders: one builds, the others wait on the lock and use what it wrote. The session loads
    the file by its path (half the time of loading its bytes: ONNX Runtime parses it in place),
    and the check that it hashes to its sidecar's sha256 is remembered by the file's identity
    (gpucli/models/digests.py), so a worker does not hash 90 MB at every start."""
    root = cache_root or directory.parent.parent
    path = verified_model(directory, key, root)
    if path is not None:
        return path, False
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the ONNX model cache at {directory} ({exc.strerror or exc}); point "
                         "XDG_CACHE_HOME at a writable directory, or use --backend torch") from None
    with FileLock(directory / LOCK_FILE).wait():
        path = verified_model(directory, key, root)  # another run may have built it while we waited
        if path is not None:
            return path, False
        _build_entry(directory, key, build)
        return directory / MODEL_FILE, True


def verified_model(directory: Path, key: dict[str, Any], cache_root: Path | None = None) -> Path | None:
    """The .onnx file when it is whole (its size and sha256 those of the sidecar, under the same
    key), else None."""
    model = directory / MODEL_FILE
    try:
        sidecar = json.loads((directory / SIDECAR_FILE).read_text(encoding="utf-8"))
        size = model.stat().st_size
        if not isinstance(sidecar, dict) or sidecar.get("key") != key or sidecar.get("size") != size:
            return None
        digest = file_sha256(model, cache_root or directory.parent.parent)
    except (OSError, ValueError):
        return None
    return model if digest == sidecar.get("sha256") else None


def _build_entry(directory: Path, key: dict[str, Any], build: Callable[[Path], None]) -> None:
    _remove_leftovers(directory)
    tmp = directory / f".{MODEL_FILE}.{os.getpid()}.tmp"
    try:
        build(tmp)
        data = tmp.read_bytes()
        replace_durably(tmp, directory / MODEL_FILE)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    sidecar = {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "created": time.time()}
    write_durably(directory / SIDECAR_FILE, json.dumps(sidecar, indent=1),
                  directory / f".{SIDECAR_FILE}.{os.getpid()}.tmp")


def _remove_leftovers(directory: Path) -> None:
    """Temporary files of a builder that was killed (SIGKILL, out of memory, power): the export,
    its fused graph, the sidecar (`.<name>.<pid>.tmp[.fused]`), up to the model's size each. Only
    called under the entry's lock, so no live builder owns one."""
    for stale in directory.glob(".*.tmp*"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def cache_root_of(cache_root: str | Path | None) -> Path:
    """`cache_root` as given, else the per-user default."""
    return Path(cache_root) if cache_root is not None else default_cache_root()
