"""OCR: text from pixels, for PDF pages without a text layer (scans) and for image files given
to `gpucli embed --ocr on` (docs/ocr.md).

The engine is RapidOCR (`rapidocr` 3.x on PyPI, Apache-2.0): PaddleOCR's PP-OCR detection and
recognition models (Apache-2.0, MODEL_LICENSES.md in its wheel) converted to ONNX, run by ONNX
Runtime. Its wheel holds the models, and they are loaded by explicit path (`_model`), so RapidOCR
never reaches its download branch: OCR runs offline, as every default model of gpucli does
(checked with the network cut: tests/integration/test_ocr.py). PP-OCRv6's recogniser reads
Chinese and English (and more); the older `rapidocr_onnxruntime` 1.4.4 (PP-OCRv4) dropped a line
and joined words on an English page that this one read whole, needs Python < 3.13 and pulls the
non-headless OpenCV.

Where it runs, and why: on the CPU, in the reader's extraction children (gpucli/inputs/documents/sandbox.py),
not in the GPU workers. The workers embed token windows; the windows are cut from the text, so the
text must exist before a worker gets anything, and the reader is where text comes from (a PDF's
text layer, a DOCX's paragraphs). OCR is that step for a scan: it runs under the same time limit
and memory cap as every extractor, one ONNX Runtime thread per child, one child per core.
inputs/documents/reading.py sends the pages of a scan in batches of a few pages a call, so a long scan
spreads over the children and each batch gets the whole time limit.

Settings measured on English pages (9-11 pt, A4) on a shared 2-core host (benchmarks/ocr.py):
- no text-line orientation classifier: PP-OCR's 0/180-degree classifier turned some upright
  lines upside down and garbled them (word recall 0.82-0.94 with it, 1.00 without). An
  upside-down scan is read badly: turn it upright first.
- pages rendered at 200 dpi (a scanner's usual setting), at most MAX_PIXELS; the detector sees
  the page scaled to DET_SIDE on its long side (0.3 s against 0.7 s a page at full size, the
  same recall); the recogniser reads each line from the full-resolution page.

Never invented text: lines below RapidOCR's confidence (0.5) are dropped, and a page where it
finds nothing gives "" (a blank scan is a failure record upstream, not a row).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document, short_reason

OCR_MODES = ("auto", "on", "off")  # --ocr: scans only (auto), scans and image files (on), nothing (off)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")  # --ocr on: read as text
RENDER_DPI = 200
MAX_PIXELS = 40_000_000  # a page rendered, or an image frame: an A4 page at 600 dpi is 35 MP
MAX_FRAMES = 1000  # pages of a multi-page TIFF
DET_SIDE = 1280
INSTALL = "pip install 'gpucli[ocr]' (rapidocr and onnxruntime)"
_MODELS = {"Det": "*_det_*.onnx", "Rec": "*_rec_*.onnx", "Cls": "*cls*.onnx"}


@dataclass(frozen=True, slots=True)
class OcrDocument(Document):
    """A Document some of whose pages (1-based, in `ocr_pages`) were read by OCR."""

    ocr_pages: tuple[int, ...] = ()


def missing() -> str | None:
    """Why OCR cannot run here ("OCR needs ..."), or None; without importing anything."""
    absent = [name for name in ("rapidocr", "onnxruntime") if importlib.util.find_spec(name) is None]
    return f"OCR needs {' and '.join(absent)}: {INSTALL}" if absent else None


def version() -> str:
    """'rapidocr 3.10.0 (PP-OCRv6_det_small, PP-OCRv6_rec_small)' for the output's metadata."""
    if missing():
        return "rapidocr not installed"
    models = _models_dir()
    names = [next(iter(sorted(models.glob(_MODELS[k]))), Path("?")).stem for k in ("Det", "Rec")]
    return f"rapidocr {importlib.metadata.version('rapidocr')} ({', '.join(names)})"


# --- in an extraction child -----------------------------------------------------------------------

def ocr_pdf_pages(data: bytes, indices: list[int]) -> list[str]:
    """The text OCR reads on each of these pages (0-based) of a PDF, "" where it reads none."""
    from gpucli.inputs.extract.pdf import render_page

    return [read_pixels(render_page(data, index, RENDER_DPI, MAX_PIXELS)) for index in indices]


