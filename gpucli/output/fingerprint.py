"""Hashes: an input's content digest, and the fingerprint of an output's settings.

A fingerprint of everything that changes the output (task, model and weights, dims, chunking,
dtype, effective options) is stored in the ledger with the settings themselves (`meta.settings`,
to say which one changed); another fingerprint is an error unless `--full`. `meta.schema_version`
says which rules wrote the ledger. A ledger without it (gpucli 0.1) fingerprinted only the
options given on the command line: it is migrated on open when some subset of this run's
effective options reproduces its fingerprint exactly (the options then did not change; an
upgrade never forces `--full` on an unchanged cron job). A later gpucli that adds an option (at
its default) keeps the output too.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Protocol

from gpucli.core.errors import UsageError


class Ledger(Protocol):
    """What the settings check reads and writes of a ledger (output/ledger.py's `Ledger`,
    which imports this module for `stamp`: named by shape, so the two form no cycle)."""

    gpucli_version: str

    def meta(self, key: str) -> str | None: ...

    def set_metas(self, values: dict[str, str]) -> None: ...


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()



SCHEMA_VERSION = "2"
LEGACY_KEYS = ("task", "model", "options", "dtype", "info", "weights")  # what gpucli 0.1 fingerprinted
LEGACY_MAX_OPTIONS = 16  # 2**16 candidate subsets hash in well under a second


def settings_json(parts: dict) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def fingerprint(parts: dict) -> str:
    return hashlib.sha256(settings_json(parts).encode()).hexdigest()[:32]


def legacy_match(stored: str, settings: dict, defaults: dict | None = None) -> bool:
    """Whether a gpucli 0.1 fingerprint (over the options given on its command line only) is
    what these settings give with the options that were given then: then no option changed.

    An option away from its default (`defaults`: the task's) must have been given then; one at
    its default may or may not have been: every such subset is tried. Past LEGACY_MAX_OPTIONS
    optional ones the search is skipped and the ledger accepted."""
    base = {key: settings[key] for key in LEGACY_KEYS if key in settings}
    options = settings.get("options") or {}
    defaults = defaults or {}
    given = {k: v for k, v in options.items() if k in defaults and not _same(v, defaults[k])}
    optional = sorted((k, v) for k, v in options.items() if k not in given)
    if len(optional) > LEGACY_MAX_OPTIONS:
        return True
    for size in range(len(optional) + 1):
        for subset in itertools.combinations(optional, size):
            if fingerprint({**base, "options": {**given, **dict(subset)}}) == stored:
                return True
    return False


def _same(a, b) -> bool:
    return settings_json({"v": a}) == settings_json({"v": b})


def settings_diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    """`options.chunk_overlap: 32 -> 16` for each leaf that differs."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "(unset)"), new.get(key, "(unset)")
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(settings_diff(a, b, f"{prefix}{key}."))
        elif a != b:
            out.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return out


def _short(value) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def check_settings(ledger: Ledger, settings: dict, full: bool, defaults: dict | None = None) -> bool:
    """True when the output must be rebuilt from scratch (`--full`, or a new output).
    Other settings raise UsageError naming them, unless `full`; a gpucli 0.1 ledger with
    the same settings is migrated (see the module docstring; `defaults`: the task's option
    defaults, which tell an option 0.1 must have been given from one it may not have been)."""
    value, stored = fingerprint(settings), ledger.meta("fingerprint")
    if stored is None:
        return True
    version = ledger.meta("schema_version")
    if version is not None and (not version.isdigit() or int(version) > int(SCHEMA_VERSION)):
        raise UsageError(f"this output's ledger was written by a newer gpucli (ledger schema {version}; this one "
                         f"knows {SCHEMA_VERSION}): upgrade gpucli, or choose a new --out")
    legacy = version is None
    if stored == value or (legacy and legacy_match(stored, settings, defaults)) or _only_new_options(ledger, settings):
        ledger.set_metas(stamp(settings, ledger.gpucli_version))  # a migrated or upgraded ledger holds this run's
        return full
    if full:
        return True
    raise UsageError(f"this output was made with other settings ({_describe(ledger, settings)}): "
                     "choose a new --out, or pass --full to rebuild it with the new settings")


def stamp(settings: dict, gpucli_version: str) -> dict[str, str]:
    """The ledger's meta entries that say which settings and rules made the output."""
    return {"fingerprint": fingerprint(settings), "settings": settings_json(settings),
            "schema_version": SCHEMA_VERSION, "gpucli_version": gpucli_version}


def _only_new_options(ledger: Ledger, settings: dict) -> bool:
    """The stored settings, and options it did not know of (added by a later gpucli, at
    their defaults): the same output, so an upgrade that adds an option needs no --full.
    Within one gpucli version the option set is fixed: a missing option is a change there."""
    old = ledger.meta("settings")
    if old is None or ledger.meta("gpucli_version") == ledger.gpucli_version:
        return False
    known = json.loads(old)
    current = json.loads(settings_json(settings))
    current["options"] = {k: v for k, v in (current.get("options") or {}).items()
                          if k in (known.get("options") or {})}
    return current == known


def _describe(ledger: Ledger, settings: dict) -> str:
    old = ledger.meta("settings")
    if old is None:
        return "model, options or dtype differ from its ledger, written by an earlier gpucli"
    changed = settings_diff(json.loads(old), json.loads(settings_json(settings)))
    return "; ".join(changed) or "its fingerprint differs"
