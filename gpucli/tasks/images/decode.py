"""An image's bytes -> uint8 RGB pixels at a model's input size: untrusted bytes decoded (a
whitelist of formats, decompression bombs refused, EXIF orientation, CMYK, 16-bit and alpha made
RGB), then resized and centre-cropped in one pass. Runs in the reader's threads.

Imports of Pillow and numpy happen inside the functions: `gpucli --help` imports every task
module, and this one must stay light.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

# Formats we open. A whitelist, not Pillow's full registry: EPS would run Ghostscript on
# untrusted bytes, and formats such as PSD or FITS are not what an image tree holds.
# MPO is how Pillow opens many camera JPEGs; AVIF is there when Pillow was built with it.
FORMATS = ("JPEG", "MPO", "PNG", "WEBP", "GIF", "BMP", "DIB", "TIFF", "PPM", "TGA", "ICO", "AVIF")

# File suffixes of images, as classify (and embed with an image-text model) find them in a tree
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
WHITE = (255, 255, 255)
_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}
_WIDE_GREY_MODES = {"I", "I;16", "I;16L", "I;16B", "I;16N", "F"}
_bombs_guarded = False


# --- decoding ----------------------------------------------------------------------------


def guard_decompression_bombs() -> None:
    """Make Pillow's DecompressionBombWarning (an image over MAX_IMAGE_PIXELS) an error.

    Pillow only raises above twice the limit; between 1x and 2x it warns and decodes. The
    filter is process-wide on purpose: `warnings.catch_warnings` is not thread-safe, and
    decoding runs in several reader threads.
    """
    global _bombs_guarded
    if not _bombs_guarded:
        from PIL import Image

        warnings.filterwarnings("error", category=Image.DecompressionBombWarning)
        _bombs_guarded = True


def open_image(data: bytes, draft: tuple[int, int] | None = None) -> Image.Image:
    """Decode bytes into an RGB image (EXIF orientation applied, first frame, alpha on white).

    `draft` lets a JPEG decode at 1/2, 1/4 or 1/8 scale while staying at least that size:
    a 12-megapixel photo cut to 224 pixels need not be decoded in full.
    Raises `InputError(Stage.DECODE, reason)` for anything that is not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InputError(Stage.DECODE, "empty file (0 bytes)")
    guard_decompression_bombs()
    try:
        im = Image.open(io.BytesIO(data), formats=_available_formats())
        _check_pixels(im)
        if draft is not None and im.format in ("JPEG", "MPO"):
            im.draft("RGB", draft)
        im.load()
        return to_rgb(_exif_transpose(im))
    except InputError:
        raise
    except UnidentifiedImageError:
        raise InputError(Stage.DECODE, _not_an_image(data)) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError(Stage.DECODE, f"decompression bomb refused: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, ValueError, EOFError... on bad bytes
        raise InputError(Stage.DECODE, f"{type(exc).__name__}: {exc}") from None


def _available_formats() -> tuple[str, ...]:
    from PIL import Image

    Image.init()
    return tuple(name for name in FORMATS if name in Image.OPEN)


def _check_pixels(im: Image.Image) -> None:
    """Refuse an image over Pillow's limit even when the warnings filter was reset."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    width, height = im.size
    if limit and width * height > limit:
        raise InputError(Stage.DECODE, f"decompression bomb refused: {width}x{height} pixels is over the limit of {limit}")


def _not_an_image(data: bytes) -> str:
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html", b"<?xml", b"<")):
        return "not an image: the file holds HTML/XML text"
    return f"not an image in a supported format ({', '.join(_available_formats())})"


def _exif_transpose(im: Image.Image) -> Image.Image:
    """Apply the EXIF orientation tag; a broken EXIF block leaves the image as stored."""
    from PIL import ImageOps

    try:
        return ImageOps.exif_transpose(im) or im
    except Exception:  # noqa: BLE001 - whatever a broken EXIF block raises, the image stands as stored
        return im


def to_rgb(im: Image.Image) -> Image.Image:
    """Any Pillow mode to 8-bit RGB: palette and alpha composited on white, 16-bit and float
    grey scaled (not clipped) to 0..255, CMYK and the rest through Pillow's own conversion."""
    from PIL import Image

    if im.mode in _WIDE_GREY_MODES:
        im = _wide_grey_to_l(im)
    if im.mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    if im.mode in _ALPHA_MODES:
        rgba = im.convert("RGBA")
        background = Image.new("RGB", rgba.size, WHITE)
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return im if im.mode == "RGB" else im.convert("RGB")


def _wide_grey_to_l(im: Image.Image) -> Image.Image:
    """16-bit and 32-bit grey to 8 bits. Pillow's convert("L") clips at 255, which turns a
    16-bit photo white; scale instead."""
    import numpy as np
    from PIL import Image

    values = np.asarray(im).astype(np.float64)
    if im.mode.startswith("I;16") or (im.mode == "I" and values.max(initial=0) > 255):
        values = values / 257.0
    elif im.mode == "F":
        peak = values.max(initial=0)
        values = values * 255.0 if peak <= 1.0 else values * (255.0 / peak) if peak > 255 else values
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), mode="L")


# --- geometry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """Resize the short side to `short_side`, then take the centre `crop` (height, width).

    This is the classic ImageNet evaluation transform (torchvision `Resize` + `CenterCrop`).
    """

    short_side: int
    crop: tuple[int, int]
    resample: int  # a PIL.Image.Resampling value

    @property
    def draft(self) -> tuple[int, int]:
        """The JPEG decode size to ask for: twice the final short side, so that the bicubic
        pass still reduces by 2x or more. On a 12-megapixel photo this decodes at 1/4 scale,
        8x faster, and moves pixels by 0.5 levels on average (asking for 1x: 2 levels)."""
        side = 2 * max(self.short_side, *self.crop)
        return side, side


def resize_crop(im: Image.Image, geometry: Geometry) -> np.ndarray:
    """Resize + centre crop in one resampling pass: Pillow's `box` resamples only the part of
    the source that the crop keeps. Same pixels as resizing the whole image then cropping
    (to rounding at the border), without the full-size intermediate that a 1x10000 strip
    would blow up to gigabytes."""
    import numpy as np

    width, height = im.size
    crop_h, crop_w = geometry.crop
    scale = max(geometry.short_side, crop_h, crop_w) / min(width, height)
    resized_w = max(crop_w, int(width * scale))  # torchvision and transformers truncate too
    resized_h = max(crop_h, int(height * scale))
    left = int(round((resized_w - crop_w) / 2.0))
    top = int(round((resized_h - crop_h) / 2.0))
    sx, sy = width / resized_w, height / resized_h
    box = (left * sx, top * sy, (left + crop_w) * sx, (top + crop_h) * sy)
    out = im.resize((crop_w, crop_h), resample=geometry.resample, box=box)
    return np.ascontiguousarray(np.asarray(out, dtype=np.uint8))
