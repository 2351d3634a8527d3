"""The README and the manual in docs/ tell the truth about the repository: every file and module
they name exists, every link leads somewhere, every default they quote is the code's (read from
the config dataclasses and the task classes, never from a copy), every value the example
configs set is the default, the fast test selection leaves out the slow tests, and the exit
codes listed are the CLI's. No processes: tests/integration/test_docs.py runs the commands."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {p: p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
REPO_DIRS = ("gpucli", "tests", "configs", "benchmarks", "sample_data", "docs")
REPO_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(REPO_DIRS)})(?:/[\w.-]+)*/?)")
MODULE = re.compile(r"`([\w]+/[\w/]+\.py)`")  # a bare `model.py` is a model's file, not ours
DOTTED = re.compile(r"`(gpucli(?:\.\w+)+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# The lead writes docs/architecture.md (issue 28); until it lands, links to it are the one
# exception. Remove this when the page is in the repository.
def named_paths() -> set[str]:
    found = {p.rstrip(".") for text in PAGES.values() for p in REPO_PATH.findall(text)}
    return found - {"docs/s"}  # a rate (documents per second), not a path


def test_every_repository_path_the_readme_and_docs_name_exists():
    missing = sorted(p for p in named_paths() if not (ROOT / p).exists())
    assert not missing, f"README or docs/ name files that do not exist: {missing}"


def test_every_module_the_readme_and_docs_name_exists():
    missing = sorted(m for text in PAGES.values() for m in MODULE.findall(text)
                     if not any((base / m).exists() for base in (ROOT, ROOT / "gpucli")))
    assert not missing, f"README or docs/ name modules that do not exist: {missing}"


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_module_name_resolves():
    """`gpucli.output.sinks.qdrant.NAMESPACE` names code; `gpucli.dims` is a metadata key (test_docs.py)."""
    modules = {p.stem for p in (ROOT / "gpucli").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    names = sorted({n for text in PAGES.values() for n in DOTTED.findall(text) if n.split(".")[1] in modules})
    missing = [n for n in names if not _resolves(n)]
    assert not missing, f"README or docs/ name modules or attributes that do not exist: {missing}"


def test_every_relative_link_leads_to_a_file():
    broken = []
    for page, text in PAGES.items():
        for target in LINK.findall(text):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t).resolve() for t in LINK.findall(README)}
    unlinked = sorted(p.name for p in PAGES if p.parent.name == "docs" and p.resolve() not in linked)
    assert not unlinked, f"docs/ pages the README does not link to: {unlinked}"


def test_the_readme_stays_a_landing_page():
    assert len(README.splitlines()) <= 200


def test_no_page_names_a_tool_that_is_not_installed():
    # huggingface_hub ships `hf`; `huggingface-cli` is gone from the version gpucli installs
    assert not [p.name for p, text in PAGES.items() if "huggingface-cli" in text]


def test_every_python_snippet_says_how_to_install_what_gpucli_does_not():
    extra = {"pandas": "pandas", "polars": "polars", "duckdb": "duckdb"}
    missing = []
    for page, text in PAGES.items():
        for match in re.finditer(r"```python\n(.*?)```", text, re.DOTALL):
            before = text[max(0, match.start() - 400):match.start()]
            for module, package in extra.items():
                if re.search(rf"^\s*import {module}\b", match.group(1), re.MULTILINE) and \
                        f"pip install {package}" not in match.group(1) + before:
                    missing.append(f"{page.name}: {module}")
    assert not missing, f"snippets that import a package gpucli does not install, without `pip install`: {missing}"


# --- defaults ------------------------------------------------------------------------------------

def _task(name: str):
    from gpucli.tasks import all_tasks

    return all_tasks()[name]


def _command(name: str):
    import typer

    from gpucli.app.cli import app

    return typer.main.get_command(app).commands[name]


def code_defaults(task_name: str) -> dict[str, dict[str, object]]:
    """flag -> {"gpu": value, "cpu": value}: the default a run gets on a host with and without a
    GPU, from RunConfig, the task's Options and, where those hold a "the task's default"
    sentinel, the task's own class attributes."""
    from gpucli.core.config import RunConfig

    task = _task(task_name)
    fields = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    fields.update({f.name: f.default for f in dataclasses.fields(task.Options)})
    resolved = {
        "batch_size": (task.default_batch_size, task.cpu_batch_size or task.default_batch_size),
        "max_batch_cost": (task.default_max_cost, task.cpu_max_cost or task.default_max_cost),
        "max_file_mb": (task.max_file_mb, task.max_file_mb),
        "model": (task.default_model, task.default_model),
        "out": (f"{task_name}.parquet", f"{task_name}.parquet"),
    }
    found = {}
    for param in _command(task_name).params:
        if param.name not in fields and param.name not in resolved:
            continue
        gpu, cpu = resolved.get(param.name, (fields.get(param.name), fields.get(param.name)))
        for flag in param.opts:
            if flag.startswith("--"):
                found[flag] = {"gpu": gpu, "cpu": cpu}
    return found


