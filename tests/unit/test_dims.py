"""--dims (issue 30): the Matryoshka sign, the checks and the cut, without processes or models."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucli.core.errors import UsageError
from gpucli.tasks.embed.dims import checked_dims, dims_info, matryoshka_sign, truncated


@pytest.mark.parametrize("files, sign", [
    ({"README.md": "---\ntags:\n- sentence-transformers\n- matryoshka\n---\n# m"}, "README.md"),
    ({"README.md": "Trained with MatryoshkaLoss over 768, 512, 256 dims."}, "README.md"),
    ({"README.md": "Supports MRL: cut to 256 dims."}, "README.md"),
    ({"config.json": json.dumps({"matryoshka_dimensions": [32, 64, 128]})}, "matryoshka_dimensions"),
    ({"config_sentence_transformers.json": json.dumps({"truncate_dim": 256})}, "truncate_dim"),
    ({"README.md": "A sentence-transformers model: it maps sentences to a 384 dimensional space.",
      "config.json": json.dumps({"hidden_size": 384})}, ""),
    ({}, ""),
])
def test_matryoshka_sign(tmp_path, files, sign):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = matryoshka_sign(str(tmp_path))
    assert (sign in found) if sign else found == ""


def test_checked_dims(tmp_path):
    assert checked_dims("m", str(tmp_path), 384, 0, False) == 384
    assert checked_dims("m", str(tmp_path), 384, 384, False) == 384
    with pytest.raises(UsageError, match="at most 384"):
        checked_dims("m", str(tmp_path), 384, 512, True)
    with pytest.raises(UsageError, match="--force-dims"):
        checked_dims("m", str(tmp_path), 384, 128, False)
    assert checked_dims("m", str(tmp_path), 384, 128, True) == 128
    (tmp_path / "README.md").write_text("tags: [matryoshka]")
    assert checked_dims("m", str(tmp_path), 384, 128, False) == 128


def test_truncated_renormalises_numpy_and_torch():
    rng = np.random.default_rng(0)
    full = rng.normal(size=(5, 16)).astype(np.float32)
    full /= np.linalg.norm(full, axis=1, keepdims=True)
    cut = truncated(full, 4, normalize=True)
    assert cut.shape == (5, 4)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(cut, full[:, :4] / np.linalg.norm(full[:, :4], axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(truncated(full, 4, normalize=False), full[:, :4])
    assert truncated(full, 16, normalize=True) is full
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(truncated(torch.from_numpy(full), 4, normalize=True).numpy(), cut, rtol=1e-6)


def test_dims_info_only_for_a_cut_output():
    assert dims_info(384, 384) == {}
    assert dims_info(384, 64) == {"gpucli.truncate_dims": "64", "gpucli.full_dims": "384"}


def test_what_gpucli_knows_comes_before_the_card(tmp_path):
    (tmp_path / "README.md").write_text("tags: [matryoshka]")  # as the default model's package ships it
    with pytest.raises(UsageError, match="--force-dims"):
        checked_dims("minilm", str(tmp_path), 384, 128, False, known=False)
    assert checked_dims("minilm", str(tmp_path), 384, 128, True, known=False) == 128
