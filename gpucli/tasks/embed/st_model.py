"""What a sentence-transformers model directory asks for, and how to do it exactly as it does.

A sentence-transformers model is a `modules.json` chain: Transformer -> Pooling -> (Normalize).
`1_Pooling/config.json` says how token vectors become one vector (CLS, mean, max, ...); a
`Normalize` module L2-normalises it; `config_sentence_transformers.json` names the prompts
(`query: `, `passage: `) that the model expects before a text; `sentence_bert_config.json`
may ask for lower-casing. gpucli follows all of it, so its vectors equal
`SentenceTransformer(dir).encode_document(texts)` (and `encode_query` for `gpucli search`).

Rules, in one place:
- Pooling follows the model's Pooling module. A plain transformers directory (no modules.json)
  gets mean pooling, as before.
- Normalisation follows the model: on when it has a Normalize module, off when it has modules
  but none. `--normalize/--no-normalize`, when given, overrides. A plain transformers directory
  keeps gpucli's old default, on (cosine = dot product), and the metadata says it came from
  that default (`gpucli.normalize_source = default`).
- Document prompt (`gpucli embed`): `--prefix TEXT`, else `--prompt NAME`, else the model's
  first of `document`, `passage`, `corpus` (as `encode_document` picks), else its
  `default_prompt_name`, else none.
- Query prompt (`gpucli search`): the model's `query` prompt, else its `default_prompt_name`,
  else none (as `encode_query` picks).
- Lower-casing (`do_lower_case`): a `Lowercase` normaliser is put in front of the tokenizer's
  own, as sentence-transformers does, so char offsets still point into the original text.
- Modules gpucli cannot reproduce (Dense, Router, a chat-template Transformer, ...) are refused
  with a usage error rather than silently giving other vectors.

Tokens and prompts: sentence-transformers prepends the prompt to the text and tokenizes the
whole. gpucli chunks long documents, so every chunk is [CLS] + prompt tokens + window + [SEP];
the `text` column and char offsets stay those of the document. For WordPiece (BERT) models
tokenizing `prompt + text` equals `prompt_ids(prompt) + ids(text)` whenever the prompt ends
at a word boundary (a space or punctuation: every published prompt does). For byte-level BPE
models (GPT-2 style) it does not in general: the text's first word loses its leading-space
marker when tokenized alone; `split_prompt` (tasks/text/tokens.py) cuts a joint encoding of `prompt + text`,
which keeps the first chunk identical to sentence-transformers' tokens for every tokenizer.

No torch at import time: the parent reads configs without it; `pool` imports torch inside.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# sentence-transformers < 5 wrote one boolean per mode; it reads them still.
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")  # encode_document's order
QUERY_PROMPT_NAME = "query"
TRANSFORMER_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                       "sentence_camembert_config.json", "sentence_albert_config.json",
                       "sentence_xlm-roberta_config.json", "sentence_xlnet_config.json")
KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True)
class EmbedModelConfig:
    """What a model directory asks for. `source` is "sentence-transformers" (modules.json read)
    or "transformers" (none: gpucli's defaults, mean pooling and normalisation)."""

    path: str
    transformer_dir: str
    source: str = "transformers"
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    normalize: bool = True
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    do_lower_case: bool = False
    max_seq_length: int | None = None

    @property
    def from_modules(self) -> bool:
        return self.source == "sentence-transformers"

    @property
    def pooling_name(self) -> str:
        return "+".join(self.pooling)

    def normalize_with(self, option: bool | None) -> bool:
        """The `--normalize/--no-normalize` option when given, else what the model asks for."""
        return self.normalize if option is None else option

    def normalize_source(self, option: bool | None) -> str:
        if option is not None:
            return "option"
        return "model" if self.from_modules else "default"


@dataclass(frozen=True)
class Prompts:
    """The literal prompt texts for documents and queries, and the names they came from ("" when
    given with --prefix, or none)."""

    document: str = ""
    document_name: str = ""
    query: str = ""
    query_name: str = ""

    def info(self) -> dict[str, str]:
        """Output metadata: `gpucli search` embeds queries with `gpucli.query_prompt`."""
        return {"gpucli.prompt": self.document, "gpucli.prompt_name": self.document_name,
                "gpucli.query_prompt": self.query, "gpucli.query_prompt_name": self.query_name}


# --- reading a model directory ----------------------------------------------------------------
def read_model_config(path: str) -> EmbedModelConfig:
    """The model's modules, pooling, normalisation, prompts and lower-casing (see the module doc).
    Raises UsageError for a malformed or unsupported sentence-transformers directory."""
    root = Path(path)
    modules = _read_json(root / "modules.json")
    st_config = _read_json(root / "config_sentence_transformers.json") or {}
    prompts = {str(k): str(v) for k, v in (st_config.get("prompts") or {}).items() if v is not None}
    default_name = st_config.get("default_prompt_name") or None
    if modules is None:
        transformer = _transformer_config(root)
        return EmbedModelConfig(str(root), str(root), prompts=prompts, default_prompt_name=default_name,
                                do_lower_case=bool(transformer.get("do_lower_case", False)),
                                max_seq_length=_positive_int(transformer.get("max_seq_length")))
    return _from_modules(root, modules, prompts, default_name)


def _from_modules(root: Path, modules: Any, prompts: dict[str, str], default_name: str | None) -> EmbedModelConfig:
    kinds = _module_kinds(root, modules)
    if not kinds or kinds[0][0] != "Transformer":
        raise UsageError(f"model at {root}: modules.json does not start with a Transformer module; gpucli runs "
                         "Transformer -> Pooling -> (Normalize) models")
    transformer_dir = root / kinds[0][1]
    transformer = _transformer_config(transformer_dir)
    _check_transformer(root, transformer)
    pooling, include_prompt = ("mean",), True
    for kind, sub in kinds[1:]:
        if kind == "Pooling":
            pooling, include_prompt = read_pooling(root / sub)
    return EmbedModelConfig(str(root), str(transformer_dir), "sentence-transformers", pooling, include_prompt,
                            normalize=any(kind == "Normalize" for kind, _ in kinds), prompts=prompts,
                            default_prompt_name=default_name,
                            do_lower_case=bool(transformer.get("do_lower_case", False)),
                            max_seq_length=_positive_int(transformer.get("max_seq_length")))


def _module_kinds(root: Path, modules: Any) -> list[tuple[str, str]]:
    """[(class name, sub-directory)] in order; refuses modules gpucli cannot reproduce."""
    if not isinstance(modules, list):
        raise UsageError(f"model at {root}: modules.json is not a list of modules")
    kinds = []
    for entry in sorted(modules, key=lambda m: int(m.get("idx", 0)) if isinstance(m, dict) else 0):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else ""
        if kind not in KNOWN_MODULES:
            raise UsageError(f"model at {root}: module {kind or entry!r} is not one gpucli can run (it runs "
                             f"{', '.join(KNOWN_MODULES)}); its vectors would differ from sentence-transformers'")
        kinds.append((kind, str(entry.get("path", ""))))
    return kinds


def _check_transformer(root: Path, transformer: dict[str, Any]) -> None:
    """A Transformer whose output is not the encoder's last hidden state (chat templates,
    generation heads) would pool other vectors."""
    task = transformer.get("transformer_task", "feature-extraction")
    text = (transformer.get("modality_config") or {}).get("text", {"method_output_name": "last_hidden_state"})
    if task != "feature-extraction" or text.get("method_output_name") != "last_hidden_state":
        raise UsageError(f"model at {root}: its Transformer module ({task}) is not a plain text encoder; gpucli "
                         "pools the encoder's last hidden state only")


def read_pooling(directory: Path) -> tuple[tuple[str, ...], bool]:
    """(modes, include_prompt) from a Pooling module's config.json, old or new key style."""
    config = _read_json(directory / "config.json")
    if config is None:
        raise UsageError(f"model: {directory / 'config.json'} is missing (the Pooling module's settings)")
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(name for key, name in LEGACY_POOLING_KEYS.items() if config.get(key))
        modes = modes or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise UsageError(f"model: {directory / 'config.json'} asks for pooling {unknown or modes}; gpucli knows "
                         f"{', '.join(POOLING_MODES)}")
    return modes, bool(config.get("include_prompt", True))


def _transformer_config(directory: Path) -> dict[str, Any]:
    for name in TRANSFORMER_CONFIGS:
        config = _read_json(directory / name)
        if config is not None:
            return config
    return {}


def _read_json(file: Path) -> Any:
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"model: cannot read {file}: {exc}") from None


