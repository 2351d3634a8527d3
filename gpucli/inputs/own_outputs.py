"""gpucli's own outputs inside a walked tree, which are not inputs.

An earlier run may have written its output into the tree this run walks (`docs/vectors.jsonl`):
read as input, its rows would be embedded as text. An output is known by the ledger gpucli
keeps with it; a failures file by its name and its records. They are not inputs unless given as
a root.

Both layouts are known: a Parquet dataset with its state beside it (`N.parquet.gpucli/`) or, as
gpucli made it before, inside (`N.parquet/_gpucli/`).
"""

from __future__ import annotations

import os

STATE_SUFFIX = ".gpucli"  # `X.jsonl.gpucli/` beside a JSON lines output, `C.gpucli/` in a Qdrant storage
PARQUET_STATE = "_gpucli"  # inside a Parquet dataset directory
FAILURES_SUFFIX = ".failures.jsonl"
FAILURE_KEYS = {"path", "stage", "error"}
OUTPUT_LIKE = (STATE_SUFFIX, FAILURES_SUFFIX, ".parquet", ".PARQUET", ".Parquet")


def _has_ledger(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "ledger.sqlite"))


def is_output_dir(entries: list[os.DirEntry]) -> bool:
    """A listed directory that is a gpucli output as a whole: a Parquet dataset (its `_gpucli/`
    state inside) or an embedded Qdrant storage (`meta.json` and a `C.gpucli/` state inside)."""
    names = {e.name for e in entries if e.name in (PARQUET_STATE, "meta.json") or e.name.endswith(STATE_SUFFIX)}
    if PARQUET_STATE in names and _has_ledger(_path_of(entries, PARQUET_STATE)):
        return True
    return "meta.json" in names and any(n.endswith(STATE_SUFFIX) and _has_ledger(_path_of(entries, n)) for n in names)


def _path_of(entries: list[os.DirEntry], name: str) -> str:
    return next(e.path for e in entries if e.name == name)


def outputs_among(entries: list[os.DirEntry]) -> set[str]:
    """Names in one directory that are another gpucli output or its state: `N` with a state
    directory `N.gpucli/` holding a ledger (and that directory), a Parquet dataset `N.parquet/`
    with its ledger inside, and a failures file (`*.failures.jsonl` beside such an output, or
    holding gpucli's records). One `endswith` per name (~0.1 us); a file system call only for
    names like gpucli's own."""
    named = [e for e in entries if e.name.endswith(OUTPUT_LIKE)]
    if not named:
        return set()
    names = {e.name for e in entries}
    out: set[str] = set()
    for entry in named:
        name = entry.name
        if name.endswith(STATE_SUFFIX):
            output = name[: -len(STATE_SUFFIX)]
            if output in names and _has_ledger(entry.path):
                out.update((output, name, _failures_name(output)))
        elif not name.endswith(FAILURES_SUFFIX):  # a .parquet
            if _is_dir_or_link_to_one(entry) and _has_ledger(os.path.join(entry.path, PARQUET_STATE)):
                out.update((name, _failures_name(name)))
    for entry in named:
        if entry.name.endswith(FAILURES_SUFFIX) and entry.name not in out and _is_plain_file(entry) \
                and _holds_failure_records(entry.path):
            out.add(entry.name)
    return out


def _is_plain_file(entry: os.DirEntry) -> bool:
    """A regular file, not a link (a FIFO named like a failures file is never opened here)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _failures_name(output: str) -> str:
    """The failures file beside an output (`x.parquet`, `x.jsonl` -> `x.failures.jsonl`)."""
    stem, dot, _ = output.rpartition(".")
    return (stem if dot else output) + FAILURES_SUFFIX


def _holds_failure_records(path: str) -> bool:
    """A failures file gpucli wrote: empty (gpucli writes one for every run), or its first line
    a record `{path, stage, error}` (a table's record adds `id`)."""
    import json

    try:
        with open(path, "rb") as f:
            first = f.readline(65536)
    except OSError:
        return False
    if not first.strip():
        return True
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and FAILURE_KEYS <= set(record) <= FAILURE_KEYS | {"id"}


def _is_dir_or_link_to_one(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def is_output_path(path: str) -> bool:
    """Whether the directory at `path` is an output the walk leaves out, as `is_output_dir` on its
    listing or `outputs_among` on its parent's would say, without listing either (a watch asks for
    each directory above a changed file): a Parquet dataset or embedded Qdrant storage, or a
    directory with a state `path.gpucli/` beside it."""
    if _has_ledger(os.path.join(path, PARQUET_STATE)) or _has_ledger(path + STATE_SUFFIX):
        return True
    if not os.path.isfile(os.path.join(path, "meta.json")):
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(name.endswith(STATE_SUFFIX) and _has_ledger(os.path.join(path, name)) for name in names)
