"""The ONNX worker pools with numpy (issue 34: no torch import in it): every Pooling mode gives what
the torch pooling (sentence-transformers' arithmetic, line for line) gives, on padded batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpucli.tasks.embed.st_model import POOLING_MODES, EmbedModelConfig, pool, pool_numpy


def batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((5, 9, 16)).astype(np.float32)
    lengths = [9, 1, 4, 7, 2]
    mask = np.array([[1] * n + [0] * (9 - n) for n in lengths], dtype=np.int64)
    return hidden, mask


@pytest.mark.parametrize("mode", POOLING_MODES)
@pytest.mark.parametrize("normalize", [True, False])
def test_each_mode_equals_the_torch_pooling(mode, normalize):
    hidden, mask = batch()
    config = EmbedModelConfig(path="m", transformer_dir="m", pooling=(mode,), normalize=normalize)
    want = pool(torch.from_numpy(hidden), torch.from_numpy(mask), config).numpy()
    got = pool_numpy(hidden, mask, config)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_modes_concatenate_and_a_prompt_is_left_out_as_in_torch():
    hidden, mask = batch(1)
    before = mask.copy()
    config = EmbedModelConfig(path="m", transformer_dir="m", pooling=("cls", "mean", "max"), include_prompt=False)
    want = pool(torch.from_numpy(hidden), torch.from_numpy(mask), config, prompt_length=2).numpy()
    got = pool_numpy(hidden, mask, config, prompt_length=2)
    assert got.shape == (5, 48)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert (mask == before).all()  # the caller's mask is not changed


def test_the_option_overrides_the_models_normalisation():
    hidden, mask = batch(2)
    config = EmbedModelConfig(path="m", transformer_dir="m", normalize=False)
    got = pool_numpy(hidden, mask, config, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)
