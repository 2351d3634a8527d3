"""`--engine ray`: the core's job on Ray Data, on a private local Ray or a cluster.

    driver: Job.walk -> the ledger ends unchanged inputs -> from_items(sources)
      -> map_batches(Reader)     actors: read_chunk on a chunk of files -> one row (a ReadChunk)
      -> map_batches(Predictor)  actors, num_gpus each: a window of chunks -> batches -> predict_one
      -> iter_batches (driver):  Accounts.read / outputs / fail_items -> parts -> the sink, the ledger

The driver only moves what comes back into the same `Job` and `Accounts` as the local engine
(pipeline.py), so rows, failure records, the ledger and exit codes are the same. A batch whose
actor died twice is dropped (`max_errored_blocks = -1`); the files no chunk came back for run
again after the stream ends: first through a new actor pool (a node that went away is not the
files' fault), then the files still lost each in Ray tasks of its own, so a file that kills
its worker costs itself only and becomes a failure record. When no live node can hold an actor
any more (`NodeWatch`), the run fails (exit 3) with its complete inputs written. Parts of `part_rows` are written as results
stream in; nothing is collected whole in the driver.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from gpucli.core.config import RunConfig
from gpucli.core.decision import Action, decide
from gpucli.core.errors import OutputError, RunFailedError, WorkerSetupError
from gpucli.core.progress import Counts, Progress
from gpucli.core.records import Failure, ReadChunk, Source
from gpucli.core.signals import DriverStops
from gpucli.core.stages import Stage
from gpucli.core.summary import RunSummary
from gpucli.engines.job import Job
from gpucli.inputs.scope import Found
from gpucli.output.writer import part_due

from .actors import RowKind, dataset, source_row
from .connection import connect, data_context, first_line, joined, nothing
from .planning import Plan, make_plan, placeable
from .readiness import close_run, loaded, new_run_id, open_run

LIST_CHUNK = 1000  # walk entries per ledger lookup and per --prune `seen` call
WATCH_S = 2.0  # how often the driver looks at the cluster's nodes
WATCH_MISSES = 3  # looks in a row with no node able to hold an actor before the run fails
LOST = ("no result came back from Ray: the worker running this file died, also with the file alone "
        "(a crash, out of memory, or a batch past --batch-timeout-s; see the Ray logs)")


def run(config: RunConfig, progress: Progress | None = None) -> RunSummary:
    """Run one job on Ray (the cluster at --ray-address / RAY_ADDRESS, else a private local Ray)."""
    return RayJob(config, progress).run(lambda: connect(config.ray_address))


class RayJob:
    """The driver: walks, hands sources to Ray, and feeds what comes back to the core's Accounts."""

    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.job = Job(config, progress)
        self.sent: dict[int, Source] = {}  # inputs handed to Ray whose chunk has not come back
        self.stops = DriverStops()  # Ctrl-C / SIGTERM; `stops.signum` stopped the run (0 = running)
        self.seconds: dict[RowKind, dict[str, float]] = {RowKind.CHUNK: {}, RowKind.BATCH: {}}  # read / model time per actor
        self.write_s = 0.0
        self._last_flush = time.monotonic()
        self.watch: NodeWatch | None = None
        self.run_id = new_run_id()  # where this run's predictors say they loaded the model (readiness.py)

    def run(self, connector: Callable[[], Callable[[], None]]) -> RunSummary:
        with self.stops.installed():  # to the summary; then the handlers from before (not ray.init's)
            try:
                return self._run(connector)
            except OutputError as exc:  # the output side failed mid-run (or found no space): the summary goes with it
                if self.job.opened or exc.full:
                    exc.summary = self._finish(exc)
                raise

    def _run(self, connector: Callable[[], Callable[[], None]]) -> RunSummary:
        import ray.exceptions

        self.job.open()  # the model and the output are checked before Ray starts: usage errors come fast
        leave, written = nothing, False
        try:
            self._list()  # a stop during the walk prunes nothing
            if self.sent:  # else nothing is new: no need to start or join Ray
                remote = self.config.ray_address or os.environ.get("RAY_ADDRESS")
                self._phase("joining the Ray cluster" if remote else "starting Ray")
                leave = joined(connector, self.config.ray_address)
                with self.stops.installed(), data_context():  # after ray.init, which sets its own SIGTERM handler
                    self._run_on(make_plan(self.config))
        except KeyboardInterrupt as exc:
            if self.watch is not None and self.watch.reason:
                raise self.watch.error() from None
            # a second stop's own signal (SIGTERM after a first Ctrl-C: 143), as the local engine's
            self.stops.signum = getattr(exc, "signum", 0) or self.stops.signum or signal.SIGINT
        except SystemExit as exc:  # SIGTERM while Ray starts: ray.init's own handler is sys.exit(15)
            if exc.code != signal.SIGTERM:
                raise
            self.stops.signum = self.stops.signum or signal.SIGTERM
        except ray.exceptions.RayError as exc:
            raise RunFailedError(f"Ray stopped the run: {first_line(exc)}. Results written so far are kept.") from None
        finally:  # a first stop here waits (and sets the exit code); a second stops at once
            with self.stops.installed(), self.stops.held(deliver=False):  # not Ray's sys.exit(15) either
                try:
                    try:
                        self._flush(force=True)
                        written = True
                    finally:
                        self.job.close(written)
                finally:
                    leave()
        return self._finish()

    def _run_on(self, plan: Plan) -> None:
        self.job.use_devices([plan.device])  # CPU caps on CPU actors
        self._phase(f"loading the model in {plan.actors} Ray actor(s) "
                    f"({plan.num_gpus:g} GPU, {plan.num_cpus:g} CPU each)")
        with NodeWatch(plan, self.config.setup_timeout_s, self.stops.wake, self.run_id) as self.watch:
            self._consume(self._dataset(plan, alone=False))
            if self.sent:
                self.job.progress.log(f"ray: {len(self.sent)} file(s) lost with a dead actor or node; running them again")
                self._consume(self._dataset(plan, alone=False))
            if self.sent:
                self.job.progress.log(f"ray: {len(self.sent)} file(s) lost again; running them one by one")
                self._consume(self._dataset(plan, alone=True))
        with self.stops.held():
            self._flush(force=True)  # complete inputs durable first: `lost` fails what is still open
            for source in self.sent.values():
                self.job.accounts.record_failure(Failure(source.path, Stage.INFER, LOST))
            self.sent.clear()
            self.job.accounts.lost(LOST)

    # --- the listing ------------------------------------------------------------------------
    def _list(self) -> None:
        """Walk like the local engine; inputs the ledger has as done with the same size and
        mtime end here and are not even sent to Ray."""
        found: list[Found] = []
        lookup, seen = self.job.output.lookup(), self.job.seen()
        for entry in self.job.walk():
            found.append(entry)
            if len(found) >= LIST_CHUNK:
                self._listed(found, lookup, seen)
                found = []
        self._listed(found, lookup, seen)
        with self.stops.held():  # the ledger forgets and the output drops the same inputs, or neither
            self.job.prune()

    def _listed(self, found: list[Found], lookup, seen) -> None:
        """A chunk of the walk into the Accounts, whole: a failure record written to the
        failures file is counted in the summary too."""
        with self.stops.held():
            sources = [f.source for f in found if f.source is not None]
            failures = [f.failure for f in found if f.failure is not None]
            if seen is not None and found:
                seen([s.path for s in sources] + [f.path for f in failures])
            known = lookup([s.path for s in sources]) if lookup else {}
            unchanged = []
            for source in sources:
                decision = decide(known.get(source.path), source)
                source.digest = decision.done_digest  # the reader compares contents with it
                if decision.action is Action.UNCHANGED:
                    unchanged.append(source)
                else:
                    self.sent[source.id] = source
            self.job.accounts.read(ReadChunk(failures=failures, unchanged=unchanged, found=len(found)))
            self._flush()  # their records, a chunk's worth at a time

    # --- Ray --------------------------------------------------------------------------------
    def _dataset(self, plan: Plan, alone: bool):
        """The inputs no chunk came back for, through the readers and predictors."""
        job = self.job
        return dataset([source_row(s) for s in self.sent.values()], plan, job.spec, job.max_bytes, job.caps,
                       job.chunk_files, self._window(), alone, self.config.batch_timeout_s, self.run_id)

    def _window(self) -> int:
        """Items per predictor call: the local dispatcher's sorted window."""
        return self.job.window_items

    def _consume(self, ds) -> None:
        """Ctrl-C (a KeyboardInterrupt here) lands while Ray works, never inside the taking of
        what came back: a part the sink wrote and the ledger marked done is counted as such."""
        batches = iter(ds.iter_batches(batch_format="pyarrow", batch_size=None))
        try:
            for table in batches:
                with self.stops.held():
                    self.job.counts.phase = ""
                    for row in table.to_pylist():
                        self._take(row)
                    self._flush()
                    self.job.progress.update(self._counts())
        finally:
            getattr(batches, "close", lambda: None)()  # stops the streaming executor and its actors now

    def _take(self, row: dict[str, Any]) -> None:
        """One row from the predictors: a setup error, a reader's chunk, or a batch's outcome."""
        kind, accounts = RowKind(row["kind"]), self.job.accounts
        if kind is RowKind.SETUP:
            raise WorkerSetupError(f"a Ray actor could not load the task: {row['error']}")
        if kind is RowKind.CAPS:
            self.job.progress.log(f"ray: {row['error']} ({row['worker']})")
            return
        if self.watch is not None:
            self.watch.loaded = True
        times = self.seconds[kind]
        times[row["worker"]] = times.get(row["worker"], 0.0) + row["seconds"]
        data = pickle.loads(row["data"])
        if kind is RowKind.CHUNK:
            for sid in row["sids"]:
                self.sent.pop(sid, None)
            accounts.read(data)
        elif row["error"] is not None:
            accounts.fail_items(data, Stage.INFER, row["error"])
        else:
            accounts.outputs(data, pickle.loads(row["output"]))

    # --- parts, progress, the end -----------------------------------------------------------
    def _flush(self, force: bool = False) -> None:
        """The failure records and unchanged inputs so far, and the rows of complete inputs as
        one part once a part is due (writer.part_due) or `force`."""
        accounts = self.job.accounts
        part = force or part_due(accounts.ready_rows, self.config.part_rows, time.monotonic() - self._last_flush,
                                 self.config.flush_s)
        if part:
            self._last_flush = time.monotonic()
        commit = accounts.take_commit(part)
        if commit is not None:
            t0 = time.perf_counter()
            accounts.durable(accounts.write(commit))  # the local writer's commit step, in turn
            self.write_s += time.perf_counter() - t0

    def _finish(self, error: OutputError | None = None) -> RunSummary:
        """The core's summary; stage times are the busiest actor's. Inputs still with Ray after
        an interrupt never reached the Accounts: they count as unfinished here."""
        self.job.clocks["read"].seconds = max(self.seconds[RowKind.CHUNK].values(), default=0.0)
        summary = self.job.finish(self.stops.signum, max(self.seconds[RowKind.BATCH].values(), default=0.0), 0.0, self.write_s,
                                  error)
        summary.unfinished += len(self.sent)
        summary.inputs += len(self.sent)
        return summary

    def _phase(self, text: str) -> None:
        self.job.counts.phase = text
        self.job.progress.update(self._counts())

    def _counts(self) -> Counts:
        """In flight: inputs with Ray, and those whose results are not all back (counted when they are)."""
        return self.job.counts_now(in_flight=len(self.sent) + self.job.accounts.open_inputs())


