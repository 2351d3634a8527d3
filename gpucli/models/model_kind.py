"""What kind of model `--model` names, and the message when it is the wrong one for the task.

Without this, each loader fails in its own words on a model it cannot read: an image
classifier given to embed said "no tokenizer.json", the embed alias `minilm` given to classify
was sent to the Hugging Face Hub (`hf download minilm`). The kind is read from what a model
directory holds (config.json's `architectures` and `model_type`, a CTranslate2 `model.bin`, a
funasr `config.yaml`), so nothing heavy is imported: transformers alone takes seconds.

A kind not recognised is `UNKNOWN` and is never refused: the task's own loader decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from pathlib import Path

from gpucli.core.errors import UsageError


class ModelKind(Enum):
    TEXT_ENCODER = "a text encoder"
    IMAGE_CLASSIFIER = "an image classifier"
    SPEECH_RECOGNIZER = "a speech recognizer"
    IMAGE_TEXT = "an image-text model"
    UNKNOWN = "a model of unknown kind"


# The task that takes each kind, and what the task is for (for "use it with ...").
KIND_TASK = {ModelKind.TEXT_ENCODER: "embed", ModelKind.IMAGE_CLASSIFIER: "classify",
             ModelKind.SPEECH_RECOGNIZER: "transcribe"}
# Kinds each task refuses; an image-text model is left to embed's loader (CLIP, SigLIP: docs/images.md).
REFUSED = {"embed": {ModelKind.IMAGE_CLASSIFIER, ModelKind.SPEECH_RECOGNIZER},
           "classify": {ModelKind.TEXT_ENCODER, ModelKind.SPEECH_RECOGNIZER, ModelKind.IMAGE_TEXT},
           "transcribe": {ModelKind.TEXT_ENCODER, ModelKind.IMAGE_CLASSIFIER, ModelKind.IMAGE_TEXT}}
INPUTS = {"embed": "text", "classify": "images", "transcribe": "audio"}

SPEECH_TYPES = {"whisper", "wav2vec2", "wav2vec2-conformer", "hubert", "wavlm", "speech_to_text", "sew", "unispeech",
                "seamless_m4t", "moonshine", "data2vec-audio"}
IMAGE_TEXT_TYPES = {"clip", "siglip", "siglip2", "chinese_clip", "align", "altclip", "blip"}
TEXT_TYPES = {"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "deberta", "deberta-v2", "electra", "albert",
              "camembert", "nomic_bert", "modernbert", "new", "t5", "mt5", "qwen2", "qwen3", "gemma", "gemma3_text",
              "llama", "mistral", "xlm", "funnel", "longformer", "bge-m3", "jina_bert", "ernie"}
SPEECH_SUFFIXES = ("ForCTC", "ForSpeechSeq2Seq", "ForAudioClassification")
TEXT_SUFFIXES = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForCausalLM")


def model_kind(path: str) -> tuple[ModelKind, str]:
    """(kind, what names it: an architecture, a model type or a file) of a model directory."""
    root = Path(path)
    if not root.is_dir():
        return ModelKind.UNKNOWN, ""
    if (root / "config.yaml").is_file() and (root / "model.pt").is_file():
        return ModelKind.SPEECH_RECOGNIZER, "funasr"
    config = _config(root / "config.json")
    if (root / "model.bin").is_file() and config is not None and "architectures" not in config:
        return ModelKind.SPEECH_RECOGNIZER, "CTranslate2"
    if (root / "modules.json").is_file():
        return ModelKind.TEXT_ENCODER, "sentence-transformers"
    return _kind_of_config(config or {})


def _kind_of_config(config: dict) -> tuple[ModelKind, str]:
    architectures = [str(a) for a in config.get("architectures") or []]
    model_type = str(config.get("model_type") or "")
    named = architectures[0] if architectures else model_type
    if any(a.endswith(("ForImageClassification", "ForImageClassificationWithTeacher")) for a in architectures):
        return ModelKind.IMAGE_CLASSIFIER, named
    if model_type in SPEECH_TYPES or any(a.endswith(SPEECH_SUFFIXES) for a in architectures):
        return ModelKind.SPEECH_RECOGNIZER, named
    if model_type in IMAGE_TEXT_TYPES:
        return ModelKind.IMAGE_TEXT, named
    if model_type in TEXT_TYPES or any(a.endswith(TEXT_SUFFIXES) for a in architectures):
        return ModelKind.TEXT_ENCODER, named
    return ModelKind.UNKNOWN, named


def _config(file: Path) -> dict | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def require_kind(task: str, model: str, path: str) -> None:
    """Refuse a model directory of a kind `task` cannot run, naming its architecture and the
    command that takes it."""
    kind, named = model_kind(path)
    if kind not in REFUSED.get(task, set()):
        return
    what = f"{kind.value} ({named})" if named else kind.value
    right = KIND_TASK.get(kind)
    fix = (f"for {INPUTS[right]}, use it with `gpucli {right} ... --model {model}`" if right
           else "gpucli has no task for it yet")
    if kind is ModelKind.IMAGE_TEXT:  # CLIP, SigLIP: image vectors in embed; with --labels, classify
        fix = f"for image vectors, use it with `gpucli embed ... --model {model}`"
        if task == "classify":
            fix = f'to score labels of your own, add --labels "cat,dog" (zero-shot: docs/zero-shot.md); {fix}'
    raise UsageError(f"--model {model}: this is {what}, not a model gpucli {task} can run on {INPUTS[task]}; {fix}. "
                     "`gpucli models` lists each task's models")


def alias_owner(model: str, aliases: Iterable[tuple[str, str]]) -> str:
    """The task whose alias `model` is ("" for none), from (alias, task) pairs; case-insensitive."""
    wanted = model.lower()
    return next((task for alias, task in aliases if alias.lower() == wanted), "")


def wrong_task_alias(task: str, model: str, aliases: list[tuple[str, str]]) -> UsageError | None:
    """"minilm is an embed model; classify models: efficientnet-lite0 ..." when `model` is an
    alias of another task than `task` (None otherwise)."""
    owner = alias_owner(model, aliases)
    if not owner or owner == task:
        return None
    own = [alias for alias, t in aliases if t == task]
    return UsageError(f"--model {model}: {model} is {_article(owner)} {owner} model (`gpucli {owner} --model {model}`); "
                      f"{task} models: {', '.join(own) or 'none built in'}, or a local directory or Hugging Face id "
                      f"of {_article(task)} {task} model (see `gpucli models`)")


def near_alias(model: str, aliases: list[tuple[str, str]]) -> UsageError | None:
    """"--model minlm: no model of that name; did you mean minilm?" when `model` is no alias, no path
    and no `org/name` Hub id, but close to an alias (difflib): it would otherwise go to the Hub and fail
    with advice to `hf download minlm`. A Hub id without an organisation (`gpt2`) far from
    every alias is left alone."""
    if "/" in model or looks_like_path(model) or alias_owner(model, aliases):
        return None
    import difflib

    close = difflib.get_close_matches(model.lower(), [alias.lower() for alias, _ in aliases], n=1, cutoff=0.75)
    if not close:
        return None
    alias, task = next((a, t) for a, t in aliases if a.lower() == close[0])
    return UsageError(f"--model {model}: no model of that name; did you mean {alias} ({_article(task)} {task} model, "
                      "see `gpucli models`)?")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def looks_like_path(model: str) -> bool:
    """A --model meant as a directory (`./m`, `../m`, `/m`, `~/m`, `a/b/c`, `C:\\m`), never a Hub
    id: a Hub id is `name` or `org/name`, so sending such a value to the Hub only confuses."""
    return (model.startswith((".", "/", "~", "\\")) or model.count("/") > 1 or "\\" in model
            or (len(model) > 1 and model[1] == ":"))
