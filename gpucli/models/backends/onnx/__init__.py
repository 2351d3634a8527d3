"""ONNX Runtime backend: a task's torch model exported once, cached per user, run per worker.

    export    a text encoder's graph (fp32, fused where checked; int8), and the exporter
    fusion    the fused attention graph of a text encoder, kept only when it equals torch
    image     an image classifier's graph, from what its task gives (ImageGraph)
    quantize  the int8 recipe, and quantizing to it
    cache     where an entry lives, its key, writing it once under a lock
    session   one InferenceSession and its execution providers (a leaf the fusion check uses too)
    runners   the models a worker runs: OnnxTextEncoder, OnnxImageClassifier

No module of these imports a task: a task passes what is exported (a model directory, an
ImageGraph). torch, onnx and onnxruntime are imported inside functions only.

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

from gpucli.models.backends.onnx.runners import OnnxImageClassifier, OnnxTextEncoder

__all__ = ["OnnxImageClassifier", "OnnxTextEncoder"]
