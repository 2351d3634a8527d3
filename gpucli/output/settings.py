"""What an output is made of, derived from the opened task: its schema (path, the task's
columns, the input's own), its metadata, and the settings its ledger fingerprints
(gpucli/output/fingerprint.py): everything that changes the rows, nothing that only describes them."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from gpucli import __version__
from gpucli.core.records import Source
from gpucli.tasks import Task, TaskSpec


def output_schema(task: Task):
    """`path` first, then the task's columns, then the input's own (see `input_columns`)."""
    import pyarrow as pa

    return pa.schema([pa.field("path", pa.string())] + list(task.schema()) + list(input_fields()))


MTIME_UNIT = "us"  # microseconds: what plain pyarrow's to_pylist (datetime), polars, DuckDB and pandas all read


def input_fields():
    """Per-input columns, last so that outputs written before them keep their column order:
    the input's size in bytes, its modification time, and the content digest the ledger keeps
    (to join rows with the tree, or find the rows of one file's version).

    `mtime` is timestamp[us, tz=UTC]: a nanosecond timestamp made plain pyarrow's `to_pylist()`
    raise "Nanosecond resolution temporal type ... Install pandas" (Python's datetime holds
    microseconds), and pandas is not part of gpucli's install. Outputs made with nanoseconds
    keep them (gpucli/output/sinks/parquet.py), and the ledger keeps every input's mtime in
    nanoseconds for its own comparisons either way."""
    import pyarrow as pa

    return [pa.field("size", pa.int64()), pa.field("mtime", pa.timestamp(MTIME_UNIT, tz="UTC")),
            pa.field("digest", pa.string())]


def input_columns(sources: list[Source], rows: np.ndarray) -> list[Any]:
    """The per-input columns of rows whose inputs are `sources`: `rows` holds each row's
    position in `sources`."""
    import pyarrow as pa

    size, mtime, digest = input_fields()
    positions = pa.array(rows)
    return [pa.array([s.size for s in sources], size.type).take(positions),
            pa.array([s.mtime_ns for s in sources], pa.timestamp("ns", tz="UTC")).cast(mtime.type, safe=False)
            .take(positions),  # the stat's nanoseconds, truncated to the column's unit
            pa.array([s.digest for s in sources], digest.type).take(positions)]


def output_metadata(task: Task) -> dict[str, str]:
    return {**task.info(), "gpucli.version": __version__, "gpucli.task": task.name}


DESCRIPTIVE_INFO = ("gpucli.extractors",)  # metadata that says how rows were made, not what they are


def _fingerprinted(option: dataclasses.Field, values: dict[str, Any]) -> bool:
    """Whether an option's value is part of the output's fingerprint: by default yes; `False` for
    options that change no row (--extract-timeout); "unless-default" for options added after outputs
    existed: only when given another value, so that those outputs (made at the default) stay incremental
    within one gpucli version, and rows made with the option given never mix with rows made without."""
    rule = option.metadata.get("fingerprint", True)
    if rule == "unless-default":
        return values[option.name] != option.default
    return bool(rule)


def output_settings(spec: TaskSpec, task: Task, metadata: dict[str, str]) -> dict[str, Any]:
    """Everything that changes the rows, with every option's effective value (a default
    given as a flag is the same run): an output's ledger refuses a run with others."""
    from gpucli.models.hub import DESCRIPTIVE_KEYS
    from gpucli.tasks.embed.st_model import fingerprint_info

    options = dataclasses.asdict(task.options) if dataclasses.is_dataclass(task.options) else dict(spec.options)
    if dataclasses.is_dataclass(task.options):  # options that change no row's content (--extract-timeout) are left out
        options = {f.name: options[f.name] for f in dataclasses.fields(task.options) if _fingerprinted(f, options)}
    info = {k: v for k, v in metadata.items()
            if k != "gpucli.version" and k not in DESCRIPTIVE_KEYS and k not in DESCRIPTIVE_INFO}
    return {"task": spec.name, "model": spec.model, "options": options, "dtype": spec.dtype,
            "info": fingerprint_info(info)}
