"""The fused graph of an exported text encoder (gpucli.models.backends.onnx.export, module doc: Graph).

ONNX Runtime's transformer optimizer (`onnxruntime.transformers.optimizer`, shipped in the
onnxruntime wheel) rewrites a BERT-like graph into its CPU/GPU contrib kernels: one `Attention`
per layer (Q, K and V as one GEMM, mask, softmax and the head loop in one kernel) in place of
the ~20 nodes (MatMuls, Transposes, the mask's Where/IsNaN chain) it has in the export. The rewrite
is by pattern: a graph it half-recognises would still load and run, so it is only kept when
every layer's attention was fused and its hidden states equal a fresh torch model's on padded
batches of several shapes; else the plain export stays, as for any model type it does not know.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

# Batches the fused graph is checked on, (rows, tokens): one row; padded rows of mixed lengths;
# a longer batch. Each row i keeps its first tokens - 3 * i tokens (at least 2).
# The optimizer's other fusions, off. SkipLayerNormalization (residual add + bias + LayerNorm in
# one kernel) was slower on this CPU than the Add + LayerNormalization it replaces (1 thread, CPU
# ms per batch, short 32 x 18 / long 8 x 240 tokens: all fusions 152 / 556, without the SkipLayerNorm
# ones 142 / 514, attention alone 141 / 508, plain export 138 / 568); Gelu and BiasGelu ONNX Runtime
# fuses by itself when it loads the graph; EmbedLayerNormalization: see `optimize`.
UNFUSED = ("enable_skip_layer_norm", "enable_bias_skip_layer_norm", "enable_gelu", "enable_bias_gelu",
           "enable_embed_layer_norm")
CHECK_SHAPES = ((1, 7), (3, 20), (4, 70))
TOLERANCE = 1e-3  # max |fused - torch| over real tokens, relative to the largest |torch| (measured: ~1e-6)


def fuse_text_encoder(model_dir: Path, path: Path, shape: tuple[int, int]) -> bool:
    """Replace the plain export at `path` by its fused graph when that graph is whole and equals
    torch (module doc); returns whether it did. `shape` is (num_heads, hidden_size). An optimizer
    or check that raises (another onnxruntime, an odd graph) keeps the plain export too: fusion
    is a speed-up, never a reason for a run to fail."""
    fused = path.with_name(path.name + ".fused")
    try:
        model = optimize(path, *shape)
        if model is None:
            return False
        model.save_model_to_file(str(fused))
        if not equals_torch(model_dir, fused.read_bytes()):
            return False
        os.replace(fused, path)
        return True
    except Exception as exc:  # noqa: BLE001
        logging.getLogger(__name__).debug("fusion skipped: %s: %s", type(exc).__name__, exc)
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            fused.unlink()


def optimize(path: Path, heads: int, hidden: int) -> Any | None:
    """The optimizer's model with an `Attention` per layer, or None when it fused fewer. The
    attention takes the raw (batch, sequence) mask: EmbedLayerNormalization's fused embeddings
    would hand it token counts instead, which assume right-padded rows (gpucli pads right, but
    the graph should not depend on it; the embeddings are 0.3% of the time either way).
    `opt_level=0`: the optimizer's own fusions only, not ONNX Runtime's hardware-specific ones,
    which the session applies when it loads the graph."""
    import onnx
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    for fusion in UNFUSED:
        setattr(options, fusion, False)
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    logging.disable(logging.WARNING)  # its progress lines go to the root logger: the worker's stderr is the user's
    try:
        model = optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0,
                               optimization_options=options)
    finally:
        logging.disable(logging.NOTSET)
    layers = _layer_count(onnx.load(str(path), load_external_data=False))
    attention = model.get_fused_operator_statistics().get("Attention", 0)
    return model if layers and attention == layers else None


def _layer_count(plain: Any) -> int:
    """The encoder's layers, counted as its Softmax nodes (one per layer's attention)."""
    return sum(node.op_type == "Softmax" for node in plain.graph.node)


def equals_torch(model_dir: Path, graph: bytes) -> bool:
    """Whether `graph` gives the hidden states of a fresh torch model (the torch path's own
    attention) on every real token of padded batches of CHECK_SHAPES."""
    import numpy as np
    import torch
    from transformers import AutoModel

    from gpucli.models.backends.onnx.session import load_session

    reference = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    session = load_session(graph, threads=1)
    names = {i.name for i in session.get_inputs()}
    vocab = int(getattr(reference.config, "vocab_size", 0) or 1000)
    rng = np.random.default_rng(0)
    for rows, tokens in CHECK_SHAPES:
        ids = rng.integers(min(5, vocab - 1), vocab, (rows, tokens)).astype(np.int64)
        mask = np.zeros_like(ids)
        for row in range(rows):
            mask[row, : max(2, tokens - 3 * row)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        got = session.run(None, {k: v for k, v in feed.items() if k in names})[0]
        with torch.inference_mode():
            expected = reference(**{k: torch.from_numpy(v) for k, v in feed.items() if k in names}).last_hidden_state
        expected, real = expected.numpy(), mask.astype(bool)
        if got.shape != expected.shape or np.abs(got - expected)[real].max() > TOLERANCE * np.abs(expected).max():
            return False
    return True
