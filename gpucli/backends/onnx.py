"""ONNX Runtime backend: export a task's torch model once, cache it per user, run it per worker.

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

Cache. `$XDG_CACHE_HOME/gpucli/onnx/<key>/model.onnx` (default `~/.cache`), where the key is a
digest of: the model's weight and config files, the exporter and modelling code versions (torch,
transformers), the opset and the quantization. An entry is written under an exclusive lock
(`flock` on `<key>/.lock`; released by the kernel if the exporter dies) as tmp file + fsync +
`os.replace`, then a sidecar `model.json` holding the .onnx's sha256 is written the same way,
last. A reader trusts the .onnx only when its bytes hash to the sidecar's sha256: a corrupt,
truncated or half-written file is rebuilt (under the lock), never loaded. Two runs exporting at
once: one exports, the other waits on the lock and then loads what the first wrote.

Graph (fp32 text encoders; gpucli/backends/onnx_fusion.py). Issue 16 asks ONNX for >= 1.2x
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

Quantization (`int8`): `onnxruntime.quantization.quantize_dynamic` of the fp32 entry (the fused
graph where there is one): int8 weights per output channel, MatMul and the fused Attention's
Q/K/V projection (-> QAttention; the embedding tables stay fp32), except the first layer's FFN
down-projection (the first MatMul whose weight narrows, in > out), which stays fp32.
Activations are quantized per tensor per batch at run time (u8, as ORT's dynamic quantization
always does), so an int8 vector depends slightly on its batch-mates. Why that one node: kept fp32
one at a time, the six down-projections gave short top-10 0.922 (layer 0), 0.910, 0.924, 0.908,
0.896, 0.896 and layer 0's the best min cos (0.988); keeping all six fp32 scores higher still but
costs ~20% of int8's speed (below). Measured on the
default embed model (benchmarks/corpus.py: 512 one-sentence and 64 230-token texts, batches of 32
sorted by length; top-10 = mean overlap of the 10 nearest texts of 50 queries with fp32's):
  recipe (weights per channel unless said)     short: min cos, top-10     long: min cos, top-10
  per-tensor weights                               0.934  0.800               0.895  0.820
  per channel, every MatMul (the former recipe)    0.984  0.896               0.987  0.922
  per channel, reduce_range (7-bit, ORT's avx2)    0.980  0.888               0.987  0.924
  all layers' FFN down-projections fp32            0.991  0.928               0.996  0.940
  layer 0 fp32 (6 MatMuls)                         0.986  0.914               0.993  0.936
  layer 5 fp32                                     0.985  0.892               0.987  0.920
  layer 0's down-projection fp32 (this recipe)     0.988  0.922               0.993  0.932
Speed: one of 36 weight MatMuls (1/18 of their FLOPs) kept fp32 cost nothing measurable on this
shared 2-core machine (int8 / fp32 ONNX, interleaved, load ~6: every MatMul 1.50x short, 1.83x long;
this recipe 1.62x, 1.85x); all six down-projections cost ~20% (1.84x -> 1.45x fp32 on short texts,
earlier, quieter). Layer 0's whole block (1/6 of the FLOPs) was next best but scored lower.
Tiny texts (3 tokens: "ok") pool the fewest tokens and drift most (~0.96-0.97).
Why the fused graph (since issue 16's fused fp32 graph; before, the plain export with MatMul
only): the plain recipe sat on the top-10 target (1500 one-sentence texts, batches of 32 sorted:
min cos 0.9848, top-10 0.900; gpucli end to end 0.894 in one run); the fused one keeps more
(0.9863, 0.912). Speed, int8 texts/s fused / plain, 2 threads, 7 rounds interleaved (load 2.4-2.8):
0.93x on one-sentence texts (min 0.90x), 1.15x on 230-token texts (min 1.42x). The table above
was measured on the plain export. Open: in batches of 32 in file order (as gpucli forms them:
each padded to its longest row, and the padding enters the per-batch activation scale) every
recipe scores lower on those 1500 texts: plain 0.884, fused 0.886, fused with layers 0 and 5's
down-projections fp32 0.880, all six fp32 0.914 (which costs ~20% of int8's speed); 230-token
texts 0.936-0.940. So the 0.9 top-10 target on one-sentence texts is marginal for any recipe
that keeps int8's 2.5x speed target (gpucli end to end: 0.894-0.902).
Sessions. One `InferenceSession` per worker, built in the worker (`OnnxTextEncoder`,
`OnnxImageClassifier`), intra-op threads = the worker's share of the cores, inter-op 1. On CPU
the intra-op threads sleep when idle instead of spinning (ORT spins by default): a CPU worker
shares the cores with the parent's reader, tokenizer and writer, and spinning threads took their
time. Measured, `gpucli embed` 1000 one-sentence files / 100 230-token files on 2 shared cores
(load ~4), interleaved, docs/s spinning -> not: short 106 -> 126, 59 -> 77, 60 -> 177; long 12.8
-> 11.5, 12.9 -> 21.1, 7.2 -> 21.2; int8 long 18.9 -> 34.4, 20.9 -> 32.0 (libgomp, under torch,
spins only briefly before it sleeps).
`device="cuda[:N]"` uses CUDAExecutionProvider, which `onnxruntime-gpu` provides.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from gpucli.errors import UsageError

OPSET = 17  # LayerNormalization is one ONNX op from opset 17 on (one kernel instead of seven)
FORMAT = 1  # bump when what this module writes changes
MODEL_FILE = "model.onnx"
SIDECAR_FILE = "model.json"
LOCK_FILE = ".lock"
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
WEIGHT_GLOBS = ("config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
                "pytorch_model.bin.index.json")
EXTRA_INSTALL = "pip install 'gpucli[onnx]'  (onnxruntime and onnx; onnxruntime-gpu instead on CUDA hosts)"
LITE0 = "efficientnet-lite0"
QUANTIZE_RECIPE = ("int8 weights per channel, MatMul and the fused Attention (QAttention), first FFN "
                   "down-projection fp32")
# On x86 CPUs without VNNI, ONNX Runtime's u8 x s8 kernels (vpmaddubsw) add pairs of products in
# int16, which saturates with 8-bit weights; ORT's advice there is 7-bit weights (reduce_range).
# Measured on an AVX2 AMD EPYC, sample_data/docs + 300 one-sentence texts, batches of 32: min
# cosine to fp32 0.980 -> 0.985, mean 0.9897 -> 0.9940; gpucli end to end on sample_data/docs
# 0.974 with 8 bits. CPUs with VNNI (and ARM) keep 8 bits.
REDUCED_RANGE = "; 7-bit weights (reduce_range: this CPU has no VNNI)"

# The text encoder's graph (module doc, Graph): model types whose fused graph was measured and
# checked; any other type keeps the plain export. Part of the cache key, with onnxruntime's version.
FUSED_MODEL_TYPES = ("bert",)
GRAPH_RECIPE = ("eager-attention export; onnxruntime.transformers optimize_model bert opt_level 0, Attention fusion "
                "only (raw 2-D mask); kept when equal to torch, else the plain export")


def reduce_range(cpuinfo: str | None = None) -> bool:
    """Whether int8 weights must be 7-bit on this CPU: x86 with AVX2 and without VNNI."""
    if cpuinfo is None:
        cpuinfo = _cpuinfo()
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                      if line.startswith("flags")), []))
    return "avx2" in flags and not flags & {"avx512_vnni", "avx_vnni", "avx512vnni"}


def quantize_recipe() -> str:
    """The int8 recipe on this host: part of the cache key and of the output's fingerprint."""
    return QUANTIZE_RECIPE + (REDUCED_RANGE if reduce_range() else "")


