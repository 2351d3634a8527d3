"""Export a text encoder to ONNX once, into the cache (gpucli.models.backends.onnx.cache), fp32 or int8;
and `torch_export`, the exporter every graph goes through (the image classifiers' too: image.py).

Export. `torch.onnx.export(..., dynamo=False)` (the TorchScript-tracing exporter) with dynamic
batch and sequence axes. Measured with torch 2.13 / transformers 5.24 on all-MiniLM-L6-v2: 1.2 s,
no extra dependency, hidden states within 1e-5 of torch at batch x length 1x3 .. 32x256 with
padded rows. The dynamo exporter gave the same numbers but took 9.2 s and needs onnxscript.
Two traps of tracing, both handled here:
- the example batch holds a padded row: transformers drops an all-ones attention mask (and runs
  attention without one); 5.x keeps the mask while tracing (checked: an unpadded example gives a
  graph that honours padding too), older releases may not, and a trace of the no-mask path
  would ignore padding for good;
- tracing leaves the traced torch module computing wrong numbers afterwards (seen: hidden
  states off by 1.5), so the exporter loads its own copy of the model and throws it away.

Graph (fp32 text encoders; gpucli/models/backends/onnx/fusion.py). The target is ONNX at >= 1.2x
sentence-transformers on ~230-token texts; the plain export ran them at torch's speed. A profile
of the plain graph (8 x 240 tokens, 2 threads): MatMul 76% of the time, and transformers 5.x's
sdpa attention traced into a mask chain around every softmax (Where, IsNaN, Add: ~14%).
ONNX Runtime's transformer optimizer (`onnxruntime.transformers.optimizer`, in the onnxruntime
wheel) fuses none of that graph's attention (it does not know that mask pattern); exported with
transformers' eager attention instead, it fuses every layer's into one `Attention` kernel. So a
model type it knows (FUSED_MODEL_TYPES: bert, which the default model and bge/e5-small are)
is exported eager and fused, and the fused graph is kept only if the optimizer fused every layer
and its hidden states equal a fresh torch model's on padded batches of three shapes (at build
time, ~1 s); any other model, or a failed check, keeps the plain export. GRAPH_RECIPE and
onnxruntime's version are part of the fp32 cache key. Measured, CPU ms per batch (1 thread,
process time, min of 5-21 interleaved, load 1.5-1.8; short = 32 x 18 tokens, long = 8 x 240):
  graph                                            short   long
  torch (the AutoModel forward)                     153     601
  plain export (ONNX Runtime's own fusions)         128     588
  Attention only (this recipe)                      129     522
  every optimizer fusion (+ SkipLayerNorm, ...)     152     556   (SkipLayerNormalization is
  every fusion but SkipLayerNorm                    142     514    slower here than Add + LayerNorm)
  MultiHeadAttention (Q, K, V as three MatMuls)     128     527
  (a second series: plain 138 / 568, attention only 141 / 508)
The long batch is 45 GFLOP: 522 ms is ~86 GFLOP/s on one core, what torch's own sgemm reaches
on this model's GEMM shapes here (63-91 GFLOP/s). fp32 is at this CPU's FMA roof on long
texts, so no graph rewrite gains much beyond the ~12% the fused attention gives (the mask chain
and the small per-head MatMuls); what gpucli gains end to end beyond that is in
benchmarks/RESULTS-onnx.md. The fused attention takes the raw (batch, sequence) mask, not the
token counts of EmbedLayerNormalization (same speed within noise: 557 vs 543 ms): it honours
any mask, not only right padding. float16 is no option on this CPU (no fp16 GEMM in ONNX
Runtime's x86 kernels); bf16 would not keep cosine 0.9999.
Batch size on long texts: the task's CPU budget of 2048 tokens (8 texts of 230 tokens) stays:
64 long texts through the fused graph, 2 threads, batches of 4 / 8 / 16 / 32: 27.6 / 27.3 /
21.3 / 20.8 texts/s (load 2.4).

"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.models.backends.onnx.cache import (
    LOCK_FILE,
    MODEL_FILE,
    SIDECAR_FILE,
    cache_key,
    cache_root_of,
    cached_model,
    entry_dir,
    files_digest,
    weight_files,
)
from gpucli.models.backends.onnx.quantize import check_quantize, quantize_int8

OPSET = 17  # LayerNormalization is one ONNX op from opset 17 on (one kernel instead of seven)
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# The text encoder's graph (module doc, Graph): model types whose fused graph was measured and
# checked; any other type keeps the plain export. Part of the cache key, with onnxruntime's version.
FUSED_MODEL_TYPES = ("bert",)
GRAPH_RECIPE = ("eager-attention export; onnxruntime.transformers optimize_model bert opt_level 0, Attention fusion "
                "only (raw 2-D mask); kept when equal to torch, else the plain export")


def export_text_encoder(model_dir: str | Path, cache_root: str | Path | None = None, opset: int = OPSET,
                        quantize: str | None = None) -> Path:
    """The cached ONNX graph of `AutoModel(model_dir)`'s last_hidden_state (exported on first use).
    Inputs input_ids, attention_mask (and token_type_ids when the model takes them), int64
    (batch, sequence); output last_hidden_state float32 (batch, sequence, hidden)."""
    return text_entry(Path(model_dir), cache_root_of(cache_root), opset, quantize)[0]


def text_entry(model_dir: Path, root: Path, opset: int, quantize: str | None) -> tuple[Path, bool]:
    """(verified path, built now). fp32 is the fused graph (or the plain export, for a
    model the optimizer does not fuse); int8 quantizes it. An int8 entry is looked up first: a
    cached int8 model does not read or hash its fp32 source again."""
    (fp32_key, fp32_dir), *int8 = _text_keys(model_dir, root, opset, quantize)

    def export(out: Path) -> None:
        _export_text(model_dir, opset, out)

    if not quantize:
        return cached_model(fp32_dir, fp32_key, export, root)

    def build(out: Path) -> None:
        cached_model(fp32_dir, fp32_key, export, root)
        quantize_int8(fp32_dir / MODEL_FILE, out)

    key, directory = int8[0]
    return cached_model(directory, key, build, root)


def _text_keys(model_dir: Path, root: Path, opset: int, quantize: str | None) -> list[tuple[dict[str, Any], Path]]:
    """[(key, entry directory)] of the fp32 graph, then of the quantized one when asked for."""
    check_quantize(quantize)
    weights = files_digest(weight_files(model_dir), root)
    graph = GRAPH_RECIPE if fusion_shape(_text_config(model_dir)) is not None else ""  # others: the plain export
    keys = [cache_key("text-encoder", weights, opset, None, graph)]
    if quantize:
        keys.append(cache_key("text-encoder", weights, opset, quantize, graph))
    return [(key, entry_dir(root, key)) for key in keys]


def text_encoder_cached(model_dir: str | Path, quantize: str | None = None, cache_root: str | Path | None = None,
                        opset: int = OPSET) -> bool:
    """Whether a run finds the model's graph exported already (no import of torch or onnxruntime;
    the weights' digests are memoised): the parent says so when a first run has to export it."""
    with contextlib.suppress(OSError, UsageError):
        _, directory = _text_keys(Path(model_dir), cache_root_of(cache_root), opset, quantize)[-1]
        return (directory / SIDECAR_FILE).is_file()
    return False


