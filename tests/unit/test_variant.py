"""Task.variant (issue 29): embed's image-text variant is chosen by what a model directory holds,
and `--dry-run`'s choice (download=False) never asks the Hub for a model it does not have."""

from __future__ import annotations

import json

import pytest

from gpucli.models import hub
from gpucli.tasks import TaskSpec
from gpucli.tasks.embed import EmbedTask


def _model_dir(root, model_type: str):
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": model_type}))
    return root


def test_an_image_text_directory_gets_the_variant_a_text_one_does_not(tmp_path):
    from gpucli.tasks.embed.image_text import ImageTextTask

    clip, bert = _model_dir(tmp_path / "clip", "clip"), _model_dir(tmp_path / "bert", "bert")
    assert EmbedTask.variant(TaskSpec("embed", str(clip))) is ImageTextTask
    assert EmbedTask.variant(TaskSpec("embed", str(bert))) is EmbedTask
    assert EmbedTask.variant(TaskSpec("embed", "minilm")) is EmbedTask  # an alias: no lookup at all


@pytest.mark.parametrize("download", [True, False])
def test_without_download_the_hub_is_never_asked(monkeypatch, download):
    asked: list[bool] = []

    def fake_download(repo_id, revision, local_only, allow, ignore):
        asked.append(local_only)
        raise hub.UsageError("not in the cache")

    monkeypatch.setattr(hub, "_download", fake_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert EmbedTask.variant(TaskSpec("embed", "someone/some-model"), download=download) is EmbedTask
    if download:  # the cache first, then the Hub on a miss
        assert asked == [True, False]
    else:  # the cache only
        assert asked == [True]
