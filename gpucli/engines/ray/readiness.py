"""How the driver learns that a predictor actor has loaded the model, for --setup-timeout-s.

The first result row comes only after a whole window was predicted: on a big model, a slow
cluster or a first window of large documents that is long after the load, and timing the rows
failed healthy runs as "no actor loaded". So the run's readiness is one key in Ray's GCS
key-value store (`ray.experimental.internal_kv`, part of a plain `pip install ray`: no dashboard
or state API needed), under an id the driver makes per run.

The driver is the key's only writer: it puts `run/ID/waiting` before any actor of the run
exists (`open_run`) and deletes it when the run ends (`close_run`); an actor whose constructor
has run `setup` deletes it too (`mark_loaded`), and the driver's watch reads "loaded" from its
absence. Nothing an actor does can leave a key behind: an actor that finishes loading after the
run ended deletes what is gone already. (The other way round, actors putting a `loaded` key that
the driver deleted at the end, left one key per run on a long-lived cluster whenever an actor
put it after the driver's clean-up: seen on CI.)

Best effort: a Ray without this store leaves the driver with its other signal, the first row.
"""

from __future__ import annotations

import uuid

NAMESPACE = "gpucli"  # keeps our keys apart from Ray's own and other applications'


def new_run_id() -> str:
    return uuid.uuid4().hex


def _key(run_id: str) -> str:
    return f"run/{run_id}/waiting"


def open_run(run_id: str) -> bool:
    """In the driver, before the run's actors start: the key that says no actor has loaded yet.
    False when the store cannot take it: then only the first row says an actor loaded."""
    try:
        from ray.experimental import internal_kv

        if not internal_kv._internal_kv_initialized():
            return False
        internal_kv._internal_kv_put(_key(run_id), b"1", overwrite=True, namespace=NAMESPACE)
        return bool(internal_kv._internal_kv_exists(_key(run_id), namespace=NAMESPACE))
    except Exception:  # noqa: BLE001 - no readiness key: the first row still tells
        return False


def mark_loaded(run_id: str) -> None:
    """In a predictor actor whose constructor finished: the run's waiting key gone. Called whatever
    `setup`'s outcome: a setup error reaches the driver as a row with the actor's own message,
    which beats a timeout."""
    if not run_id:
        return
    try:
        from ray.experimental import internal_kv

        if internal_kv._internal_kv_initialized():
            internal_kv._internal_kv_del(_key(run_id), namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - the driver still learns it from the first row
        pass


def loaded(run_id: str) -> bool:
    """In the driver, for a run it opened: whether some actor has loaded (the key is gone)."""
    try:
        from ray.experimental import internal_kv

        return not internal_kv._internal_kv_exists(_key(run_id), namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - a busy GCS or another Ray: look again later, or wait for a row
        return False


def close_run(run_id: str) -> None:
    """In the driver, once the run's actors are done: the key out of the GCS (it would outlive the
    run on a long-lived cluster)."""
    try:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(_key(run_id), namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - one small key left in a Ray that is going away anyway
        pass