def _export_text(model_dir: Path, opset: int, out: Path) -> None:
    """The plain export, then, for a model type the transformer optimizer knows, its fused graph
    in place of it when that graph equals the torch path (see the module doc, Graph)."""
    shape = fusion_shape(_text_config(model_dir))
    _export_plain_text(model_dir, opset, out, eager=shape is not None)
    if shape is not None:  # a fused graph that fails its check leaves this (eager-attention) export
        from gpucli.models.backends.onnx.fusion import fuse_text_encoder

        fuse_text_encoder(model_dir, out, shape)


def _text_config(model_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def fusion_shape(config: dict[str, Any]) -> tuple[int, int] | None:
    """(num_heads, hidden_size) for the transformer optimizer when `config` (a config.json) is a
    model type it is known and checked to fuse, else None: such models keep the plain graph."""
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if config.get("model_type") not in FUSED_MODEL_TYPES or not isinstance(heads, int) or not isinstance(hidden, int):
        return None
    return (heads, hidden) if heads > 0 and hidden % heads == 0 else None


def _export_plain_text(model_dir: Path, opset: int, out: Path, eager: bool = False) -> None:
    """torch.onnx.export of the encoder. `eager`: with transformers' eager attention, whose
    MatMul/Softmax pattern the optimizer fuses (the default sdpa one traces into a mask built
    of Where/IsNaN that it does not recognise); both give torch's numbers."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    extra = {"attn_implementation": "eager"} if eager else {}
    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32, **extra).eval()  # our own copy: module doc
    inputs = _text_input_names(model)
    example = _example_text_batch(model.config, inputs)
    names = [*inputs, "last_hidden_state"]
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    torch_export(_hidden_state_module(model, inputs), example, out, inputs, axes, opset)


def _text_input_names(model: Any) -> tuple[str, ...]:
    import inspect

    params = inspect.signature(model.forward).parameters
    return tuple(name for name in TEXT_INPUTS if name in params)


def _example_text_batch(config: Any, inputs: tuple[str, ...]) -> tuple[Any, ...]:
    """Two rows of 16 tokens, the second padded after 9, so that the trace never takes a
    transformers shortcut for unpadded batches (see the module doc)."""
    import torch

    vocab = int(getattr(config, "vocab_size", 0) or 1000)
    ids = (torch.arange(32, dtype=torch.long).view(2, 16) * 7 + 100) % vocab
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    by_name = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return tuple(by_name[name] for name in inputs)


def _hidden_state_module(model: Any, names: tuple[str, ...]) -> Any:
    """A torch module giving the encoder's last_hidden_state from positional inputs in `names`
    order (the exporter traces positional arguments)."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return self.model(**dict(zip(names, tensors))).last_hidden_state

    return LastHiddenState()


def torch_export(module: Any, example: tuple[Any, ...], out: Path, inputs: tuple[str, ...],
                  dynamic_axes: dict[str, dict[int, str]], opset: int) -> None:
    """torch.onnx.export's TorchScript exporter into one self-contained file."""
    import torch

    output = next(iter(n for n in dynamic_axes if n not in inputs))
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")  # TracerWarnings about shape checks: the worker's stderr is the user's terminal
        torch.onnx.export(module, example, str(out), input_names=list(inputs), output_names=[output],
                          dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False, do_constant_folding=True)
    extra = [p for p in out.parent.iterdir() if p.name not in (out.name, LOCK_FILE, MODEL_FILE, SIDECAR_FILE)
             and not p.name.startswith(".")]
    if extra:
        raise UsageError(f"the ONNX export wrote external data ({extra[0].name}): models over 2 GB are not supported "
                         "by --backend onnx yet; use --backend torch")