def same(text: str, value: object) -> bool:
    text = text.strip().strip("`").rstrip(",")
    if isinstance(value, bool):
        return text in (("on", "true") if value else ("off", "false"))
    if isinstance(value, (int, float)):
        try:
            return float(text.replace(",", "")) == float(value)
        except ValueError:
            return False
    return text == (value or "none")


def _defaults_table() -> list[list[str]]:
    text = (ROOT / "docs" / "options-and-config.md").read_text(encoding="utf-8")
    section = text[text.index("## Defaults per task"):]
    rows = [line for line in section.splitlines() if line.startswith("| `--")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


TASKS = ("embed", "classify", "transcribe")


@pytest.mark.parametrize("row", _defaults_table(), ids=lambda row: row[0].strip("`"))
def test_the_defaults_table_quotes_the_code(row):
    flag = row[0].strip("`")
    wrong = []
    for task_name, cell in zip(TASKS, row[1:]):
        defaults = code_defaults(task_name).get(flag)
        if cell == "—":
            assert defaults is None, f"{flag} is an option of {task_name}: give its default"
            continue
        assert defaults is not None, f"{task_name} has no {flag}"
        first = cell.split()[0]
        on_cpu = re.search(r"([\d,.]+) on CPU", cell)
        if not same(first, defaults["gpu"]):
            wrong.append(f"{task_name}: {cell!r}, the code says {defaults['gpu']!r}")
        cpu_text = on_cpu.group(1) if on_cpu else first
        if not same(cpu_text, defaults["cpu"]):
            wrong.append(f"{task_name} on CPU: {cell!r}, the code says {defaults['cpu']!r}")
    assert not wrong, f"{flag}: {wrong}"


def test_the_defaults_table_covers_the_numeric_options():
    listed = {row[0].strip("`") for row in _defaults_table()}
    numeric = {"--batch-size", "--max-batch-cost", "--max-wait-ms", "--max-file-mb", "--top-k", "--chunk-tokens",
               "--chunk-overlap", "--extract-timeout", "--beam-size", "--max-chunk-s", "--max-duration-s"}
    assert numeric <= listed, numeric - listed


PROSE_DEFAULT = re.compile(r"`(--[a-z][\w-]*)(?: [^`]*)?`\s*\(default:?\s+`?([\w.,]+)")


def test_every_default_quoted_in_prose_is_the_code_s():
    wrong = []
    for page, text in PAGES.items():
        for flag, quoted in PROSE_DEFAULT.findall(text):
            values = [d[host] for t in TASKS if (d := code_defaults(t).get(flag)) for host in ("gpu", "cpu")]
            if not values or not all(same(quoted, v) for v in values):
                wrong.append(f"{page.name}: {flag} (default {quoted}); the code: {sorted(set(map(str, values)))}")
    assert not wrong, wrong


def test_the_figures_the_docs_quote_for_the_code_are_the_code_s():
    from gpucli.output.sinks.qdrant.target import DEFAULT_BATCH
    from gpucli.tasks.text.unknown import MAX_UNKNOWN_SHARE

    qdrant = (ROOT / "docs" / "qdrant.md").read_text(encoding="utf-8")
    documents = (ROOT / "docs" / "documents.md").read_text(encoding="utf-8")
    assert f"default {DEFAULT_BATCH})" in qdrant
    assert f"more than **{round(MAX_UNKNOWN_SHARE * 100)}%**" in documents
    assert f"a {code_defaults('embed')['--chunk-overlap']['gpu']}-token overlap" in documents


# --- configs/ ------------------------------------------------------------------------------------

CONFIGS = sorted((ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_an_example_config_sets_only_defaults(path: Path):
    import tomllib

    from gpucli.core.config import build_config

    task_name = path.stem
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    values.update(data.get(task_name, {}))
    defaults = {flag[2:].replace("-", "_"): d for flag, d in code_defaults(task_name).items()}
    defaults.update({p.name: code_defaults(task_name)[o] for p in _command(task_name).params
                     for o in p.opts if o in code_defaults(task_name)})
    wrong = [f"{key} = {value!r} (default {defaults.get(key)})" for key, value in values.items()
             if key not in defaults or not all(_equal(value, d) for d in defaults[key].values())]
    assert not wrong, f"{path.name} sets values other than the defaults (comment them out as examples): {wrong}"
    build_config(task_name, _task(task_name).Options, {"paths": ("sample_data",)}, path, environ={})  # it loads


def _equal(value: object, default: object) -> bool:
    if isinstance(default, tuple):
        return tuple(value) == default
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return not isinstance(value, bool) and float(value) == float(default)
    return value == default


def test_the_fast_test_selection_leaves_out_the_slow_tests():
    selections = re.findall(r'python -m pytest -m "([^"]+)"', README)
    assert selections and all("not slow" in s and "not model" in s for s in selections), selections


@pytest.mark.parametrize("page", ["README.md", "docs/failures-and-exit-codes.md"])
def test_the_exit_code_table_lists_the_codes_the_cli_uses(page):
    from gpucli.core import errors

    text = (ROOT / page).read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| (\d+(?: / \d+)?) \|", text, re.MULTILINE))
    assert {"0", "1", "2", "3", "75", "130 / 143"} <= rows, rows
    assert (errors.EXIT_SIGINT, errors.EXIT_SIGTERM) == (130, 143)
