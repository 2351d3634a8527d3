"""The script rule (issue 52): a model's languages from its card or its declaration, and a text mostly
in a script none of them uses refused. Texts: real man pages (tests/data/scripts, Debian's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucli.inputs.scripts import letters
from gpucli.models.languages import ANY, model_languages, scripts_of
from gpucli.tasks.text.scripts import ScriptRule

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "scripts"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def card(tmp_path: Path, front: str) -> str:
    (tmp_path / "README.md").write_text(f"---\n{front}\n---\n# A model\n", encoding="utf-8")
    return str(tmp_path)


def test_the_bundled_default_declares_english():
    assert model_languages("minilm", None) == ("en",)
    assert scripts_of(("en",)) == frozenset({"LATIN"})


@pytest.mark.parametrize("front,expected", [
    ("language: ru", ("ru",)), ("language:\n- en\n- el", ("en", "el")), ("language: multilingual", (ANY,)),
    ("tags:\n- sentence-transformers", (ANY,)), ("language: zh-CN", ("zh",)),
])
def test_a_models_languages_come_from_its_card(tmp_path, front, expected):
    assert model_languages("some/model", card(tmp_path, front)) == expected


@pytest.mark.parametrize("name", ["ru-cat.1.txt", "uk-cat.1.txt", "el-diff3.1.txt"])
def test_man_pages_in_cyrillic_and_greek_are_refused_for_an_english_model(name):
    reason = ScriptRule.of("minilm", None).refusal(sample(name))
    assert reason is not None and "--allow-other-scripts" in reason and "multilingual-e5" in reason


@pytest.mark.parametrize("name", ["en-cat.1.txt", "de-cat.1.txt"])
def test_latin_script_man_pages_are_not(name):
    assert ScriptRule.of("minilm", None).refusal(sample(name)) is None


def test_a_model_whose_card_names_the_language_reads_it(tmp_path):
    rule = ScriptRule.of("some/ru-model", card(tmp_path, "language:\n- ru\n- en"))
    assert rule.refusal(sample("ru-cat.1.txt")) is None
    assert rule.refusal(sample("el-diff3.1.txt")) is not None
    assert ScriptRule.of("some/any", card(tmp_path, "language: multilingual")).refusal(sample("el-diff3.1.txt")) is None


def test_an_english_text_naming_a_few_foreign_words_is_read():
    text = "The Russian word for cat is кошка, and the Greek one is γάτα; the rest of this text is English prose."
    assert ScriptRule.of("minilm", None).refusal(text) is None
    assert letters("深度学习 is deep learning").share({"CJK"}) > 0.3  # ideographs weigh 3 letters each
