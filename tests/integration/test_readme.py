"""The README tells the truth about the repository: every file it names exists, the fast test
selection it gives leaves out the slow tests, and the exit codes it lists are the CLI's."""

from __future__ import annotations

import re

from tests.helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
REPO_DIRS = ("gpucli", "tests", "configs", "benchmarks", "sample_data")
REPO_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(REPO_DIRS)})(?:/[\w.-]+)*/?)")
MODULE = re.compile(r"`([\w/]+\.py)`")


def named_paths() -> set[str]:
    return set(REPO_PATH.findall(README))


def test_every_repository_path_the_readme_names_exists():
    missing = sorted(p for p in named_paths() if not (ROOT / p).exists())
    assert not missing, f"README names files that do not exist: {missing}"


def test_every_module_the_development_section_names_exists():
    development = README[README.index("## Development"):]
    missing = sorted(m for m in MODULE.findall(development)
                     if not any((base / m).exists() for base in (ROOT, ROOT / "gpucli")))
    assert not missing, f"README names modules that do not exist: {missing}"


def test_the_fast_test_selection_leaves_out_the_slow_tests():
    selections = re.findall(r'python -m pytest -m "([^"]+)"', README)
    assert selections and all("not slow" in s and "not model" in s for s in selections), selections


def test_the_exit_code_table_lists_the_codes_the_cli_uses():
    rows = set(re.findall(r"^\| (\d+(?: / \d+)?) \|", README, re.MULTILINE))
    assert {"0", "1", "2", "3", "75", "130 / 143"} <= rows, rows
