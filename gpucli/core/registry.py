"""The one discovery rule of gpucli's registries (tasks, sinks): every module or subpackage of a
package, but `base` and private (`_`) ones, is imported, and the subclasses of the registry's base
class with a `name` that it defines or names at its top are its entries. A new task is a new
subpackage of gpucli/tasks/, a new sink a new module (or subpackage) of gpucli/output/sinks/:
nothing else to edit."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


def members(package: ModuleType) -> list[str]:
    """The names of the modules and subpackages that may hold entries, in name order."""
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__)
                  if not info.name.startswith("_") and info.name != "base")


def entries_of(module_name: str, base: type[T]) -> list[type[T]]:
    """The entries one module (or subpackage) holds: subclasses of `base` with a `name`, defined
    in it or in a module below it and named at its top (an import of another package's class
    is not an entry of this one)."""
    module = importlib.import_module(module_name)
    return [obj for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, base) and obj is not base and getattr(obj, "name", None)
            and (obj.__module__ == module_name or obj.__module__.startswith(module_name + "."))]


def discover(package: ModuleType, base: type[T]) -> list[type[T]]:
    """Every entry of every member of `package`, members in name order."""
    return [entry for name in members(package) for entry in entries_of(f"{package.__name__}.{name}", base)]