@functools.cache
def _cpuinfo() -> str:
    """This host's /proc/cpuinfo, read once ("" where there is none: not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


# --- where, and under which key ----------------------------------------------------------------
def default_cache_root() -> Path:
    """The per-user cache: $XDG_CACHE_HOME/gpucli, else ~/.cache/gpucli."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpucli"


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
    stat = file.stat()
    stamp = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    memo = cache_root / "digests" / hashlib.sha256(stamp.encode()).hexdigest()[:40]
    with contextlib.suppress(OSError):
        known = memo.read_text(encoding="ascii").strip()
        if len(known) == 64:
            return known
    digest = _sha256_file(file)
    with contextlib.suppress(OSError):  # a read-only cache only costs the hash next time
        memo.parent.mkdir(parents=True, exist_ok=True)
        _write_file_atomically(memo, digest.encode("ascii"))
    return digest


def _sha256_file(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def cache_key(kind: str, weights: str, opset: int, quantize: str | None, graph: str = "") -> dict[str, Any]:
    """Everything that decides the bytes of an entry: `graph` names what is done to the export
    (GRAPH_RECIPE). Versions come from package metadata: computing a key imports neither torch
    nor onnxruntime."""
    key = {"format": FORMAT, "kind": kind, "weights": weights, "opset": int(opset),
           "exporter": f"torch {_version('torch')} onnx.export dynamo=False",
           "transformers": _version("transformers"), "quantize": quantize or ""}
    if graph:
        key["graph"] = f"onnxruntime {_version('onnxruntime')} {graph}"
    if quantize:
        key["quantizer"] = f"onnxruntime {_version('onnxruntime')} quantize_dynamic {quantize_recipe()}"
    return key


def entry_dir(cache_root: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cache_root / "onnx" / digest


# --- one cache entry, written atomically ---------------------------------------------------------
def cached_model(directory: Path, key: dict[str, Any], build: Callable[[Path], None]) -> tuple[bytes, bool]:
    """(the verified bytes of `directory/model.onnx`, whether this call built them). `build(tmp)`
    writes the model when the entry is missing or does not match its sidecar. Safe against
    concurrent builders: one builds, the others wait on the lock and read what it wrote."""
    data = read_verified(directory, key)
    if data is not None:
        return data, False
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the ONNX model cache at {directory} ({exc.strerror or exc}); point "
                         "XDG_CACHE_HOME at a writable directory, or use --backend torch") from None
    with _locked(directory / LOCK_FILE):
        data = read_verified(directory, key)  # another run may have built it while we waited
        if data is not None:
            return data, False
        return _build_entry(directory, key, build), True


def read_verified(directory: Path, key: dict[str, Any]) -> bytes | None:
    """The .onnx bytes when they hash to the sidecar's sha256 under the same key, else None."""
    try:
        sidecar = json.loads((directory / SIDECAR_FILE).read_text(encoding="utf-8"))
        data = (directory / MODEL_FILE).read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(sidecar, dict) or sidecar.get("key") != key or sidecar.get("size") != len(data):
        return None
    return data if hashlib.sha256(data).hexdigest() == sidecar.get("sha256") else None


def _build_entry(directory: Path, key: dict[str, Any], build: Callable[[Path], None]) -> bytes:
    _remove_leftovers(directory)
    tmp = directory / f".{MODEL_FILE}.{os.getpid()}.tmp"
    try:
        build(tmp)
        data = tmp.read_bytes()
        _fsync_file(tmp)
        os.replace(tmp, directory / MODEL_FILE)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(directory)
    sidecar = {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "created": time.time()}
    _write_file_atomically(directory / SIDECAR_FILE, json.dumps(sidecar, indent=1).encode())
    return data


def _remove_leftovers(directory: Path) -> None:
    """Temporary files of a builder that was killed (SIGKILL, out of memory, power): the export,
    its fused graph, the sidecar (`.<name>.<pid>.tmp[.fused]`), up to the model's size each. Only
    called under the entry's lock, so no live builder owns one."""
    for stale in directory.glob(".*.tmp*"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def _write_file_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every OS or file system can fsync a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive `flock`: the kernel releases it when its holder dies, so a killed exporter
    never leaves a stale lock. Without fcntl (Windows) builders may duplicate work, but readers
    still see whole files only (replace + verified sidecar)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# --- text encoders -------------------------------------------------------------------------------
def export_text_encoder(model_dir: str | Path, cache_root: str | Path | None = None, opset: int = OPSET,
                        quantize: str | None = None) -> Path:
    """The cached ONNX graph of `AutoModel(model_dir)`'s last_hidden_state (exported on first use).
    Inputs input_ids, attention_mask (and token_type_ids when the model takes them), int64
    (batch, sequence); output last_hidden_state float32 (batch, sequence, hidden)."""
    return _text_entry(Path(model_dir), _root(cache_root), opset, quantize)[0]


def _text_entry(model_dir: Path, root: Path, opset: int, quantize: str | None) -> tuple[Path, bytes, bool]:
    """(path, verified bytes, built now). fp32 is the fused graph (or the plain export, for a
    model the optimizer does not fuse); int8 quantizes it. An int8 entry is looked up first: a
    cached int8 model does not read or hash its fp32 source again."""
    (fp32_key, fp32_dir), *int8 = _text_keys(model_dir, root, opset, quantize)

    def export(out: Path) -> None:
        _export_text(model_dir, opset, out)

    if not quantize:
        return (fp32_dir / MODEL_FILE, *cached_model(fp32_dir, fp32_key, export))

    def build(out: Path) -> None:
        cached_model(fp32_dir, fp32_key, export)
        _quantize(fp32_dir / MODEL_FILE, out)

    key, directory = int8[0]
    return (directory / MODEL_FILE, *cached_model(directory, key, build))


def _text_keys(model_dir: Path, root: Path, opset: int, quantize: str | None) -> list[tuple[dict[str, Any], Path]]:
    """[(key, entry directory)] of the fp32 graph, then of the quantized one when asked for."""
    _check_quantize(quantize)
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
        _, directory = _text_keys(Path(model_dir), _root(cache_root), opset, quantize)[-1]
        return (directory / SIDECAR_FILE).is_file()
    return False


def _export_text(model_dir: Path, opset: int, out: Path) -> None:
    """The plain export, then, for a model type the transformer optimizer knows, its fused graph
    in place of it when that graph equals the torch path (see the module doc, Graph)."""
    shape = fusion_shape(_text_config(model_dir))
    _export_plain_text(model_dir, opset, out, eager=shape is not None)
    if shape is not None:  # a fused graph that fails its check leaves this (eager-attention) export
        from gpucli.backends.onnx_fusion import fuse_text_encoder

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
    _torch_export(_hidden_state_module(model, inputs), example, out, inputs, axes, opset)


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


def _torch_export(module: Any, example: tuple[Any, ...], out: Path, inputs: tuple[str, ...],
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


def _quantize(fp32: Path, out: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.disable(logging.WARNING)  # "consider pre-processing" advice on the root logger, per call
    try:
        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=reduce_range(), op_types_to_quantize=["MatMul", "Attention"],
                         nodes_to_exclude=kept_fp32(fp32),
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})  # contrib ops' outputs: float
    finally:
        logging.disable(logging.NOTSET)


def kept_fp32(model: Path) -> list[str]:
    """The MatMul that int8 leaves in fp32 (see the module doc): the first one whose constant
    weight narrows (rows > columns), i.e. the first FFN down-projection of a BERT-like encoder.
    None for a graph without one."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    for node in graph.node:
        shape = shapes.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
        if shape and len(shape) == 2 and shape[0] > shape[1]:
            return [node.name]
    return []


class OnnxTextEncoder:
    """A text encoder's last hidden state through ONNX Runtime, in a worker. Exports on first
    use (see `export_text_encoder`); `exported`, `export_s` and `load_s` say what it cost."""

    def __init__(self, model_dir: str | Path, threads: int, quantize: str | None = None, device: str = "cpu",
                 cache_root: str | Path | None = None, opset: int = OPSET) -> None:
        started = time.perf_counter()
        self.path, data, self.exported = _text_entry(Path(model_dir), _root(cache_root), opset, quantize)
        ready = time.perf_counter()
        self.export_s = ready - started if self.exported else 0.0
        self.session = load_session(data, threads, device)
        self.load_s = time.perf_counter() - (ready if self.exported else started)
        self.input_names = tuple(i.name for i in self.session.get_inputs())

    def hidden(self, ids: Any, mask: Any) -> Any:
        """float32 (batch, sequence, hidden) for int64 ids and attention mask (batch, sequence)."""
        import numpy as np

        ids = np.ascontiguousarray(ids, dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ascontiguousarray(mask, dtype=np.int64)}
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        return self.session.run(None, {k: v for k, v in feed.items() if k in self.input_names})[0]


# --- image classifiers ---------------------------------------------------------------------------
def export_image_classifier(model: str = LITE0, cache_root: str | Path | None = None, opset: int = OPSET,
                            quantize: str | None = None) -> Path:
    """The cached ONNX graph of classify's default EfficientNet-Lite0: input `pixels` float32
    (batch, 3, 224, 224) normalised as the torch path does ((x - 127) / 128), output `logits`
    (batch, 1000)."""
    return _image_entry(model, _root(cache_root), opset, quantize)[0]


def _image_entry(model: str, root: Path, opset: int, quantize: str | None) -> tuple[Path, bytes, bool]:
    _check_quantize(quantize)
    if quantize:
        raise UsageError("--quantize int8 is for embed; classify runs fp32 (dynamic int8 quantization slows "
                         "convolutions down on ONNX Runtime's CPU kernels)")
    if model != LITE0:
        raise UsageError(f"--backend onnx for classify runs the default model {LITE0} only; use --backend torch for "
                         f"{model!r}")
    key, directory = _image_key(root, opset)
    return (directory / MODEL_FILE, *cached_model(directory, key, lambda out: _export_lite0(opset, out)))


def _image_key(root: Path, opset: int) -> tuple[dict[str, Any], Path]:
    from gpucli.tasks.classify import lite0_weights

    key = cache_key(f"image-classifier:{LITE0}", files_digest([Path(lite0_weights())], root), opset, None)
    key["efficientnet_lite_pytorch"] = _version("efficientnet-lite-pytorch")
    return key, entry_dir(root, key)


def image_classifier_cached(cache_root: str | Path | None = None, opset: int = OPSET) -> bool:
    """text_encoder_cached's twin for classify's EfficientNet-Lite0."""
    with contextlib.suppress(OSError, UsageError):
        return (_image_key(_root(cache_root), opset)[1] / SIDECAR_FILE).is_file()
    return False


def _export_lite0(opset: int, out: Path) -> None:
    import torch

    from gpucli.tasks.classify import _Lite0

    net = _Lite0(LITE0).load(torch.device("cpu"), torch.float32)
    example = (torch.zeros(2, 3, 224, 224),)
    _torch_export(net, example, out, ("pixels",), {"pixels": {0: "batch"}, "logits": {0: "batch"}}, opset)


class OnnxImageClassifier:
    """classify's EfficientNet-Lite0 through ONNX Runtime, in a worker: `.logits(pixels)` takes
    what the torch path gives `logits(net, pixels)`, as a float32 NCHW array."""

    def __init__(self, model: str = LITE0, threads: int = 1, quantize: str | None = None, device: str = "cpu",
                 cache_root: str | Path | None = None, opset: int = OPSET) -> None:
        started = time.perf_counter()
        self.path, data, self.exported = _image_entry(model, _root(cache_root), opset, quantize)
        ready = time.perf_counter()
        self.export_s = ready - started if self.exported else 0.0
        self.session = load_session(data, threads, device)
        self.load_s = time.perf_counter() - (ready if self.exported else started)

    def logits(self, pixels: Any) -> Any:
        import numpy as np

        return self.session.run(None, {"pixels": np.ascontiguousarray(pixels, dtype=np.float32)})[0]


# --- sessions ------------------------------------------------------------------------------------
def load_session(model: bytes | str | Path, threads: int, device: str = "cpu") -> Any:
    """One InferenceSession for this worker: intra-op threads = its share of the cores, no
    inter-op parallelism (one graph, one batch at a time), all graph optimisations."""
    ort = _onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, int(threads))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: the worker's stderr is the user's terminal
    if not device.startswith("cuda"):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # see the module doc
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, options, providers=providers(device, ort.get_available_providers()))


def providers(device: str, available: list[str]) -> list[Any]:
    """Execution providers for a gpucli device ("cpu", "cuda", "cuda:1")."""
    if not device.startswith("cuda"):
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        raise UsageError(f"--backend onnx on {device} needs onnxruntime-gpu (this onnxruntime offers "
                         f"{', '.join(available)}): pip uninstall onnxruntime && pip install onnxruntime-gpu; "
                         "or use --backend torch")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise UsageError(f"--backend onnx needs ONNX Runtime: {EXTRA_INSTALL}") from None
    return onnxruntime


def _check_quantize(quantize: str | None) -> None:
    if quantize not in (None, "", "int8"):
        raise UsageError(f"--quantize {quantize!r}: gpucli knows int8 (or none)")


def _root(cache_root: str | Path | None) -> Path:
    return Path(cache_root) if cache_root is not None else default_cache_root()
