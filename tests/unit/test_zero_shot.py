"""Zero-shot labels (issue 43) without a model: how --labels, --labels-file and --label-template
are read and checked, what the workers are handed, and which task a classify run gets."""

from __future__ import annotations

import json

import pytest

from gpucli.core.config import build_config
from gpucli.core.errors import UsageError
from gpucli.tasks import TaskSpec
from gpucli.tasks.classify import ClassifyOptions, ClassifyTask
from gpucli.tasks.classify.labels import DEFAULT_TEMPLATE, ZeroShotLabels, parse_labels, read_labels_file


def test_labels_are_split_on_commas_stripped_and_blanks_dropped():
    assert parse_labels(" cat , dog,,a receipt ,") == ("cat", "dog", "a receipt")


def test_a_json_array_keeps_commas_inside_labels():
    assert parse_labels('["a cat, sleeping", "dog"]') == ("a cat, sleeping", "dog")


def test_text_that_only_looks_like_json_is_a_comma_list():
    assert parse_labels("[unk],cat") == ("[unk]", "cat")


def test_a_json_array_of_other_things_is_refused():
    with pytest.raises(UsageError, match="strings only"):
        parse_labels('["cat", 3]')


def test_a_labels_file_is_one_label_per_line_utf8_with_a_bom_and_blank_lines(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_bytes("\ufeffcat\r\n\r\n  a receipt, crumpled  \nchat noir\n".encode())
    assert read_labels_file(str(path)) == ("cat", "a receipt, crumpled", "chat noir")


def test_a_labels_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(UsageError, match="not UTF-8"):
        read_labels_file(str(path))


def test_prompts_put_each_label_in_the_template():
    labels = ZeroShotLabels(("cat", "a receipt"))
    assert labels.template == DEFAULT_TEMPLATE == "a photo of a {}."
    assert labels.prompts() == ["a photo of a cat.", "a photo of a a receipt."]  # as the pipeline formats: no guess
    assert ZeroShotLabels(("x",), "{{{0}}} or {0}").prompts() == ["{x} or x"]  # literal braces doubled


def test_the_workers_get_the_list_itself_and_read_it_back_unchanged(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("a cat, sleeping\n[unk]\nchat noir\n", encoding="utf-8")
    labels = ZeroShotLabels.of(None, str(path))
    assert json.loads(labels.carried()) == ["a cat, sleeping", "[unk]", "chat noir"]
    assert ZeroShotLabels.of(labels.carried(), None) == labels


@pytest.mark.parametrize(("labels", "labels_file", "template", "says"), [
    ("", None, DEFAULT_TEMPLATE, "empty"),
    ("cat,dog,cat, dog", None, DEFAULT_TEMPLATE, "'cat', 'dog' given more than once"),
    ("cat", "labels.txt", DEFAULT_TEMPLATE, "not both"),
    ("cat", None, "a photo", "must hold {}"),
    ("cat", None, "a {} and a {}", "must hold {}"),
    ("cat", None, "a {label}", "must hold {}"),
    (None, None, "a {} photo", "give --labels or --labels-file"),
])
def test_bad_options_are_usage_errors_when_the_config_is_built(labels, labels_file, template, says):
    with pytest.raises(UsageError, match=None) as caught:
        ClassifyOptions(labels=labels, labels_file=labels_file, label_template=template)
    assert says in str(caught.value)


def test_the_options_come_from_flags_environment_and_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[classify]\nlabels_file = "labels.txt"\nlabel_template = "a {}"\n', encoding="utf-8")
    built = build_config("classify", ClassifyOptions, {"paths": (".",)}, config, environ={})
    assert built.task_options == {"labels_file": "labels.txt", "label_template": "a {}"}
    env = build_config("classify", ClassifyOptions, {"paths": (".",)}, None, environ={"GPUCLI_LABELS": "cat,dog"})
    assert env.task_options == {"labels": "cat,dog"}


def test_without_labels_a_classify_run_is_the_classifier_and_with_them_zero_shot():
    from gpucli.tasks.classify.zero_shot import ZeroShotTask

    assert ClassifyTask.variant(TaskSpec("classify", "efficientnet-lite0", {"top_k": 3})) is ClassifyTask
    assert ClassifyTask.variant(TaskSpec("classify", "m", {"labels": "cat"})) is ZeroShotTask
    assert ClassifyTask.variant(TaskSpec("classify", "m", {"labels_file": "f.txt"})) is ZeroShotTask
    assert ZeroShotTask.variant(TaskSpec("classify", "m", {"labels": "cat"})) is ZeroShotTask


def test_the_zero_shot_options_change_no_fingerprint_by_themselves():
    """The labels reach the ledger's settings through the output's metadata (gpucli.labels), as
    resolved: a list given by flag or by file is the same run, and a classic run's settings keep
    only the options they had."""
    import dataclasses

    rules = {f.name: f.metadata.get("fingerprint", True) for f in dataclasses.fields(ClassifyOptions)}
    assert rules == {"top_k": True, "backend": True, "labels": False, "labels_file": False, "label_template": False}