class NodeWatch:
    """Looks at the run while it goes on, from a thread, and stops the driver (a SIGINT to the
    main thread, which `run` turns into the failure) when Ray Data would otherwise wait forever:
    * no live node can hold a predictor actor any more (the nodes that could are gone; readers
      ask for no CPU): the run fails, exit 3;
    * no actor has loaded the model within --setup-timeout-s of the start (none marked itself
      loaded under `run_id`, see readiness.py, and no row came back): the run fails like the
      local engine's setup timeout (a WorkerSetupError). A first window slower than the
      timeout is no setup failure: the load is timed, not the first results."""

    def __init__(self, plan: Plan, setup_timeout_s: float, wake: Callable[[], None], run_id: str = "") -> None:
        self.plan = plan
        self._wake = wake  # DriverStops.wake
        self.setup_timeout_s = setup_timeout_s
        self.run_id = run_id
        self.reason = ""
        self.setup_failed = False
        self.loaded = False  # set by the watch from the actors' mark, or by the driver at its first row
        self.keyed = False  # the run's readiness key is in Ray's store (readiness.open_run)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._signal_lock = threading.Lock()  # no signal once the driver left the watched passes
        self._thread = threading.Thread(target=self._loop, name="gpucli-ray-watch", daemon=True)

    def __enter__(self) -> NodeWatch:
        self.keyed = bool(self.run_id) and open_run(self.run_id)  # before any actor of the run exists
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._signal_lock:
            self._stop.set()
        self._thread.join(timeout=WATCH_S * 2)
        if self.keyed:
            close_run(self.run_id)

    def error(self) -> Exception:
        return WorkerSetupError(self.reason) if self.setup_failed else RunFailedError(
            f"{self.reason}. Results written so far are kept; a rerun once nodes are back does the rest.")

    def _loop(self) -> None:
        misses = 0
        while not self._stop.wait(min(WATCH_S, self.setup_timeout_s / 4)):
            self.loaded = self.loaded or (self.keyed and loaded(self.run_id))
            if self._elapsed() > self.setup_timeout_s and not self.loaded:
                self.setup_failed = True
                self._stop_driver(f"no Ray actor loaded the model within {self.setup_timeout_s:g}s "
                                  "(--setup-timeout-s; on Ray counted from the start of the actor pool)")
                return
            misses = misses + 1 if self._unplaceable() else 0
            if misses >= WATCH_MISSES:
                self._stop_driver(f"no node of the Ray cluster can run the model any more (an actor needs "
                                  f"{self.plan.num_cpus:g} CPU, {self.plan.num_gpus:g} GPU; see `ray status`)")
                return

    def _elapsed(self) -> float:
        """Seconds since the actor pool started: the setup timeout's clock."""
        return time.monotonic() - self._started

    def _unplaceable(self) -> bool:
        import ray

        try:
            return not placeable(self.plan, ray.nodes())
        except Exception:  # noqa: BLE001 - a busy GCS: look again later
            return False

    def _stop_driver(self, reason: str) -> None:
        with self._signal_lock:  # a signal after the passes would cut the driver's clean-up short
            if self._stop.is_set():
                return
            self.reason = reason
            self._wake()  # a SIGINT to the main thread that is no user's stop
