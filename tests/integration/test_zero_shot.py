"""`gpucli classify --labels` (issue 43): zero-shot labels scored by an image-text model, on the tiny
CLIP and SigLIP of tests/image_text_models.py. The rows equal transformers'
`pipeline("zero-shot-image-classification")` on the same model (labels in the same order, the same
scores) for real photos; bad images are failure records; the labels and template are part of the
output's settings (another list is refused without --full); usage errors exit 2.

The CLI runs name the models as Hugging Face ids in a cache laid out as a download leaves it
(HF_HUB_OFFLINE): `gpucli classify` refuses an image-text *directory* before the task sees
--labels (app/cli.py's check_model, see test_a_local_model_directory_through_the_cli). The task
itself is also run in this process on the local directories.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.errors import UsageError
from gpucli.core.records import Source
from gpucli.tasks import TaskSpec, create_task
from tests.helpers import SAMPLE, save_tiny_vit
from tests.image_text_models import open_like_gpucli, save_tiny_clip, save_tiny_siglip

Image = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PHOTOS = ("astronaut.jpg", "chelsea.png", "chelsea_exif_rotated.jpg", "coffee.png", "coins.png", "rocket.jpg")
LABELS = ("cat", "dog", "a receipt", "a cup of coffee", "rocket")
SIGLIP_LABELS = ("a red car", "a cat, sleeping", "coffee", "an astronaut")  # one holds a comma: a JSON array
SIGLIP_TEMPLATE = "an image of {}"
SIGLIP_POSITIONS = 64  # the pipeline pads SigLIP's prompts to 64 tokens, every released SigLIP's text tower
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ATOL = 1e-4


# --- models and trees ---------------------------------------------------------------------------
def save_tiny_siglip_64(path: Path, *, sentencepiece: bool = False) -> Path:
    """The tiny SigLIP with a 64-position text tower (the pipeline's fixed max_length) and its
    logit_bias at 0, so that its sigmoid scores spread around 0.5 (at the random init's -10 they
    are all ~1e-5, and any atol would pass)."""
    import tests.image_text_models as tiny

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tiny, "SIGLIP_TEXT_POSITIONS", SIGLIP_POSITIONS)
        save_tiny_siglip(path, sentencepiece=sentencepiece)
    model = transformers.SiglipModel.from_pretrained(path)
    with torch.no_grad():
        model.logit_bias.zero_()
    model.save_pretrained(path)
    return path


def in_hub_cache(model_dir: Path, cache: Path, repo_id: str) -> str:
    """Lay a saved model out as the Hugging Face cache does after a download; returns its id."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(model_dir, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return repo_id


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zero-shot-models")
    return {"clip": save_tiny_clip(root / "clip"), "siglip": save_tiny_siglip_64(root / "siglip"),
            "vit": save_tiny_vit(root / "vit")}


@pytest.fixture(scope="module")
def hub(models, tmp_path_factory):
    """The models as Hub ids in an offline cache, for the module's runs."""
    cache = tmp_path_factory.mktemp("hub")
    ids = {name: in_hub_cache(path, cache, f"tiny/{name}") for name, path in models.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(cache))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield ids


def bad_images() -> dict[str, bytes]:
    jpeg = (SAMPLE / "images" / "astronaut.jpg").read_bytes()
    return {"bad/empty.jpg": b"", "bad/truncated.jpg": jpeg[: len(jpeg) // 3],
            "bad/notes.png": b"just some text named like a picture\n" * 8}


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    return root


def photos() -> dict[str, bytes]:
    return {f"photos/{n}": (SAMPLE / "images" / n).read_bytes() for n in PHOTOS}


# --- running ------------------------------------------------------------------------------------
def classify(tree: Path, model: str, out: Path, *extra) -> object:
    return CliRunner().invoke(app, ["classify", str(tree), "--model", model, "--out", str(out), "--devices", "cpu",
                                    "--progress", "off", "--json", *map(str, extra)])


def summary_of(result) -> dict:
    assert result.stdout.strip(), f"exit {result.exit_code}, no summary; stderr: {result.stderr}"
    return json.loads(result.stdout)


def rows_of(out: Path) -> dict[str, dict]:
    rows = (ds.dataset(str(out), format="parquet").to_table().to_pylist() if out.suffix == ".parquet"
            else [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()])
    return {r["path"]: r for r in rows}


def metadata(out: Path) -> dict[str, str]:
    schema = ds.dataset(str(out), format="parquet").schema
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


def failures(summary: dict) -> dict[str, dict]:
    lines = Path(summary["failures_file"]).read_text(encoding="utf-8").splitlines()
    return {r["path"]: r for r in map(json.loads, lines)}


def pipeline_says(model_dir: Path, labels: tuple[str, ...], template: str, tree: Path, paths: list[str]) -> dict:
    """transformers' zero-shot pipeline per image, opened as a user opens it (EXIF, RGB)."""
    pipe = transformers.pipeline("zero-shot-image-classification", model=str(model_dir), device="cpu")
    return {p: pipe(open_like_gpucli(tree / p), candidate_labels=list(labels), hypothesis_template=template)
            for p in paths}


def assert_rows_equal_pipeline(rows: dict, want: dict, labels: tuple[str, ...], k: int) -> None:
    assert set(rows) == set(want)
    for path, ranked in want.items():
        row, top = rows[path], ranked[:k]
        assert row["labels"] == [r["label"] for r in top], path
        np.testing.assert_allclose(row["scores"], [r["score"] for r in top], atol=ATOL, rtol=0, err_msg=path)
        assert row["class_ids"] == [labels.index(label) for label in row["labels"]]
        assert row["label"] == row["labels"][0]


# --- the rows equal transformers' pipeline ------------------------------------------------------
@pytest.fixture(scope="module")
def clip_run(models, hub, tmp_path_factory):
    """The photos and three bad images into Parquet with the tiny CLIP, top 3 of 5 labels, the default template."""
    base = tmp_path_factory.mktemp("clip-run")
    tree = make_tree(base / "tree", {**photos(), **bad_images()})
    out = base / "labels.parquet"
    return tree, out, classify(tree, hub["clip"], out, "--labels", ",".join(LABELS), "--top-k", 3)


def test_clip_rows_equal_the_zero_shot_pipeline(clip_run, models):
    tree, out, result = clip_run
    summary = summary_of(result)
    assert summary["succeeded"] == len(PHOTOS) and summary["rows"] == len(PHOTOS)
    want = pipeline_says(models["clip"], LABELS, "a photo of a {}.", tree, [f"photos/{n}" for n in PHOTOS])
    assert_rows_equal_pipeline(rows_of(out), want, LABELS, k=3)
    rows = rows_of(out)
    assert all(len(r["labels"]) == 3 and sum(r["scores"]) < 1 for r in rows.values())  # top 3 of a softmax over 5


def test_bad_images_are_failure_records_and_the_rest_go_on(clip_run):
    _, _, result = clip_run
    summary = summary_of(result)
    assert result.exit_code == 1 and summary["failed"] == 3
    assert summary["inputs"] == summary["succeeded"] + summary["failed"] + summary["skipped"]
    failed = failures(summary)
    assert set(failed) == set(bad_images())
    assert all(f["stage"] in ("read", "decode", "preprocess") and f["error"] for f in failed.values())


def test_the_output_names_its_labels_template_and_scores(clip_run):
    _, out, _ = clip_run
    meta = metadata(out)
    assert json.loads(meta["gpucli.labels"]) == list(LABELS)
    assert meta["gpucli.label_template"] == "a photo of a {}." and meta["gpucli.scores"] == "softmax"
    assert meta["gpucli.num_classes"] == "5" and meta["gpucli.zero_shot"] == "true"
    schema = ds.dataset(str(out), format="parquet").schema
    assert schema.names[:5] == ["path", "label", "labels", "scores", "class_ids"]  # classify's own columns


def test_siglip_rows_equal_the_zero_shot_pipeline(models, hub, tmp_path):
    """Sigmoid scores (each label alone: they need not sum to one), a template of one's own, a
    label with a comma given in a JSON array, top-k above the number of labels, JSON lines."""
    tree = make_tree(tmp_path / "tree", photos())
    out = tmp_path / "labels.jsonl"
    result = classify(tree, hub["siglip"], out, "--labels", json.dumps(SIGLIP_LABELS), "--label-template",
                      SIGLIP_TEMPLATE, "--top-k", 10)
    assert summary_of(result)["exit_code"] == 0, result.stderr
    want = pipeline_says(models["siglip"], SIGLIP_LABELS, SIGLIP_TEMPLATE, tree, [f"photos/{n}" for n in PHOTOS])
    rows = rows_of(out)
    assert_rows_equal_pipeline(rows, want, SIGLIP_LABELS, k=len(SIGLIP_LABELS))
    spread = [s for r in rows.values() for s in r["scores"]]
    assert 0.05 < min(spread) and max(spread) < 0.95  # the bias at 0: scores that mean something at ATOL
    assert any(abs(sum(r["scores"]) - 1) > 0.1 for r in rows.values())  # a sigmoid per label, not a softmax


@pytest.fixture(scope="module")
def siglip_spiece(tmp_path_factory) -> Path:
    """The tiny SigLIP as the Hub's google/siglip-* repos ship their tokenizer: spiece.model only
    (transformers' slow SiglipTokenizer, which returns no attention mask)."""
    return save_tiny_siglip_64(tmp_path_factory.mktemp("siglip-spiece") / "model", sentencepiece=True)


@pytest.mark.parametrize("which", ["clip", "siglip-spiece"])
def test_the_task_on_a_local_directory_equals_the_pipeline(which, request):
    """The task itself (parent and worker side in this process) on a local model directory."""
    model = request.getfixturevalue("models")["clip"] if which == "clip" else request.getfixturevalue("siglip_spiece")
    labels = ["dog", "Cat", "a cup of coffee, hot"]
    task = create_task(TaskSpec("classify", str(model), {"labels": json.dumps(labels), "top_k": 2}))
    assert type(task).__name__ == "ZeroShotTask"
    task.open()
    task.setup("cpu")
    paths = [SAMPLE / "images" / n for n in ("chelsea.png", "coffee.png", "rocket.jpg")]
    payloads = [task.prepare(Source(i, p.name, str(p)), p.read_bytes())[0].payload for i, p in enumerate(paths)]
    got = task.predict(payloads)
    pipe = transformers.pipeline("zero-shot-image-classification", model=str(model), device="cpu")
    for row, path in zip(got, paths):
        want = pipe(open_like_gpucli(path), candidate_labels=labels, hypothesis_template="a photo of a {}.")[:2]
        assert row["labels"] == [w["label"] for w in want]
        np.testing.assert_allclose(row["scores"], [w["score"] for w in want], atol=ATOL, rtol=0)


def test_a_local_model_directory_through_the_cli(models, tmp_path):
    tree = make_tree(tmp_path / "tree", {"a.png": (SAMPLE / "images" / "coffee.png").read_bytes()})
    result = classify(tree, models["clip"], tmp_path / "out.parquet", "--labels", "cat,coffee")
    assert result.exit_code == 0, result.stderr


def test_classify_without_labels_on_an_image_text_directory_points_to_labels(models, tmp_path):
    tree = make_tree(tmp_path / "tree", {"a.png": (SAMPLE / "images" / "coffee.png").read_bytes()})
    result = classify(tree, models["clip"], tmp_path / "out.parquet")
    assert result.exit_code == 2 and '--labels "cat,dog"' in result.stderr and "gpucli embed" in result.stderr


# --- the labels are the output's settings -------------------------------------------------------
def test_reruns_the_same_labels_from_a_file_and_refuses_others_without_full(clip_run, hub, tmp_path):
    tree, out, _ = clip_run
    labels_file = tmp_path / "labels.txt"
    labels_file.write_text("\n".join(LABELS) + "\n\n", encoding="utf-8")  # the same list, from a file
    again = summary_of(classify(tree, hub["clip"], out, "--labels-file", labels_file, "--top-k", 3))
    assert again["unchanged"] == len(PHOTOS) and again["succeeded"] == 0 and again["exit_code"] == 0

    other = classify(tree, hub["clip"], out, "--labels", "cat,dog", "--top-k", 3)
    assert other.exit_code == 2 and "gpucli.labels" in other.stderr and "--full" in other.stderr
    template = classify(tree, hub["clip"], out, "--labels", ",".join(LABELS), "--label-template", "{}", "--top-k", 3)
    assert template.exit_code == 2 and "gpucli.label_template" in template.stderr

    full = summary_of(classify(tree, hub["clip"], out, "--labels", "dog,cat", "--top-k", 3, "--full"))
    assert full["succeeded"] == len(PHOTOS)
    rows = rows_of(out)
    assert set(rows) == {f"photos/{n}" for n in PHOTOS}  # rebuilt: no row of the old list is left
    assert all(sorted(r["labels"]) == ["cat", "dog"] and sorted(r["class_ids"]) == [0, 1] for r in rows.values())
    assert json.loads(metadata(out)["gpucli.labels"]) == ["dog", "cat"]


def test_without_labels_classify_keeps_its_settings(models):
    """The new options are out of a classic run's fingerprint: its outputs stay incremental."""
    from gpucli.output.settings import output_metadata, output_settings

    task = create_task(TaskSpec("classify", str(models["vit"]), {"top_k": 2}))
    assert type(task).__name__ == "ClassifyTask"
    task.open()
    settings = output_settings(task.spec, task, output_metadata(task))
    assert set(settings["options"]) == {"top_k", "backend"}
    assert not any("label" in key for key in settings["info"])


# --- usage errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["efficientnet-lite0", "vit"])
def test_labels_with_a_model_that_is_not_image_text_exit_2_naming_what_to_use(model, hub, tmp_path):
    tree = make_tree(tmp_path / "tree", {"a.png": (SAMPLE / "images" / "coffee.png").read_bytes()})
    result = classify(tree, hub.get(model, model), tmp_path / "out.parquet", "--labels", "cat,dog")
    assert result.exit_code == 2
    assert "image-text model (CLIP, SigLIP)" in result.stderr and "openai/clip-vit-base-patch32" in result.stderr


@pytest.mark.parametrize(("args", "says"), [
    (("--labels", ""), "empty"),
    (("--labels", " , ,"), "empty"),
    (("--labels", "cat,dog,cat"), "'cat' given more than once"),
    (("--labels", "Cat,cat"), "same text"),  # CLIP's tokenizer lowercases: one prompt for two labels
    (("--labels", "cat", "--labels-file", "x.txt"), "not both"),
    (("--labels", "cat", "--label-template", "a photo"), "{}"),
    (("--label-template", "a {} photo"), "give --labels"),
    (("--labels-file", "missing.txt"), "no such file"),
    (("--labels", "cat " * 80), "tokens"),  # longer than the text tower's 77
])
def test_bad_label_lists_are_usage_errors(args, says, hub, tmp_path):
    tree = make_tree(tmp_path / "tree", {"a.png": (SAMPLE / "images" / "coffee.png").read_bytes()})
    result = classify(tree, hub["clip"], tmp_path / "out.parquet", *args)
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr


def test_an_empty_labels_file_is_a_usage_error(hub, tmp_path):
    (tmp_path / "labels.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(UsageError, match="holds no label"):
        create_task(TaskSpec("classify", hub["clip"], {"labels_file": str(tmp_path / "labels.txt")})).open()
