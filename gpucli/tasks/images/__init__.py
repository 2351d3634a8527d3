"""Images, as the image tasks (classify, embed with an image-text model) share them:

    decode     untrusted bytes -> uint8 RGB pixels at a model's input size (reader threads)
    batches    a batch's pixels to a worker through one shared-memory block
    processor  a model's Hugging Face image processor: resize and crop in the parent, rescale and
               normalise on the device
"""

from __future__ import annotations

from gpucli.tasks.images.batches import ShmBatch, ShmPool, read_batch, stack
from gpucli.tasks.images.decode import IMAGE_SUFFIXES, Geometry, open_image, resize_crop
from gpucli.tasks.images.processor import Normalize, SharedProcessor, hf_normalize, hf_processor

__all__ = ["IMAGE_SUFFIXES", "Geometry", "Normalize", "SharedProcessor", "ShmBatch", "ShmPool", "hf_normalize",
           "hf_processor", "open_image", "read_batch", "resize_crop", "stack"]
