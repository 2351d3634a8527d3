"""What an embed output says about itself, where its file metadata does not: the `info` and meta
entries of its ledger (all a JSON lines output has), and how its vectors read back
(`--vector-type`, gpucli/core/vectors.py)."""

from __future__ import annotations

import json
from typing import Any

from gpucli.core.errors import OutputError, UsageError
from gpucli.core.vectors import INT8_KEY, LEDGER_KEY, TYPE_KEY, Reading


def number(value: Any) -> int:
    """A metadata value that holds a count ("384"), else 0."""
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def ledger_info(where: str) -> dict[str, str]:
    """The `info` a run stored with its settings in the output's ledger ({} without one)."""
    try:
        settings = json.loads(ledger_meta(where, "settings") or "{}")
    except ValueError:
        settings = {}
    info = settings.get("info") if isinstance(settings, dict) else None
    return {str(k): str(v) for k, v in info.items()} if isinstance(info, dict) else {}


def ledger_meta(where: str, key: str) -> str | None:
    """One meta entry of the output's ledger (None without it, or without a ledger)."""
    from gpucli.output.ledger_view import ReadOnlyLedger
    from gpucli.output.sinks import open_sink
    from gpucli.output.state_dir import LEDGER, ledger_dir

    try:
        ledger = ReadOnlyLedger(ledger_dir(open_sink(where)) / LEDGER, check=False)
    except OutputError as exc:
        raise UsageError(f"--in {where}: its ledger {exc}") from None
    try:
        return ledger.meta(key)
    finally:
        ledger.close()


def reading(where: str, meta: dict[str, str], field: Any = None) -> Reading:
    """How the output's vectors read back: float16 and int8 as float32, binary as packed bits;
    int8's calibration from the `embedding` field's metadata, else from the ledger (all a JSON
    lines output has)."""
    in_field = field is not None and INT8_KEY.encode() in (field.metadata or {})
    int8 = ledger_meta(where, LEDGER_KEY) if meta.get(TYPE_KEY) == "int8" and not in_field else None
    try:
        return Reading.of(meta, field, int8)
    except ValueError as exc:
        raise UsageError(f"--in {where}: {exc}") from None
