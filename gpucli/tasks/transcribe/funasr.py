"""The funasr backend of `gpucli transcribe`: Paraformer, SenseVoice and other funasr ASR
models, from a local model directory or a ModelScope id (the seed article's worker, batched).

Nothing here imports funasr at module level (its import takes seconds and pulls torch);
the worker imports it in `FunasrBackend.__init__`. funasr extracts filterbanks with
torchaudio when that imports and with kaldi-native-fbank otherwise; a torchaudio built for
another torch can fail to import with an OSError rather than an ImportError, which funasr
does not expect, so such a torchaudio is hidden from it first.

A model directory is data, never code. funasr would run code from one: a `config.yaml` (or
the config a `configuration.json` names) that sets `trust_remote_code` imports the directory's
`model.py` (or the file `remote_code` names) and pip-installs its `requirements.txt`; and it
loads `model.pt` with a bare `torch.load`, which unpickles arbitrary objects wherever
`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` is set. So gpucli refuses such a config before any worker
starts (`check_model_dir`, a UsageError: exit 2), passes `trust_remote_code=False` (funasr
lets the caller's arguments override the config's), and loads every checkpoint with
`weights_only=True` (tensors and plain containers only; torch>=2.6).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import pickle
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucli.core.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

# Aliases offered by `gpucli models` (ModelScope ids, the names funasr's own docs use).
ALIASES = {
    "paraformer-zh": "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch",
    "paraformer-en": "iic/speech_paraformer-large-vad-punc_asr_nat-en-16k-common-vocab10020",
    "sensevoice-small": "iic/SenseVoiceSmall",
}
ORGS = ("iic/", "damo/", "funasr/", "funaudiollm/")  # ModelScope / HF owners of funasr models
REMOTE_CODE_KEYS = ("trust_remote_code", "remote_code")
_TAG = re.compile(r"<\|([^|]*)\|>")
_SENSEVOICE_LANGS = {"zh", "en", "yue", "ja", "ko", "nospeech"}


def looks_like_funasr_dir(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "config.yaml").is_file() and (
        (p / "model.pt").is_file() or (p / "configuration.json").is_file())


def looks_like_funasr_id(name: str) -> bool:
    return name.lower().startswith(ORGS)


def modelscope_cache_dir(model_id: str) -> Path | None:
    """The local copy of a ModelScope model, where funasr would have downloaded it."""
    root = Path(os.environ.get("MODELSCOPE_CACHE") or Path.home() / ".cache" / "modelscope" / "hub")
    for candidate in (root / "models" / model_id, root / model_id):
        if looks_like_funasr_dir(str(candidate)):
            return candidate
    return None


def resolve_alias(alias: str) -> str:
    model_id = ALIASES[alias]
    cached = modelscope_cache_dir(model_id)
    return str(cached) if cached else model_id


def alias_available(alias: str) -> bool:
    return installed() is None and modelscope_cache_dir(ALIASES[alias]) is not None


def installed() -> str | None:
    """None when funasr and a filterbank backend can be imported, else how to fix it."""
    if importlib.util.find_spec("funasr") is None:
        return "the funasr backend needs funasr: pip install 'gpucli[funasr]'"
    if importlib.util.find_spec("kaldi_native_fbank") is None and importlib.util.find_spec("torchaudio") is None:
        return "funasr needs a filterbank backend: pip install kaldi-native-fbank"
    return None


def check_model_dir(model_dir: str) -> None:
    """Refuse a model directory whose config asks funasr to run code from it (UsageError)."""
    root = Path(model_dir)
    for config in _config_files(root):
        asks = [key for key in REMOTE_CODE_KEYS if _asks(_load_config(config), key)]
        if asks:
            raise UsageError(f"the funasr model {model_dir} asks to run its own code ({' and '.join(asks)} in "
                             f"{config.name}); gpucli never runs code from a model directory. Use a model whose "
                             "architecture funasr itself ships (Paraformer, SenseVoice, ...)")


def _config_files(root: Path) -> list[Path]:
    """config.yaml, and the config a configuration.json names (funasr reads that one first)."""
    found = [root / "config.yaml"] if (root / "config.yaml").is_file() else []
    meta = root / "configuration.json"
    if meta.is_file():
        named = (_load_config(meta).get("file_path_metas") or {}).get("config")
        if isinstance(named, str) and (root / named).is_file():
            found.append(root / named)
        found.append(meta)
    return found


def _load_config(path: Path) -> dict[str, Any]:
    import yaml  # funasr's own dependency; JSON is YAML too

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read the funasr model's {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def _asks(config: Any, key: str) -> bool:
    """Whether `key` is set to something truthy anywhere in the config (funasr merges nested blocks)."""
    if isinstance(config, dict):
        return any((k == key and bool(v)) or _asks(v, key) for k, v in config.items())
    if isinstance(config, list):
        return any(_asks(v, key) for v in config)
    return False


@contextlib.contextmanager
def _weights_only_loads():
    """Every `torch.load` while funasr builds the model takes tensors only: a checkpoint holding a
    pickled object (which could run code as it loads) is refused, whatever the environment says."""
    import torch

    original = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        return original(*args, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = original


def _hide_broken_torchaudio() -> None:
    if "torchaudio" in sys.modules or importlib.util.find_spec("torchaudio") is None:
        return
    try:
        import torchaudio  # noqa: F401
    except Exception:  # noqa: BLE001 - e.g. OSError: undefined symbol, from a torch mismatch
        sys.modules["torchaudio"] = None  # type: ignore[assignment]  # `import torchaudio` -> ImportError


class FunasrBackend:
    """One funasr `AutoModel` per worker; a batch of chunks is one `generate` call."""

    def __init__(self, model: str, device: str, threads: int, language: str) -> None:
        self.language = language
        if Path(model).is_dir():
            check_model_dir(model)  # the parent checked too; the directory may have changed since
        _hide_broken_torchaudio()
        # funasr prints notices on stdout at import and load; stdout carries gpucli's data.
        with contextlib.redirect_stdout(sys.stderr), _quiet_logging():
            from funasr import AutoModel

            try:
                with _weights_only_loads():
                    self.model = AutoModel(model=model, device=device, disable_update=True, disable_pbar=True,
                                           disable_log=True, log_level="ERROR", ncpu=max(1, threads),
                                           trust_remote_code=False)
            except pickle.UnpicklingError as exc:
                raise RuntimeError(f"funasr model {model}: its checkpoint holds more than tensors (pickled "
                                   "objects, which could run code as they load); gpucli loads checkpoints with "
                                   "weights_only=True. Re-save it as a plain state_dict: "
                                   f"torch.save(model.state_dict(), 'model.pt'). ({str(exc).splitlines()[0]})"
                                   ) from None
            except Exception as exc:
                if Path(model).is_dir():
                    raise
                raise RuntimeError(f"funasr could not load {model!r}: it is not a local directory nor in the "
                                   f"ModelScope cache, and fetching it failed ({type(exc).__name__}: {exc}). "
                                   "Download the model directory once where ModelScope is reachable and pass "
                                   "its path to --model.") from exc
        self.sensevoice = "sensevoice" in type(self.model.model).__name__.lower()

    def predict(self, chunks: list[np.ndarray]) -> list[dict[str, Any]]:
        """int16 chunks -> [{"text", "language"}], one per chunk, in order."""
        import numpy as np

        keys = [str(i) for i in range(len(chunks))]
        audio = [c.astype(np.float32) / 32768.0 for c in chunks]
        extra = {"language": self.language or "auto", "use_itn": True} if self.sensevoice else {}
        seconds = sum(len(c) for c in chunks) / 16000
        with contextlib.redirect_stdout(sys.stderr), _quiet_logging():
            results = self.model.generate(input=audio, key=keys, batch_size=len(audio),
                                          batch_size_s=max(1, int(seconds) + 1), **extra)
        by_key = {str(r.get("key")): r for r in results if isinstance(r, dict)}
        return [self._output(by_key.get(k, {})) for k in keys]

    def _output(self, result: dict[str, Any]) -> dict[str, Any]:
        raw = str(result.get("text", ""))
        tags = [t.lower() for t in _TAG.findall(raw)]
        language = next((t for t in tags if t in _SENSEVOICE_LANGS and t != "nospeech"), None)
        text = _TAG.sub("", raw).strip()
        return {"text": text, "language": language or self.language or None}


@contextlib.contextmanager
def _quiet_logging():
    """funasr logs each loading step at INFO (and configures the root logger at import, so
    levels set beforehand do not hold); workers' stderr is kept for what matters."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
