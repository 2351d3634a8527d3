"""`--watch`: a run, then one pass per batch of changes, with the model loaded once (docs/watch.md).

    first pass    a full incremental run while the models load (what a stopped or killed watch
                  left undone is done here)
    then          the changed paths once quiet (gpucli/inputs/changes.py), walked by the whole
                  walk's rules (gpucli/inputs/changed_walk.py), or the whole tree again
                  (gpucli/engines/passes.py says when); each pass through the run's own reader,
                  batcher, warm workers, writer, accounts and ledger (engines/local/pipeline.py)
    after a pass  its parts written at once (Writer.flush), inputs that went forgotten (--prune),
                  the rows it superseded removed, small parts folded now and then
                  (gpucli/output/watching.py); a log line, and with --json one JSON line

File-system events come from a thread (gpucli/inputs/watcher.py) onto the loop, where they are
held per path while a pass runs. The workers, the writer, the output's lock and its ledger stay
open from the first pass to the stop: SIGINT and SIGTERM end the pass under way as they end a
run (exit 130 / 143), and changes still held are found by the next start's first pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator

from gpucli.core.config import RunConfig
from gpucli.core.progress import Progress, tick
from gpucli.core.records import Failure, Source
from gpucli.core.summary import RunSummary
from gpucli.engines.batching import END
from gpucli.engines.local.dispatcher import feed
from gpucli.engines.local.pipeline import Pipeline, read_blocks
from gpucli.engines.passes import Pass, PassKind, PassReport, Rescans, Totals, rescan_every
from gpucli.engines.reader import ReaderProcesses
from gpucli.engines.recovery import Restarts
from gpucli.inputs.changed_walk import changed_keys, walk_changed
from gpucli.inputs.changes import Change, FileStat, PendingChanges, split_young
from gpucli.inputs.scope import WalkReport
from gpucli.inputs.stores.url import is_url
from gpucli.inputs.watcher import Changed, EventsStopped, TreeWatcher, WatchMessage
from gpucli.output import watching

COMPACT_EVERY_S = 60.0  # a watch looks for small parts to fold at most this often (after a pass)


def run(config: RunConfig, progress: Progress | None = None) -> RunSummary:
    """Watch until a signal stops it; the summary covers every pass."""
    return asyncio.run(WatchPipeline(config, progress).run())


class WatchPipeline(Pipeline):
    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        super().__init__(config, progress)
        self.pending = PendingChanges(config.watch_pending_max)
        self.quiet_s = config.watch_debounce_ms / 1000
        self.urls = any(is_url(p) for p in config.paths)
        self.root_dirs = {os.path.abspath(p) for p in config.paths if not is_url(p) and os.path.isdir(p)}
        self.rescans = Rescans(rescan_every(self.urls, config.watch_rescan_s, config.watch_poll_s))
        self.changed = asyncio.Event()  # a change was held, or the watcher failed
        self.watcher: TreeWatcher | None = None
        self.processes: ReaderProcesses | None = None  # reader processes, held for the whole watch
        self.next_id = 1  # batch ids go on from pass to pass
        self.compacted = time.monotonic()
        self.roots_missing = False  # a root went: the watch waits for it (_roots_there)

    async def _run_opened(self) -> None:
        job = self.job
        devices, _, pool = self._build_stages()
        self.processes = job.reader_processes(devices)
        pruning_error = None
        try:
            self._watch_tree()  # before the first walk: a change during it is held, not missed
            pool.spawn()
            planned: Pass | None = Pass(1, PassKind.START)
            while planned is not None and not self.signal_received:
                await self._pass(planned, devices)
                planned = await self._next_pass(planned.number + 1)
        finally:
            if self.watcher is not None:
                await asyncio.to_thread(self.watcher.stop)
            if hasattr(self, "reader"):
                self.reader.cancel()
                await asyncio.gather(self.reader, return_exceptions=True)
            if self.processes is not None:
                self.processes.close()
            job.task.close_reading()
            pruning_error = await self._shutdown()
        if pruning_error is not None:
            raise pruning_error

    # --- between passes --------------------------------------------------------------------
    def _watch_tree(self) -> None:
        self.rescans.walked(time.monotonic())
        if self.urls:
            return  # listed again every --watch-poll-s (passes.rescan_every)
        loop = asyncio.get_running_loop()

        def deliver(message: WatchMessage) -> None:  # in the watcher's thread
            loop.call_soon_threadsafe(self._on_watch_message, message)

        self.watcher = TreeWatcher(list(self.config.paths), self.job.output.walk_exclusions(), deliver)
        self.watcher.start()

    def _restart_watcher(self) -> None:
        """A root came back: the old watcher's events were of the directory that went."""
        if self.watcher is not None:
            self.watcher.stop(join=False)  # its thread ends within STOP_CHECK_MS; nothing waits for it
        self._watch_tree()

    def _on_watch_message(self, message: WatchMessage) -> None:
        match message:
            case Changed(changes=changes):
                self.pending.add(changes, time.monotonic())
            case EventsStopped(reason=reason):
                self.progress.note(f"file events stopped ({reason}); the tree is walked every "
                                  f"{self.config.watch_poll_s:g}s instead (--watch-poll-s)")
                self.rescans.at_least_every(self.config.watch_poll_s)
                self.pending.overflowed = True  # what the events missed meanwhile: one walk now
        self.changed.set()

    async def _next_pass(self, number: int) -> Pass | None:
        """The next pass once one is due; None once a signal asked to stop."""
        while not self.signal_received:
            now = time.monotonic()
            if self.pending.overflowed:
                self.progress.note(f"over {self.pending.max_paths} paths changed at once; walking the whole "
                                  "tree instead of following each")
            ready = [] if self.pending.overflowed else self.pending.ready(now, self.quiet_s)
            whole = self.pending.overflowed or self.rescans.due(now) or any(c.path in self.root_dirs for c in ready)
            if whole and self._roots_there(now):  # a root itself changed: walked whole too
                self.pending.clear()  # the walk of the whole tree sees them all (and holds what is young again)
                self.rescans.walked(now)
                return Pass(number, PassKind.RESCAN)
            if ready and not whole:
                return Pass(number, PassKind.CHANGES, tuple(ready))
            if len(self.pending):
                self._show(f"watching: {len(self.pending)} change(s) settling")
            await self._wait_for_change(now)
        return None

    def _roots_there(self, now: float) -> bool:
        """Whether every local root is there to be walked. One that went (an unmounted share, a
        directory removed) prunes nothing: the watch says so once, looks again every
        --watch-poll-s, and once it is back walks the tree and watches it anew."""
        missing = [p for p in self.config.paths if not is_url(p) and not os.path.lexists(p)]
        if missing:
            if not self.roots_missing:
                self.progress.note(f"{', '.join(missing)}: gone; nothing is removed, and the watch looks for it "
                                  f"every {self.config.watch_poll_s:g}s")
            self.roots_missing = True
            self.pending.clear()
            self.rescans.walked(now - max(0.0, self.rescans.every_s - self.config.watch_poll_s))
            return False
        if self.roots_missing:
            self.progress.note("every root is back; walking the tree again")
            self.roots_missing = False
            self._restart_watcher()
        return True

    async def _wait_for_change(self, now: float) -> None:
        """Until a change is held, the next one is quiet, a rescan is due, or a stop."""
        quiet_at = self.pending.next_quiet(self.quiet_s)
        timeout = min(self.rescans.until(now), (quiet_at - now) if quiet_at is not None else 3600.0)
        self.changed.clear()
        waits = {asyncio.ensure_future(self.changed.wait()), asyncio.ensure_future(self.stop_event.wait())}
        await asyncio.wait(waits, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()

    def _show(self, phase: str) -> None:
        counts = self.job.counts_now(self._built()[2].items, self._built()[0].in_flight_count())
        counts.phase = phase
        self.progress.update(counts)

    # --- one pass --------------------------------------------------------------------------
    async def _pass(self, planned: Pass, devices: list[str]) -> None:
        job, (pool, writer, queue) = self.job, self._built()
        started, before = time.monotonic(), Totals.of(job.summary, job.counts)
        if planned.kind is not PassKind.START:
            self.batcher.reopen()
            watching.next_pass(job.output)
            pool.restarts = Restarts(self.config.max_restarts)  # each pass has a run's restart budget
        self.reader = asyncio.ensure_future(self._read_pass(planned))
        ticker = asyncio.ensure_future(tick(self.progress, lambda: job.counts_now(queue.items,
                                                                                  pool.in_flight_count())))
        try:
            if planned.kind is PassKind.START:
                self.next_id = await self._load_and_run(devices, self.next_id)
            else:
                job.counts.phase = f"pass {planned.number}: {len(planned.changes) or 'the whole tree'} to look at"
                self.next_id = await self._run_more()
        finally:
            ticker.cancel()
        if self.signal_received:
            return
        await writer.flush()  # the pass's rows readable now
        await asyncio.to_thread(watching.settle, job.output)
        await self._fold_now_and_then()
        job.counts.phase = ""
        self._said(PassReport(planned.number, planned.kind, len(planned.changes),
                              Totals.of(job.summary, job.counts).minus(before), len(self.pending),
                              time.monotonic() - started))

    async def _run_more(self) -> int:
        """A later pass: the workers are up; the dispatcher runs until the pass's input is done."""
        pool, writer, _ = self._built()
        dispatcher = asyncio.ensure_future(feed(pool, self.batcher, writer, self.config.part_rows,
                                                lambda: bool(self.signal_received), self.next_id))
        try:
            return await self._run_stages(dispatcher)
        finally:
            dispatcher.cancel()
            await asyncio.gather(dispatcher, return_exceptions=True)

    async def _read_pass(self, planned: Pass) -> None:
        """The pass's inputs into the queue, then what they say is gone (--prune), then its end.
        Both kinds mark what their walk found seen (in the ledger): what is not seen is gone."""
        job, config = self.job, self.config
        mark_seen = job.output.mark_seen if config.prune else None
        if config.prune:
            await asyncio.to_thread(watching.forget_seen, job.output)
        if planned.walks_all:
            job.inputs.new_walk()
            if planned.kind is PassKind.START:
                job.count_ahead()
            blocks, paths = job.walk_blocks(), []
        else:
            paths = [change.path for change in planned.changes]
            report = WalkReport()
            blocks = walk_changed(list(config.paths), job.walk_filter(), job.output.walk_exclusions(), paths, report)
        loop = asyncio.get_running_loop()
        held = holding_young(blocks, frozenset(paths), self.quiet_s, mark_seen,
                             lambda changed: loop.call_soon_threadsafe(self._on_watch_message, changed))
        await read_blocks(job, self._built(), held, self.processes, mark_seen, self.has_work,
                          lambda: bool(self.signal_received), watching=True)
        if self.signal_received:
            return
        if planned.walks_all:  # a later walk may find every input gone: they went while watched
            await self._prune_then_end(refuse_all=planned.kind is PassKind.START)
            return
        if config.prune:
            keys = changed_keys(paths, list(config.paths))
            job.summary.pruned += await asyncio.to_thread(watching.forget_unseen, job.output, keys, report)
        await self._built()[2].put(END)  # the end of this pass's input

    async def _fold_now_and_then(self) -> None:
        if time.monotonic() - self.compacted < COMPACT_EVERY_S:
            return
        self.compacted = time.monotonic()
        for note in await asyncio.to_thread(watching.fold_small_parts, self.job.output):
            self.progress.note(note)

    def _said(self, report: PassReport) -> None:
        if not report.worth_saying:
            return
        self.progress.log(report.text())
        self._show("")
        if self.config.json:
            print(json.dumps(report.line()), flush=True)


def holding_young(blocks: Iterable[list[Source | Failure]], quiet: frozenset[str], quiet_s: float,
                  seen: Callable[[list[str]], None] | None, hold: Callable[[Changed], object],
                  ) -> Iterator[list[Source | Failure]]:
    """A walk's blocks less the files written within the debounce (run in the walk's thread):
    those go to `hold` as changes, read once quiet (`quiet`: paths known quiet already). `seen`
    (--prune): a held file is no file gone."""
    quiet_ns = int(quiet_s * 1e9)
    for block in blocks:
        kept, young = split_young(block, time.time_ns(), quiet_ns, quiet)
        if young:
            if seen is not None:
                seen([s.path for s in young])
            hold(Changed(tuple(Change(s.abspath, FileStat(stat.S_IFREG, s.size, s.mtime_ns, s.ino)) for s in young)))
        if kept:
            yield kept
