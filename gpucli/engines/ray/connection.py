"""Joining Ray and the Ray Data settings a run needs: a private local Ray or a cluster, our
progress instead of Ray's, dropped blocks instead of an aborted job, bounded retries."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from gpucli.core import leftovers
from gpucli.core.errors import RunFailedError, UsageError

LOCAL_OBJECT_STORE_BYTES = 512 * 2**20  # a private local Ray; blocks of files are small
RETRIES = 1  # a call whose actor died is retried once (on a new actor) before its block is dropped
PREFLIGHT_TIMEOUT_MS = 5000
_start_cut = False  # a Ray start this process interrupted (start_was_cut)
TOKEN_HINT = ("the Ray cluster at {where} refused this driver's authentication token: set RAY_AUTH_MODE=token "
              "and the cluster's token in RAY_AUTH_TOKEN or a file named by RAY_AUTH_TOKEN_PATH "
              "(default ~/.ray/auth_token), as for Ray's own tools")


def connect(address: str = "") -> Callable[[], None]:
    """Join the Ray at `address` (or RAY_ADDRESS), or start a private local one; returns how to
    leave it. A Ray this process already joined (a test's session, a notebook) is used as is."""
    import ray
    import ray.exceptions

    if ray.is_initialized():
        return nothing
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    stops_are_ours()
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address:
        preflight(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)  # see errors_to_stderr
        except ConnectionError as exc:
            if isinstance(exc.__cause__, ray.exceptions.AuthenticationError):
                raise UsageError(TOKEN_HINT.format(where=address)) from None
            raise
        restore = errors_to_stderr()

        def leave() -> None:
            ray.shutdown()  # disconnects this driver; the cluster stays
            restore()

        return leave
    leftovers.sweep_ray_temp()  # directories of runs killed with SIGKILL (hundreds of MB each)
    # short, and named after this process: Ray's socket paths must fit 107 bytes, and the next
    # run's sweep must tell a live run's directory from a dead one's
    temp_dir = tempfile.mkdtemp(prefix=leftovers.ray_temp_prefix())
    try:
        start_local(temp_dir)
    except BaseException:  # a stop while Ray starts: nothing of this Ray is left behind
        global _start_cut
        _start_cut = True
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    restore = errors_to_stderr()

    def close() -> None:
        ray.shutdown()
        restore()
        shutil.rmtree(temp_dir, ignore_errors=True)

    return close


def start_was_cut() -> bool:
    """Whether a stop interrupted this process's private Ray while it started. Ray's C++ side,
    half set up, then crashes now and then as the interpreter finalizes, after the run's summary
    (SIGSEGV or an abort in 1-2 of 10 tries: exit 139 or 134 where 143 was due): the CLI ends
    such a process at once once its output is out (cli._exit_now_after_a_cut_ray_start)."""
    return _start_cut


def stops_are_ours() -> None:
    """This driver's SIGINT and SIGTERM are gpucli's (signals.DriverStops). ray.init would also
    install Ray's C++ failure-signal handler here, which catches SIGTERM too: a SIGTERM while Ray
    started then ended the run with an abort (exit 134) after its summary, not exit 143
    (ray-project/ray#37288). Off for this driver only: the raylet and the actors keep theirs."""
    try:
        from ray._private import ray_constants
    except ImportError:  # another Ray layout: its own handler stays
        return
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True  # read when this driver's core worker starts


def start_local(temp_dir: str, num_cpus: int | None = None,
                object_store_bytes: int = LOCAL_OBJECT_STORE_BYTES) -> None:
    """A single-node Ray for this process only: no dashboard, no usage stats, its own temp dir."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=num_cpus or cores(), object_store_memory=object_store_bytes,
             include_dashboard=False, _temp_dir=temp_dir, logging_level=logging.ERROR, log_to_driver=False)


def errors_to_stderr() -> Callable[[], None]:
    """stdout carries only data and the --json summary, but Ray's driver prints what the cluster
    reports (a raylet killed, a node marked dead) and its workers' output there: the workers'
    output is off (`log_to_driver=False`), the cluster's reports go to stderr. Returns how to
    undo it; a Ray without this hook is left as it is."""
    try:
        from ray._private import worker
    except ImportError:
        return nothing
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        return nothing

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    worker.print_to_stdstream = to_stderr

    def restore() -> None:
        worker.print_to_stdstream = original

    return restore


def preflight(address: str) -> None:
    """One GCS handshake before `ray.init`, which retries a refused token or an address nobody
    answers for about 20 s, printing a `gcs_client` warning a second, and then says only
    "Failed to connect". A wrong or missing token is the user's to fix (exit 2, naming the
    variables); an unreachable GCS fails the run (exit 3). Ray Client addresses (ray://) and
    a Ray without these internals go straight to `ray.init`."""
    try:
        import ray.exceptions
        from ray._private.services import canonicalize_bootstrap_address
        from ray._raylet import InnerGcsClient  # type: ignore[attr-defined]  # Ray's internals: an ImportError below
    except ImportError:
        return
    if address.startswith("ray://"):
        return
    try:
        gcs = canonicalize_bootstrap_address(address)
    except Exception:  # noqa: BLE001 - ray.init reports a bad address in its own words
        return
    if not gcs:
        return
    try:
        with quiet_stderr():  # the C++ client's own warning line, in place of our one line
            InnerGcsClient.standalone(gcs, None, PREFLIGHT_TIMEOUT_MS)
    except ray.exceptions.AuthenticationError:
        raise UsageError(TOKEN_HINT.format(where=address)) from None
    except ray.exceptions.RpcError as exc:
        raise ConnectionError(f"{first_line(exc)} ({gcs})") from None
    except Exception:  # noqa: BLE001 - internals of another Ray version: ray.init decides
        return


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment: Ray's C++ logging writes there directly."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def joined(connector: Callable[[], Callable[[], None]], address: str) -> Callable[[], None]:
    """`connector()`, with a Ray that cannot be reached as the run's failure (exit 3)."""
    try:
        return connector()
    except ConnectionError as exc:
        where = address or os.environ.get("RAY_ADDRESS", "") or "a local Ray"
        raise RunFailedError(f"cannot reach Ray at {where}: {first_line(exc)}") from None


def nothing() -> None:
    pass


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cores() -> int:
    from gpucli.models.devices import host_cores

    return host_cores()


@contextlib.contextmanager
def data_context() -> Iterator[None]:
    """Our progress instead of Ray's bars; dropped blocks instead of an aborted job; Ray Data's
    INFO lines and error tracebacks kept out of the terminal (they still go to its log file in the session dir)."""
    import ray.data
    from ray.util.debug import log_once

    ctx = ray.data.DataContext.get_current()
    saved = ctx.enable_progress_bars, ctx.max_errored_blocks
    ctx.enable_progress_bars, ctx.max_errored_blocks = False, -1
    log_once("ray_data_progress_manager_disabled")  # we disabled them on purpose: no warning about it
    consoles = [h for h in logging.getLogger("ray.data").handlers if isinstance(h, logging.StreamHandler)]
    levels = [h.level for h in consoles]
    for handler in consoles:  # a lost actor's traceback too: the driver says what it does about it
        handler.setLevel(max(handler.level, logging.CRITICAL))
    try:
        yield
    finally:
        ctx.enable_progress_bars, ctx.max_errored_blocks = saved
        for handler, level in zip(consoles, levels, strict=True):
            handler.setLevel(level)


def retries(option: str) -> dict[str, Any]:
    """Bounded retries (`max_task_retries` for actors, `max_retries` for tasks) for work whose
    worker died: Ray Data's default is to retry forever, so one input that crashes its worker
    would stall the job. Ray 2.60 deprecates passing these as keywords, with no named
    replacement yet; a version that no longer takes them gets Ray's default."""
    import inspect

    import ray.data

    params = inspect.signature(ray.data.Dataset.map_batches).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return {option: RETRIES}
    return {}