def ocr_image(data: bytes) -> list[str]:
    """The text of each frame of an image file (one, or a multi-page TIFF's pages)."""
    from PIL import Image, ImageSequence

    try:
        image = Image.open(io.BytesIO(data))
    except Exception as error:  # noqa: BLE001 - Pillow's UnidentifiedImageError, or a broken header
        raise InputError(Stage.DECODE, f"not a valid image file ({short_reason(error)})") from None
    frames = getattr(image, "n_frames", 1)
    if frames > MAX_FRAMES:
        raise InputError(Stage.DECODE, f"an image of {frames} frames; OCR reads at most {MAX_FRAMES}")
    texts = []
    for frame in ImageSequence.Iterator(image):
        texts.append(read_pixels(_grey(frame)))
    return texts


def read_pixels(grey: np.ndarray) -> str:
    """Greyscale uint8 pixels -> text: lines in reading order, a blank line between paragraphs."""
    result = _engine()(np.ascontiguousarray(grey))
    if result.boxes is None or not result.txts:
        return ""
    return layout(np.asarray(result.boxes, dtype=np.float32), list(result.txts))


def layout(boxes: np.ndarray, texts: list[str]) -> str:
    """Text boxes (n x 4 corner points) -> lines: boxes whose middles fall within one line's height
    are one line, left to right; a gap above a line of more than 0.9 line heights starts a paragraph
    (the chunker cuts at blank lines first)."""
    tops, bottoms, lefts = boxes[:, :, 1].min(axis=1), boxes[:, :, 1].max(axis=1), boxes[:, :, 0].min(axis=1)
    lines: list[list[int]] = []
    for i in np.argsort(tops, kind="stable"):
        middle = (tops[i] + bottoms[i]) / 2
        line = lines[-1] if lines else None
        if line is not None and tops[line[0]] <= middle <= bottoms[line[0]]:
            line.append(int(i))
        else:
            lines.append([int(i)])
    height = float(np.median(bottoms - tops)) or 1.0
    out: list[str] = []
    for k, line in enumerate(lines):
        if k:
            gap = tops[line[0]] - max(bottoms[j] for j in lines[k - 1])
            out.append("\n\n" if gap > 0.9 * height else "\n")
        out.append(" ".join(texts[j].strip() for j in sorted(line, key=lambda j: lefts[j])))
    return "".join(out).strip()


def _grey(frame: Any) -> np.ndarray:
    """One frame as greyscale uint8: EXIF orientation applied, alpha on white, 16-bit scaled."""
    from PIL import Image, ImageOps

    width, height = frame.size
    if width * height > MAX_PIXELS:
        raise InputError(Stage.DECODE, f"an image of {width}x{height} pixels; OCR reads at most {MAX_PIXELS:,} "
                                       "pixels a frame")
    try:
        frame = ImageOps.exif_transpose(frame)
        if frame.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N", "F"):
            values = np.asarray(frame, dtype=np.float32)
            top = float(values.max()) or 1.0
            return (values * (255.0 / top)).clip(0, 255).astype(np.uint8)
        if frame.mode in ("RGBA", "LA", "PA", "P"):
            frame = frame.convert("RGBA")
            white = Image.new("RGBA", frame.size, (255, 255, 255, 255))
            frame = Image.alpha_composite(white, frame)
        return np.asarray(frame.convert("L"))
    except (OSError, ValueError, SyntaxError) as error:  # truncated or corrupt pixel data
        raise InputError(Stage.DECODE, f"not a valid image file ({short_reason(error)})") from None


_ENGINE: Any = None
_ENGINE_LOCK = threading.Lock()


def _engine() -> Any:
    """One RapidOCR per process, made on first use (~0.7 s): models from the wheel, one thread."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = _build()
        return _ENGINE


def _build() -> Any:
    reason = missing()
    if reason:
        raise InputError(Stage.DECODE, reason)
    from rapidocr import RapidOCR

    try:  # OpenCV's own threads would oversubscribe the cores: there is one child per core already
        import cv2

        cv2.setNumThreads(1)
    except ImportError:
        pass
    params: dict[str, Any] = {
        "Global.log_level": "critical", "Global.use_cls": False,
        "Det.limit_type": "max", "Det.limit_side_len": DET_SIDE,
        "EngineConfig.onnxruntime.intra_op_num_threads": 1, "EngineConfig.onnxruntime.inter_op_num_threads": 1}
    for task in _MODELS:
        params[f"{task}.model_path"] = str(_model(task))
    return RapidOCR(params=params)


def _models_dir() -> Path:
    spec = importlib.util.find_spec("rapidocr")
    return Path(spec.origin).parent / "models" if spec and spec.origin else Path("/nonexistent")


def _model(task: str) -> Path:
    """The wheel's own model file for `task`: a path, so that RapidOCR never downloads one."""
    found = sorted(_models_dir().glob(_MODELS[task]))
    if not found:
        raise InputError(Stage.DECODE, f"rapidocr's package holds no {task} model ({_models_dir()}); reinstall it")
    return found[-1]