def _positive_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


# --- prompts ----------------------------------------------------------------------------------
def resolve_prompts(config: EmbedModelConfig, prompt_name: str = "", prefix: str = "") -> Prompts:
    """Document and query prompts for `--prompt NAME` / `--prefix TEXT` (see the module doc)."""
    if prompt_name and prefix:
        raise UsageError("give --prompt NAME or --prefix TEXT, not both")
    if prompt_name and prompt_name not in config.prompts:
        known = ", ".join(sorted(config.prompts)) or "none"
        raise UsageError(f"--prompt {prompt_name!r}: the model names no such prompt (it has: {known}); "
                         "use --prefix TEXT for a prompt of your own")
    query_name = _first_prompt(config, (QUERY_PROMPT_NAME,))
    query = Prompts(query=config.prompts.get(query_name, ""), query_name=query_name)
    if prefix:
        return Prompts(prefix, "", query.query, query.query_name)
    name = prompt_name or _first_prompt(config, DOCUMENT_PROMPT_NAMES)
    return Prompts(config.prompts.get(name, ""), name, query.query, query.query_name)


def _first_prompt(config: EmbedModelConfig, names: tuple[str, ...]) -> str:
    for name in names:
        if name in config.prompts:
            return name
    default = config.default_prompt_name
    return default if default and default in config.prompts else ""


