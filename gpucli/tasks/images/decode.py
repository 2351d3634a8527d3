"""Image helpers for the classify task: decode untrusted bytes to RGB, cut them to a model's
input size, and move whole batches of uint8 arrays to the workers through one shared-memory
block.

Imports of Pillow and numpy happen inside the functions: `gpucli --help` imports every task
module, and this one must stay light.
"""

from __future__ import annotations

import io
import mmap
import os
import secrets
import sys
import warnings
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any

from gpucli.core import leftovers
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
_swept = False  # leftover blocks of killed runs, swept at the first pack of this process


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
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, EOFError... on bad bytes
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
    except Exception:
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


# --- shared-memory transport --------------------------------------------------------------


@dataclass(frozen=True)
class ShmBatch:
    """What crosses the Pipe for one batch: the block's name and how to cut it."""

    name: str
    shapes: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int:
        return sum(_size(shape) for shape in self.shapes)


def _size(shape: tuple[int, ...]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


class ShmPool:
    """Parent-side owner of the shared-memory blocks of the batches in flight.

    `pack` creates one block per batch and keeps its handle; `release` unlinks it. The parent
    alone owns the blocks: workers attach without registering them with the resource tracker
    (see `read_batch`), so a block is unlinked exactly once, by `release`, or by the parent's
    resource tracker if the parent itself dies first. When the tracker dies too (the whole
    process group SIGKILLed), the first `pack` of the next run in any process sweeps them
    (leftovers.sweep_shm): only the parent packs, so workers never pay for the sweep.
    """

    def __init__(self) -> None:
        self._blocks: dict[str, shared_memory.SharedMemory] = {}

    def pack(self, arrays: list[np.ndarray]) -> ShmBatch:
        import numpy as np

        _sweep_once()
        shapes = tuple(tuple(int(d) for d in a.shape) for a in arrays)
        nbytes = sum(_size(shape) for shape in shapes)
        block = _create_block(max(nbytes, 1))
        try:
            flat = np.ndarray((nbytes,), dtype=np.uint8, buffer=block.buf)
            offset = 0
            for array, shape in zip(arrays, shapes):
                size = _size(shape)
                flat[offset : offset + size] = np.asarray(array, dtype=np.uint8).reshape(-1)
                offset += size
            del flat
            block.close()  # unmap here; the segment lives on until `release` unlinks it
        except BaseException:
            _unlink(block)
            raise
        self._blocks[_short_name(block)] = block
        return ShmBatch(_short_name(block), shapes)

    def release(self, batch: ShmBatch) -> None:
        """Unlink the batch's block. Safe to call twice and for a block packed elsewhere."""
        block = self._blocks.pop(batch.name, None)
        if block is None:
            try:
                block = shared_memory.SharedMemory(name=batch.name)
                block.close()
            except FileNotFoundError:
                return
        _unlink(block)

    def release_all(self) -> None:
        for name in list(self._blocks):
            self.release(ShmBatch(name, ()))

    def __len__(self) -> int:
        return len(self._blocks)


def _sweep_once() -> None:
    global _swept
    if not _swept:
        _swept = True
        leftovers.sweep_shm()


def _create_block(nbytes: int) -> shared_memory.SharedMemory:
    while True:
        try:
            return shared_memory.SharedMemory(name=f"gpucli_{os.getpid()}_{secrets.token_hex(6)}", create=True, size=nbytes)
        except FileExistsError:
            continue


def _short_name(block: shared_memory.SharedMemory) -> str:
    return block.name.lstrip("/")


def _unlink(block: shared_memory.SharedMemory) -> None:
    try:
        block.close()
        block.unlink()
    except FileNotFoundError:
        pass


def read_batch(batch: ShmBatch) -> list[np.ndarray]:
    """Worker side: copy the batch's arrays out of its block and let go of the block.

    The copy is one contiguous array; the returned items are views into it.
    """
    import numpy as np

    data = np.empty(batch.nbytes, dtype=np.uint8)
    if batch.nbytes:
        _copy_block(batch.name, data)
    arrays, offset = [], 0
    for shape in batch.shapes:
        size = _size(shape)
        arrays.append(data[offset : offset + size].reshape(shape))
        offset += size
    return arrays


def _copy_block(name: str, out: np.ndarray) -> None:
    """Copy a block without registering it with the resource tracker.

    `SharedMemory(name=...)` registers the block on attach. A spawned worker shares its
    parent's tracker, so that registration is harmless only until someone unregisters it:
    the usual advice, `resource_tracker.unregister` in the worker, removes the parent's
    entry too, and the parent's `unlink` then makes the tracker print a KeyError. Not
    registering at all is right whether or not the tracker is shared.
    """
    import numpy as np

    if sys.version_info >= (3, 13):
        block = shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
        view = np.ndarray(out.shape, dtype=np.uint8, buffer=block.buf)
        out[:] = view
        del view
        block.close()
        return
    if os.name == "nt":  # no resource tracker on Windows
        block = shared_memory.SharedMemory(name=name)
        view = np.ndarray(out.shape, dtype=np.uint8, buffer=block.buf)
        out[:] = view
        del view
        block.close()
        return
    _copy_posix(name, out)


def _copy_posix(name: str, out: np.ndarray) -> None:
    import _posixshmem  # CPython's own module behind SharedMemory on POSIX

    import numpy as np

    fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, mode=0o600)
    try:
        mapped = mmap.mmap(fd, out.nbytes, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        view = np.frombuffer(mapped, dtype=np.uint8, count=out.nbytes)
        out[:] = view
        del view
    finally:
        mapped.close()


def stack(arrays: list[Any]) -> np.ndarray:
    """One (N, H, W, C) array; a no-copy view when the items are consecutive views of one
    buffer, as `read_batch` returns them."""
    import numpy as np

    first = arrays[0]
    base = first.base
    if (
        isinstance(base, np.ndarray)
        and all(a.base is base and a.shape == first.shape for a in arrays)
        and base.ndim == 1
        and first.__array_interface__["data"][0] == base.__array_interface__["data"][0]
    ):
        size = first.size
        starts = [a.__array_interface__["data"][0] for a in arrays]
        if all(s == starts[0] + i * size for i, s in enumerate(starts)):
            return base[: size * len(arrays)].reshape((len(arrays), *first.shape))
    return np.stack(arrays)
