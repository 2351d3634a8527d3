"""Task registry: every module in this package that defines a `Task` subclass with a
`name` is a task. A fourth task is one new file here, nothing else to edit."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from gpucli.errors import UsageError
from gpucli.tasks.base import ModelEntry, Task, TaskSpec

__all__ = ["ModelEntry", "Task", "TaskSpec", "all_tasks", "get_task", "create_task"]


@cache
def all_tasks() -> dict[str, type[Task]]:
    found: dict[str, type[Task]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Task) and obj is not Task and obj.name:
                if obj.__module__ == module.__name__:
                    found[obj.name] = obj
    return dict(sorted(found.items()))


def get_task(name: str) -> type[Task]:
    """A registered name, or "package.module:Class" for tasks that live outside gpucli
    (plugins, and the fake tasks of the tests and benchmarks)."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        return getattr(importlib.import_module(module_name), attr)
    tasks = all_tasks()
    if name not in tasks:
        raise UsageError(f"unknown task {name!r}; choose one of: {', '.join(tasks)}")
    return tasks[name]


def create_task(spec: TaskSpec) -> Task:
    """The task that runs `spec` in a worker, a reader process or a Ray actor: its variant for the
    model (Task.variant), which the parent has resolved."""
    return get_task(spec.name).variant(spec)(spec)
