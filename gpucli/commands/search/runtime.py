"""Which runtime embeds a search's query: ONNX Runtime where `gpucli embed`
left the model's exported graph in the cache, else torch.

Why: one query is a few milliseconds of model, and the rest of a search is start-up. On torch
the query took 5.5-8.5 s of a 6-10 s search of the sample output (importing torch and
transformers alone ~4 s, on 2 shared cores); ONNX Runtime with the cached graph loads in
~0.2 s and imports neither: the search takes ~0.9 s (benchmarks/RESULTS-search.md).

The query is embedded on the CPU, in this process, so the choice is made as `auto` makes it on a
CPU host (gpucli/models/backends/choice.py), but without exporting: exporting takes 5-15 s and
torch, more than a search on torch costs, so a model whose graph is not cached (an output made on
a GPU, a cache cleared) is embedded on torch. The fp32 graph either way: it is kept only when its
vectors equal torch's (gpucli/models/backends/onnx/fusion.py), so the query's vector is the one
torch gives, whichever runtime made the output's rows. Image-text models run on torch only.

`GPUCLI_BACKEND` (the variable `--backend` of `gpucli embed` reads) decides instead when set:
`torch` always, `onnx` also when the graph has to be exported first (once), `auto` as above.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from enum import Enum

from gpucli.core.errors import UsageError
from gpucli.models.backends import BACKENDS, INSTALL

ENV = "GPUCLI_BACKEND"


class Runtime(str, Enum):
    TORCH = "torch"
    ONNX = "onnx"


def asked(environ: Mapping[str, str] | None = None) -> str:
    """`auto`, `torch` or `onnx`: GPUCLI_BACKEND, auto when unset or empty."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip().lower() or "auto"
    if value not in BACKENDS:
        raise UsageError(f"{ENV}={value!r}: choose one of {', '.join(BACKENDS)}")
    return value


def query_runtime(choice: str, text_model: bool, onnx_installed: bool, cached: Callable[[], bool]) -> Runtime:
    """The runtime for a query, from plain facts: `choice` (see `asked`), whether the output's model
    is a text encoder (not an image-text model), whether onnx and onnxruntime are installed, and
    `cached()`, whether the model's fp32 graph is in the cache (asked only when it decides)."""
    if choice == "torch" or not text_model:
        return Runtime.TORCH
    if not onnx_installed:
        if choice == "onnx":
            raise UsageError(f"{ENV}=onnx needs ONNX Runtime: {INSTALL}")
        return Runtime.TORCH
    return Runtime.ONNX if choice == "onnx" or cached() else Runtime.TORCH
