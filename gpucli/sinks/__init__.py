"""Sink registry: every module in this package that defines a `Sink` subclass with a
`name` is a sink; `--out` picks the first whose `accepts` says yes."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from gpucli.errors import UsageError
from gpucli.sinks.base import Rewrite, Sink

__all__ = ["Rewrite", "Sink", "all_sinks", "open_sink"]


@cache
def all_sinks() -> list[type[Sink]]:
    found: list[type[Sink]] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Sink) and obj is not Sink and obj.name:
                if obj.__module__ == module.__name__:
                    found.append(obj)
    return found


def open_sink(target: str) -> Sink:
    for cls in all_sinks():
        if cls.accepts(target):
            return cls(target)
    names = ", ".join(f"{c.name} ({c.help})" for c in all_sinks())
    raise UsageError(f"--out {target!r}: no sink takes this output; use one of: {names}")
