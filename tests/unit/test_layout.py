"""The layout keeps its own rules (docs/architecture.md): no import cycle, no import from a
higher floor, no class over ~220 lines, no module over 450 lines unless its docstring says why;
tasks/ is one subpackage per task beside the families they share, no package imports another's
private (underscore) module, and every module named by a string exists (a move that breaks one
fails here, not at run time).

Read from the source with `ast` (every import counts: at the top, inside a function, under
TYPE_CHECKING), so a cycle hidden in a function or a type hint fails here too.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "gpucli"
# The floors, lowest first: a module may import its own floor and the floors below it.
FLOORS = ("core", "models", "inputs", "tasks", "output", "engines", "commands", "app")
MAX_CLASS_LINES = 220
MAX_MODULE_LINES = 450
LONG_MODULE_NOTE = "Longer than 450 lines because"  # what a long module's docstring must say


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        targets |= {_resolve(name) for name in names if name.split(".")[0] == "gpucli"}
    targets.discard(module)
    targets.discard("")
    return targets


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else -1


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return found


def test_every_module_sits_on_a_floor():
    assert [m for m in MODULES if m not in ("gpucli", "gpucli.__main__") and _floor(m) < 0] == []


def test_there_is_no_import_cycle():
    assert _cycles() == []


def test_no_module_imports_from_a_higher_floor():
    upward = [f"{module} -> {target}" for module, targets in sorted(GRAPH.items()) for target in sorted(targets)
              if _floor(module) >= 0 and _floor(target) > _floor(module)]
    assert upward == []


def test_no_class_is_longer_than_220_lines():
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long.append(f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []


def test_a_module_over_450_lines_says_why_at_its_top():
    silent = []
    for module, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES and LONG_MODULE_NOTE not in (ast.get_docstring(ast.parse(text)) or ""):
            silent.append(f"{module}: {text.count(chr(10))} lines")
    assert silent == []


def test_the_checks_see_the_graph():
    """Guards the guard: the graph holds known edges, so an empty answer above is not a blind one."""
    assert "gpucli.core.errors" in GRAPH["gpucli.engines.job"]
    assert _floor("gpucli.core.records") < _floor("gpucli.tasks.base") < _floor("gpucli.app.cli")


# --- tasks/: one subpackage per task, beside the families they share ---------------------------------
TASKS = ("embed", "classify", "transcribe")
FAMILIES = ("text", "image_text", "images")


def _package_of(module: str) -> str:
    return module if (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists() else module.rpartition(".")[0]


def test_tasks_hold_a_subpackage_per_task_and_per_shared_family_and_nothing_loose():
    tasks = PACKAGE / "tasks"
    assert sorted(p.name for p in tasks.glob("*.py")) == ["__init__.py", "base.py"]
    assert sorted(p.parent.name for p in tasks.glob("*/__init__.py")) == sorted(TASKS + FAMILIES)
    from gpucli.tasks import all_tasks

    assert sorted(all_tasks()) == sorted(TASKS)


def test_the_shared_families_import_no_task_and_no_task_imports_another():
    crossing = []
    for module, targets in sorted(GRAPH.items()):
        parts = module.split(".")
        if parts[:2] != ["gpucli", "tasks"] or len(parts) < 3:
            continue
        for target in sorted(targets):
            into = target.split(".")
            if into[:2] != ["gpucli", "tasks"] or len(into) < 3 or into[2] == parts[2] or into[2] == "base":
                continue
            if parts[2] in FAMILIES and into[2] in TASKS or parts[2] in TASKS and into[2] in TASKS:
                crossing.append(f"{module} -> {target}")
    assert crossing == []


def test_no_package_imports_another_packages_private_module():
    private = [f"{module} -> {target}" for module, targets in sorted(GRAPH.items()) for target in sorted(targets)
               if target.rpartition(".")[2].startswith("_") and target.rpartition(".")[2] != "__main__"
               and _package_of(target) != _package_of(module)]
    assert private == []


# --- modules named by strings --------------------------------------------------------------------------
MODULE_STRING = re.compile(r"^gpucli(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


def _named_by_strings() -> list[tuple[str, str]]:
    """(module that holds it, the string) for each string constant that names a module of a floor
    ("gpucli.engines.local.pipeline:run", "gpucli.output.sinks.qdrant.indexer"); output metadata
    keys (gpucli.model, gpucli.dims) name no floor and are not modules."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value):
                if node.value.split(".")[1].split(":")[0] in FLOORS:
                    found.append((module, node.value))
    return found


def test_every_module_named_by_a_string_exists():
    missing = []
    for holder, name in _named_by_strings():
        module, _, attribute = name.partition(":")
        if importlib.util.find_spec(module) is None:
            missing.append(f"{holder}: {name}")
        elif attribute and not hasattr(importlib.import_module(module), attribute):
            missing.append(f"{holder}: {name} (no {attribute})")
    assert missing == []


def test_the_string_check_sees_the_strings_and_the_registries_resolve():
    """Guards the guard, and what is named by parts of a string: the engines' entries, each document
    format's extractor (module and function built from the format's name)."""
    named = {name for _, name in _named_by_strings()}
    assert "gpucli.engines.local.pipeline:run" in named and "gpucli.engines.ray:run" in named
    from gpucli.engines import ENGINES
    from gpucli.inputs.extract import FORMATS

    for engine in ENGINES.values():
        module, _, function = engine.entry.partition(":")
        assert importlib.util.find_spec(module) is not None and function
    for fmt in FORMATS.values():
        extractor = fmt.extract
        assert hasattr(importlib.import_module(extractor.module), extractor.function), fmt.name
