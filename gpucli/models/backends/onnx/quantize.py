"""int8 quantization of an exported text encoder, and the recipe that names it (gpucli.models.backends.onnx).

Nothing here imports onnx or onnxruntime at import time: the parent reads the recipe for the output's
fingerprint (gpucli.models.backends.quantize_info).

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
Why the fused graph (before it, the plain export with MatMul only): the plain recipe sat on
the top-10 target (1500 one-sentence texts, batches of 32 sorted:
min cos 0.9848, top-10 0.900; gpucli end to end 0.894 in one run); the fused one keeps more
(0.9863, 0.912). Speed, int8 texts/s fused / plain, 2 threads, 7 rounds interleaved (load 2.4-2.8):
0.93x on one-sentence texts (min 0.90x), 1.15x on 230-token texts (min 1.42x). The table above
was measured on the plain export. Open: in batches of 32 in file order (as gpucli forms them:
each padded to its longest row, and the padding enters the per-batch activation scale) every
recipe scores lower on those 1500 texts: plain 0.884, fused 0.886, fused with layers 0 and 5's
down-projections fp32 0.880, all six fp32 0.914 (which costs ~20% of int8's speed); 230-token
texts 0.936-0.940. So the 0.9 top-10 target on one-sentence texts is marginal for any recipe
that keeps int8's 2.5x speed target (gpucli end to end: 0.894-0.902).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from gpucli.core.errors import UsageError

QUANTIZE_RECIPE = ("int8 weights per channel, MatMul and the fused Attention (QAttention), first FFN "
                   "down-projection fp32")
# On x86 CPUs without VNNI, ONNX Runtime's u8 x s8 kernels (vpmaddubsw) add pairs of products in
# int16, which saturates with 8-bit weights; ORT's advice there is 7-bit weights (reduce_range).
# Measured on an AVX2 AMD EPYC, sample_data/docs + 300 one-sentence texts, batches of 32: min
# cosine to fp32 0.980 -> 0.985, mean 0.9897 -> 0.9940; gpucli end to end on sample_data/docs
# 0.974 with 8 bits. CPUs with VNNI (and ARM) keep 8 bits.
REDUCED_RANGE = "; 7-bit weights (reduce_range: this CPU has no VNNI)"


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


def quantize_int8(fp32: Path, out: Path) -> None:
    """The int8 graph of the fp32 one (the recipe of the module doc)."""
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


def check_quantize(quantize: str | None) -> None:
    """A quantization gpucli knows: int8, or none."""
    if quantize not in (None, "", "int8"):
        raise UsageError(f"--quantize {quantize!r}: gpucli knows int8 (or none)")

