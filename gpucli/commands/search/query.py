"""The query, embedded in this process by the code the workers run (`EmbedTask.prepare_many` +
`predict`), with the model the output names, on the runtime runtime.py picks (ONNX Runtime with
the cached graph, else torch). The query gets the query prompt the output recorded
(`gpucli.query_prompt`, written by `gpucli embed`), or, for an output made before gpucli wrote
it, the model's own; pooling follows the model's modules as for documents
(`gpucli.tasks.embed.st_model`). Words match an image-text model's images through its text tower;
an image is embedded by its image tower. `--mode sparse|hybrid` takes the query's BM25 terms
instead of (or beside) its vector: its token ids, as the output's model cut its documents.
"""

from __future__ import annotations

from typing import Any

from gpucli.commands.search.runtime import Runtime, asked, query_runtime
from gpucli.core.errors import InputError, UsageError
from gpucli.core.notes import note


def embed_query(model: str, query: str, prompt: str | None = None, dims: int = 0) -> Any:
    """One unit vector for the query (see `embed_queries`)."""
    return embed_queries(model, [query], prompt, **({"dims": dims} if dims else {}))[0]


def embed_queries(model: str, queries: list[str], prompt: str | None = None, dims: int = 0) -> list[Any]:
    """Unit vectors from the code the workers run, the model loaded once. A query longer than
    the model's window is cut into chunks as a document would be, and their vectors averaged.
    `prompt`: the query prompt the output recorded; None = the model's own query prompt. `dims`: the
    output's --dims (0: all), which cuts the query's vector as it cut the rows'."""
    import numpy as np

    task = _loaded_task(model, dims)
    if hasattr(task, "query_text"):  # an image-text model: its text tower (tasks/embed/image_text.py)
        try:
            return [np.asarray(task.query_text(query), dtype=np.float32) for query in queries]
        except InputError as exc:
            raise UsageError(f"the query cannot be embedded: {exc}") from None
    task.use_prompt(task.prompts.query if prompt is None else prompt)  # after setup, which sets the document's
    vectors = []
    for query in queries:
        block = query_block(task, query, "embedded")
        vector = np.asarray(task.predict(block.payload), dtype=np.float32).mean(axis=0)
        vectors.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
    return vectors


def embed_image_query(model: str, data: bytes, name: str = "<image>", dims: int = 0) -> Any:
    """The unit vector of one image, by the image tower of the output's image-text model."""
    import numpy as np

    task = _query_task(model, dims)
    if not hasattr(task, "query_image"):
        raise UsageError(f"--image: the output was made with {model!r}, a text model with no image tower; search "
                         "by image needs an output made with an image-text model (CLIP, SigLIP: `gpucli embed DIR "
                         "--model openai/clip-vit-base-patch32`)")
    task.setup("cpu")
    try:
        vector = np.asarray(task.query_image(data), dtype=np.float32)
    except InputError as exc:
        raise UsageError(f"--image {name}: {exc}") from None
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def query_terms(model: str, query: str) -> Any:
    """The query's distinct BM25 terms (tasks/text/sparse.py), ascending: its token ids as the output's
    model cut its documents, less special and punctuation tokens. Loads the tokenizer, not the model."""
    from gpucli.tasks.text.sparse import Terms

    task = _query_task(model)
    block = query_block(task, query, "matched")
    terms = Terms(task.tokenizer).query(block.payload.values)
    if not len(terms):
        raise UsageError("the query has no words to match (only punctuation); give some words to look for")
    return terms


def query_block(task: Any, query: str, what: str) -> Any:
    """The query cut as the task cuts a document (its windows' block); a query the task refuses
    (no tokens, unknown to the model) is a usage error saying so."""
    from gpucli.core.records import Source

    try:
        block, failures = task.prepare_many([Source(0, "<query>", "<query>")], [query.encode("utf-8")])
        if failures:
            raise InputError(failures[0].stage, failures[0].error)
    except InputError as exc:
        raise UsageError(f"the query cannot be {what}: {exc}") from None
    return block


def _loaded_task(model: str, dims: int = 0) -> Any:
    """embed's task for `model`, its model loaded on the CPU of this process by the runtime
    runtime.py picks: the task is opened on torch first (tokenizer and config only), which finds
    the model's directory, and so whether its ONNX graph is cached."""
    from gpucli.models.backends import onnx_available
    from gpucli.models.backends.onnx.export import text_encoder_cached

    task = _query_task(model, dims)
    runtime = query_runtime(asked(), not hasattr(task, "query_text"), onnx_available(lambda: text_encoder_cached(task.path)),
                            lambda: text_encoder_cached(task.path))
    if runtime is Runtime.ONNX:
        if not text_encoder_cached(task.path):  # GPUCLI_BACKEND=onnx: the search looks stalled without a word
            note(f"exporting {model} to ONNX once (about 5-15 s); later searches load the graph in under a second")
        task = _task(model, dims, runtime)  # opened again by its setup, with the ONNX Runtime spec
    task.setup("cpu")
    return task


def _query_task(model: str, dims: int = 0) -> Any:
    """embed's task for `model`, opened (tokenizer and config; no model loaded)."""
    task = _task(model, dims)
    task.open()
    return task


def _task(model: str, dims: int = 0, runtime: Runtime = Runtime.TORCH) -> Any:
    """embed's task for `model` on `runtime`: its image-text variant for CLIP or SigLIP (whose text
    tower embeds words into the images' space), else the text task."""
    from gpucli.tasks import TaskSpec
    from gpucli.tasks.embed import EmbedTask

    options = {"backend": runtime.value, **({"dims": dims, "force_dims": True} if dims else {})}
    spec = TaskSpec("embed", model, options)
    return EmbedTask.variant(spec)(spec)
