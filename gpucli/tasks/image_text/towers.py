"""An image-text model in a worker: its two towers on one device, through transformers'
`AutoModel` and the model's own `get_image_features` and `get_text_features`.

Images arrive as the processor resized and cropped them (uint8) and are rescaled and normalised
here, on the device, with the processor's own mean and standard deviation. Text windows are
padded as each family was trained (tasks/embed/image_text.py): CLIP to the longest window with an
attention mask, SigLIP to the tower's full length without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucli.core.errors import UsageError
from gpucli.models.devices import torch_dtype
from gpucli.tasks.images import hf_normalize


@dataclass(frozen=True)
class Towers:
    model: Any
    device: Any
    dtype: Any
    dims: int  # the first dims of each vector are kept (--dims)
    normalize: bool  # L2-normalised vectors (--no-normalize keeps the towers' own)
    pad_to: int  # SigLIP: every window padded to this length, with no attention mask; 0: CLIP's way
    mul: Any  # per channel: pixels * mul - sub = (pixels * scale - mean) / std
    sub: Any

    @staticmethod
    def load(model: str, path: str, device: str, dtype: str, processor: Any, *, dims: int, normalize: bool,
             pad_to: int) -> Towers:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()
        on = torch.device(device)
        dtype_on = torch_dtype(dtype, on)
        loaded = AutoModel.from_pretrained(path, trust_remote_code=False, local_files_only=True)
        if not (hasattr(loaded, "get_image_features") and hasattr(loaded, "get_text_features")):
            raise UsageError(f"model {model!r} ({type(loaded).__name__}) has no get_image_features / "
                             "get_text_features")
        norm = hf_normalize(processor)
        mul = torch.tensor([norm.scale / s for s in norm.std], device=on).view(1, 3, 1, 1)
        sub = torch.tensor([m / s for m, s in zip(norm.mean, norm.std)], device=on).view(1, 3, 1, 1)
        return Towers(loaded.to(device=on, dtype=dtype_on).eval(), on, dtype_on, dims, normalize, pad_to, mul, sub)

    def images(self, batch: np.ndarray) -> np.ndarray:
        """A float32 row per image of an (N, H, W, 3) uint8 batch."""
        import torch

        pixels = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device, non_blocking=True)
        with torch.inference_mode():
            pixels = pixels.permute(0, 3, 1, 2).float().mul_(self.mul).sub_(self.sub).to(self.dtype)
            return self._finish(self.model.get_image_features(pixel_values=pixels))

    def texts(self, rows: list[np.ndarray], pad_id: int) -> np.ndarray:
        """A float32 row per window of ids, padded with `pad_id`."""
        import torch

        width = max(self.pad_to, max(len(r) for r in rows))
        ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device)}
        if not self.pad_to:  # SigLIP was trained without a mask (tasks/embed/image_text.py)
            inputs["attention_mask"] = torch.from_numpy(mask).to(self.device)
        with torch.inference_mode():
            return self._finish(self.model.get_text_features(**inputs))

    def _finish(self, features: Any) -> np.ndarray:
        """transformers 5 returns the features as the output's pooler_output, 4.x as a tensor."""
        import torch

        vectors = features if isinstance(features, torch.Tensor) else features.pooler_output
        vectors = vectors.float()[..., : self.dims]
        if self.normalize:
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return vectors.cpu().numpy()
