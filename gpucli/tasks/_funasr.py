"""The funasr backend of `gpucli transcribe`: Paraformer, SenseVoice and other funasr ASR
models, from a local model directory or a ModelScope id (the seed article's worker, batched).

Nothing here imports funasr at module level (its import takes seconds and pulls torch);
the worker imports it in `FunasrBackend.__init__`. funasr extracts filterbanks with
torchaudio when that imports and with kaldi-native-fbank otherwise; a torchaudio built for
another torch can fail to import with an OSError rather than an ImportError, which funasr
does not expect, so such a torchaudio is hidden from it first.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Aliases offered by `gpucli models` (ModelScope ids, the names funasr's own docs use).
ALIASES = {
    "paraformer-zh": "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch",
    "paraformer-en": "iic/speech_paraformer-large-vad-punc_asr_nat-en-16k-common-vocab10020",
    "sensevoice-small": "iic/SenseVoiceSmall",
}
ORGS = ("iic/", "damo/", "funasr/", "funaudiollm/")  # ModelScope / HF owners of funasr models
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
        _hide_broken_torchaudio()
        # funasr prints notices on stdout at import and load; stdout carries gpucli's data.
        with contextlib.redirect_stdout(sys.stderr), _quiet_logging():
            from funasr import AutoModel

            try:
                self.model = AutoModel(model=model, device=device, disable_update=True, disable_pbar=True,
                                       disable_log=True, log_level="ERROR", ncpu=max(1, threads))
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
