"""Task registry: every subpackage here that names a `Task` subclass with a `name` at its top is
a task (gpucli/core/registry.py: the rule the sinks follow too). A fourth task is one new
subpackage, beside the families the tasks share (text/, image_text/, images/), whose `__init__`
names its task; the command, its options and help come from the task class."""

from __future__ import annotations

import importlib
import sys
from functools import cache

from gpucli.core.errors import UsageError
from gpucli.core.registry import discover, entries_of
from gpucli.tasks.base import ModelEntry, Task, TaskSpec

__all__ = ["ModelEntry", "Task", "TaskSpec", "all_tasks", "get_task", "create_task", "task_of_module", "every_option_name"]


@cache
def all_tasks() -> dict[str, type[Task]]:
    found: dict[str, type[Task]] = {}
    for task in discover(sys.modules[__name__], Task):
        if task.name in found:
            raise RuntimeError(f"two tasks are named {task.name!r}: {found[task.name]} and {task}. This is a bug.")
        found[task.name] = task
    return dict(sorted(found.items()))


def every_option_name() -> set[str]:
    """Every task's option names (GPUCLI_CHUNK_TOKENS is embed's, not a typo under classify).
    Imports every task, so the config asks for it only when a GPUCLI_* variable is unknown."""
    from gpucli.core.config import field_types

    try:
        tasks = all_tasks()
    except ImportError:  # pragma: no cover - a broken install: no names to spare
        return set()
    return {name for cls in tasks.values() for name in field_types(cls.Options)}


def get_task(name: str) -> type[Task]:
    """A registered name, or "package.module:Class" for tasks that live outside gpucli
    (plugins, and the fake tasks of the tests and benchmarks). A task named as its subpackage
    (embed/'s `embed`) is found without importing the others: a worker or a reader process
    that runs embed does not import classify's and transcribe's libraries (~0.15-0.3 s each
    process)."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        return getattr(importlib.import_module(module_name), attr)
    found = task_of_module(name)
    if found is not None:
        return found
    tasks = all_tasks()
    if name not in tasks:
        raise UsageError(f"unknown task {name!r}; choose one of: {', '.join(tasks)}")
    return tasks[name]


def task_of_module(name: str) -> type[Task] | None:
    """The task called `name` when the subpackage of that name defines it, else None."""
    if not name.isidentifier() or name.startswith("_") or name == "base":
        return None
    if all_tasks.cache_info().currsize:  # everything is imported already
        return all_tasks().get(name)
    try:
        found = entries_of(f"{__name__}.{name}", Task)
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            return None
        raise
    return next((task for task in found if task.name == name), None)


def create_task(spec: TaskSpec) -> Task:
    """The task that runs `spec` in a worker, a reader process or a Ray actor: its variant for the
    model (Task.variant), which the parent has resolved."""
    return get_task(spec.name).variant(spec)(spec)
