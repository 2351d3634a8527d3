"""How the driver learns that a predictor actor has loaded the model, for --setup-timeout-s.

The first result row comes only after a whole window was predicted: on a big model, a slow
cluster or a first window of large documents that is long after the load, and timing the rows
failed healthy runs as "no actor loaded". So each Predictor, once its constructor has run
`setup`, puts one key in Ray's GCS key-value store (`ray.experimental.internal_kv`, part of a
plain `pip install ray`: no dashboard or state API needed), under an id the driver makes per
run; the driver's watch polls for that key and deletes it at the end of the run. Everything
here is best effort: a Ray without this store leaves the driver with its other signal, the
first row.
"""

from __future__ import annotations

import uuid

NAMESPACE = "gpucli"  # keeps our keys apart from Ray's own and other applications'


def new_run_id() -> str:
    return uuid.uuid4().hex


def _key(run_id: str) -> str:
    return f"run/{run_id}/loaded"


def mark_loaded(run_id: str) -> None:
    """In a predictor actor whose constructor finished. Called whatever `setup`'s outcome: a
    setup error reaches the driver as a row with the actor's own message, which beats a timeout."""
    if not run_id:
        return
    try:
        from ray.experimental import internal_kv

        if internal_kv._internal_kv_initialized():
            internal_kv._internal_kv_put(_key(run_id), b"1", overwrite=False, namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - the driver still learns it from the first row
        pass


def loaded(run_id: str) -> bool:
    """In the driver: whether some actor of this run has marked itself loaded."""
    try:
        from ray.experimental import internal_kv

        return bool(internal_kv._internal_kv_exists(_key(run_id), namespace=NAMESPACE))
    except Exception:  # noqa: BLE001 - a busy GCS or another Ray: look again later, or wait for a row
        return False


def forget(run_id: str) -> None:
    """The run's key out of the GCS (it would outlive the run on a long-lived cluster)."""
    try:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(_key(run_id), namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - one small key left in a Ray that is going away anyway
        pass