# --- tokens -----------------------------------------------------------------------------------
def apply_lower_case(tokenizer: Any, config: EmbedModelConfig) -> Any:
    """Put a Lowercase normaliser in front of a `tokenizers.Tokenizer`'s own when the model asks
    for do_lower_case, as sentence-transformers does (offsets stay in the original text)."""
    if not config.do_lower_case:
        return tokenizer
    from tokenizers.normalizers import Lowercase, Sequence

    current = tokenizer.normalizer
    if _has_lowercase(current):
        return tokenizer
    parts = [Lowercase()]
    if isinstance(current, Sequence):
        parts += list(current)
    elif current is not None:
        parts.append(current)
    tokenizer.normalizer = Sequence(parts)
    return tokenizer


def _has_lowercase(normalizer: Any) -> bool:
    from tokenizers.normalizers import Lowercase, Sequence

    if isinstance(normalizer, Lowercase):
        return True
    return isinstance(normalizer, Sequence) and any(isinstance(n, Lowercase) for n in normalizer)


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The prompt's tokens without special tokens, up to its trailing whitespace: in `prompt +
    text` that whitespace joins the text's first word (`▁hello`, `Ġhello`) for SentencePiece and
    byte-level vocabularies, and WordPiece drops it; tokens before it are the same alone or joined.
    Every chunk is [CLS] + prompt_ids + its window + [SEP]."""
    if not prompt:
        return []
    enc = tokenizer.encode(prompt, add_special_tokens=False)
    end = len(prompt.rstrip())
    ids = []
    for token, (_, stop) in zip(enc.ids, enc.offsets):
        if stop > end:
            break
        ids.append(token)
    return ids


def pooled_prompt_length(tokenizer: Any, prompt: str, special_prefix: list[int]) -> int:
    """How many leading tokens a Pooling with include_prompt = false leaves out, measured as
    sentence-transformers measures it: the special prefix ([CLS]) + the prompt tokenized alone
    (for SentencePiece vocabularies that counts a trailing lone `▁` too, as it does)."""
    if not prompt:
        return 0
    return len(special_prefix) + len(tokenizer.encode(prompt, add_special_tokens=False).ids)


# --- pooling (worker side) ----------------------------------------------------------------------
def pool(hidden: Any, mask: Any, config: EmbedModelConfig, normalize: bool | None = None,
         prompt_length: int = 0) -> Any:
    """Sentence vectors from token vectors, exactly as sentence-transformers' Pooling (padded,
    right-padded inputs) and Normalize modules compute them. `normalize` is the option (None =
    follow the model); `prompt_length` ([CLS] + prompt tokens) matters only for models whose
    Pooling says include_prompt = false. Returns float32."""
    import torch

    original = mask
    if prompt_length and not config.include_prompt:
        mask = mask.clone()
        mask[:, :prompt_length] = 0
    vectors = torch.cat([_pool_one(mode, hidden, mask, original) for mode in config.pooling], dim=-1).float()
    if config.normalize_with(normalize):
        vectors = torch.nn.functional.normalize(vectors, p=2, dim=-1)
    return vectors


def _pool_one(mode: str, hidden: Any, mask: Any, original: Any) -> Any:
    """One Pooling mode (sentence_transformers Pooling._forward_padded, line for line)."""
    import torch

    accumulate = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
    if mode == "cls":
        first = mask.to(torch.int).argmax(dim=1)
        return torch.gather(hidden, 1, first.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])).squeeze(1)
    if mode == "max":
        weights = mask.unsqueeze(-1).expand_as(hidden).to(hidden.dtype)
        return hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        total = (hidden * weights).sum(dim=1, dtype=accumulate)
        count = torch.clamp(weights.sum(dim=1, dtype=accumulate), min=1e-9)
        return (total / (count if mode == "mean" else torch.sqrt(count))).to(hidden.dtype)
    if mode == "weightedmean":
        weights = mask.unsqueeze(-1).to(accumulate)
        positions = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=accumulate).view(1, -1, 1)
        positions = positions - original.to(torch.int32).argmax(dim=1).view(-1, 1, 1)
        weighted = weights * positions
        return ((hidden * weighted).sum(dim=1) / torch.clamp(weighted.sum(dim=1), min=1e-9)).to(hidden.dtype)
    if mode == "lasttoken":
        seq_len = hidden.shape[1]
        values, indices = mask.flip(1).max(1)
        indices = torch.where(values == 0, seq_len - 1, indices)
        gather = (seq_len - indices - 1).view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])
        return torch.gather(hidden * mask.unsqueeze(-1).to(hidden.dtype), 1, gather).squeeze(1)
    raise ValueError(f"pooling mode {mode!r} is not one of {POOLING_MODES}. This is a bug.")


def pool_numpy(hidden: Any, mask: Any, config: EmbedModelConfig, normalize: bool | None = None,
               prompt_length: int = 0) -> Any:
    """`pool` on numpy arrays, for the ONNX Runtime worker: the same modes and arithmetic
    (float32 sums, the same clamps), so that an ONNX worker needs no torch at all (its import
    was ~1.6-2.5 s of each worker's start on a CPU host). Returns float32."""
    import numpy as np

    hidden = np.asarray(hidden, dtype=np.float32)
    original = np.asarray(mask)
    mask = original
    if prompt_length and not config.include_prompt:
        mask = mask.copy()
        mask[:, :prompt_length] = 0
    vectors = np.concatenate([_pool_one_numpy(mode, hidden, mask, original) for mode in config.pooling], axis=-1)
    vectors = vectors.astype(np.float32, copy=False)
    if config.normalize_with(normalize):  # torch.nn.functional.normalize: x / max(||x||, 1e-12)
        with np.errstate(invalid="ignore"):  # max pooling over no token: -inf, NaN after it, as in torch
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    return vectors


def _pool_one_numpy(mode: str, hidden: Any, mask: Any, original: Any) -> Any:
    """One Pooling mode on float32 numpy arrays, as `_pool_one` computes it."""
    import numpy as np

    rows = np.arange(hidden.shape[0])
    if mode == "cls":
        return hidden[rows, mask.astype(np.int32).argmax(axis=1)]
    if mode == "max":
        return np.where(mask[:, :, None] == 0, np.float32(-np.inf), hidden).max(axis=1)
    if mode in ("mean", "mean_sqrt_len_tokens"):
        weights = mask[:, :, None].astype(np.float32)
        total = np.einsum("bsh,bs->bh", hidden, weights[:, :, 0])
        count = np.maximum(weights.sum(axis=1), np.float32(1e-9))
        return total / (count if mode == "mean" else np.sqrt(count))
    if mode == "weightedmean":
        weights = mask[:, :, None].astype(np.float32)
        positions = np.arange(1, hidden.shape[1] + 1, dtype=np.float32).reshape(1, -1, 1)
        positions = positions - original.astype(np.int32).argmax(axis=1).reshape(-1, 1, 1)
        weighted = weights * positions
        return (hidden * weighted).sum(axis=1) / np.maximum(weighted.sum(axis=1), np.float32(1e-9))
    if mode == "lasttoken":
        seq_len = hidden.shape[1]
        flipped = mask[:, ::-1]
        values, indices = flipped.max(axis=1), flipped.argmax(axis=1)
        indices = np.where(values == 0, seq_len - 1, indices)
        return (hidden * mask[:, :, None].astype(np.float32))[rows, seq_len - indices - 1]
    raise ValueError(f"pooling mode {mode!r} is not one of {POOLING_MODES}. This is a bug.")


def info(config: EmbedModelConfig, normalize: bool | None, prompts: Prompts) -> dict[str, str]:
    """Output metadata: how the vectors were made, so `gpucli search` (and a reader) can match it."""
    return {"gpucli.pooling": config.pooling_name, "gpucli.pooling_source": "model" if config.from_modules
            else "default", "gpucli.normalize": str(config.normalize_with(normalize)).lower(),
            "gpucli.normalize_source": config.normalize_source(normalize),
            "gpucli.lower_case": str(config.do_lower_case).lower(), **prompts.info()}


# How every output was embedded before gpucli read the model's modules (mean pooling, normalised,
# no prompt, no added lower-casing): an output's ledger fingerprint leaves these values out, so an
# output whose vectors do not change (the default model's) stays incremental after the upgrade,
# while one whose vectors do (a CLS model's) asks for --full.
PRE_FIDELITY = {"gpucli.pooling": "mean", "gpucli.normalize": "true", "gpucli.prompt": "", "gpucli.lower_case": "false",
                "gpucli.runtime": "torch", "gpucli.quantize": ""}  # ...and before the ONNX backend
DESCRIPTIVE_KEYS = ("gpucli.pooling_source", "gpucli.normalize_source", "gpucli.prompt_name", "gpucli.query_prompt",
                    "gpucli.query_prompt_name")


def fingerprint_info(metadata: dict[str, str]) -> dict[str, str]:
    """The output metadata that the ledger's settings fingerprint should hold: what changes the
    vectors, less what equals the behaviour before gpucli followed a model's modules (PRE_FIDELITY), less
    what only describes."""
    return {k: v for k, v in metadata.items() if k not in DESCRIPTIVE_KEYS and PRE_FIDELITY.get(k) != v}
