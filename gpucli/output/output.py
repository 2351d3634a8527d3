"""The output side of a run, opened and closed as one: sink, run lock, ledger, failures log.

Shared by every engine (local processes, Ray), so that the lock, the incremental rules and
the failure records are the same whatever runs the model. Where the state lives, how it moves
from where an earlier gpucli kept it, and how a failed open is undone: gpucli/output/state_dir.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucli.core.errors import LedgerDamaged, LockedError, OutputError, RunFailedError, UsageError, os_error
from gpucli.core.records import Failure, Source
from gpucli.core.stages import Stage
from gpucli.output.compaction import AUTO_MIN_SMALL
from gpucli.output.compactor import fold
from gpucli.output.fingerprint import check_settings
from gpucli.output.ledger import Ledger
from gpucli.output.lock import RunLock
from gpucli.output.sinks import Sink, open_sink
from gpucli.output.state_dir import (
    missing_dirs,
    own_paths,
    refuse_foreign,
    remove_created,
    settings_made_with,
    sink_ledger,
)

if TYPE_CHECKING:
    from gpucli.inputs.scope import WalkReport


class FailureLog:
    """The failures JSONL beside the output; always written, empty when nothing failed.
    Its OS errors (disk full, I/O error) are one OutputError naming it (errors.os_error)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._file = None
        with self._named():
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")

    def add(self, failure: Failure) -> None:
        from gpucli.core.keys import shown  # a table's record: `path` and `id`

        with self._named():
            self._file.write(json.dumps(shown(failure), ensure_ascii=False) + "\n")
            self._file.flush()

    def close(self) -> None:
        """Closed even when the flush fails (a full disk): the error goes up after."""
        if self._file is None:
            return
        file, self._file = self._file, None
        try:
            with self._named():
                file.flush()
                os.fsync(file.fileno())
        finally:
            try:
                file.close()
            except OSError:  # the same unwritable buffer: the flush above said why
                pass

    @contextmanager
    def _named(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise os_error(exc, self.path) from exc


class NamedErrors:
    """The sink, whose every call turns an OSError into one OutputError naming the file (the
    output itself when the error names none: a write to an open file): the Writer, the Ray
    driver and this module all call the sink through it, so no OS error of the output reaches
    the CLI as "a bug". Attributes that are not calls pass through."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._sink, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            except OSError as exc:
                raise os_error(exc, self._sink.display) from exc

        return call


class Output:
    def __init__(self, target: str, incremental: bool = True, state_dir: str = "") -> None:
        self.sink: Sink = NamedErrors(open_sink(target, state_dir=state_dir))  # type: ignore[assignment]
        self.incremental = incremental
        self.lock: RunLock = self.sink.run_lock()
        self.ledger: Ledger | None = None
        self.failures: FailureLog | None = None
        self.pruned: set[str] = set()
        self.notices: list[str] = []  # for the run's log (Job.open)
        self.closing_notes: list[str] = []  # for the run's log, after close (Job.close): a compaction
        self._made: tuple[list[Path], list[Path]] = ([], [])  # directories and files this run's open created

    @property
    def display(self) -> str:
        return self.sink.display

    def made_with(self) -> dict | None:
        """The settings this output was made with (ledger.made_with; read where an earlier gpucli
        kept them until this run's open moves them), or None when this run makes it anew (a new
        output, or --full)."""
        return settings_made_with(self.sink) if self.incremental else None

    def open(self, schema: Any, metadata: dict[str, str], settings: dict[str, Any]) -> None:
        """Take the lock (or raise LockedError), open the sink, check the settings against the
        ledger (`settings` is everything that changes the output), repair what a crashed run
        left behind. Blocking: call from a thread.

        An output gpucli did not make (no ledger, but content) is refused before anything is
        created; an output path the system refuses is a UsageError, and what this call created
        (directories, lock, ledger) is removed again. State an earlier gpucli kept elsewhere
        moves to the sink's state directory first, before the lock is taken there."""
        self._move_earlier_state()
        refuse_foreign(self.sink)
        created = missing_dirs(self.sink)
        new_files = [Path(p) for p in (self.sink.target, self.sink.failures_path) if not os.path.lexists(p)]
        try:
            self._open(schema, metadata, settings)
            self._made = (created, new_files)
        except BaseException as exc:
            if created and not isinstance(exc, LockedError):  # a lock held by another: its files, not ours
                remove_created(self.sink.state_dir, created)
            if isinstance(exc, OSError):  # the lock's file, the state directory
                exc = os_error(exc, str(self.sink.state_dir))
            if isinstance(exc, LedgerDamaged):
                raise UsageError(f"--out {self.display}: its ledger {exc}") from None
            if isinstance(exc, OutputError) and exc.full:  # no space: the run failed (exit 3), not the usage
                raise exc from None
            if isinstance(exc, OutputError):  # before any work: the output cannot be used (exit 2)
                raise UsageError(f"--out {self.display}: cannot use it: {exc.cause} ({exc.path})") from None
            raise

    def _move_earlier_state(self) -> None:
        """Said once, in the run's log; an OS error of the move is the output refused (exit 2)."""
        try:
            self.notices.extend(note for note in [self.sink.move_earlier_state()] if note)
        except OutputError as exc:  # NamedErrors: an OSError of the sink, named
            raise UsageError(f"--out {self.display}: cannot use it: {exc.cause} ({exc.path})") from None

    def _open(self, schema: Any, metadata: dict[str, str], settings: dict[str, Any]) -> None:
        self.lock.acquire(self.sink.display)
        try:
            self.sink.open(schema, metadata)
        except BaseException:
            self.lock.release()
            raise
        try:
            self.ledger = self._open_ledger({**settings, "weights": _weights_signature(
                metadata.get("gpucli.model_path", ""))}, metadata.get("gpucli.version", ""))
            self.failures = FailureLog(self.sink.failures_path)
            self.sink.widen()  # only once the ledger took this run: a refused run changes nothing
        except BaseException:
            self.sink.close()  # frees what the sink holds (embedded Qdrant locks its directory)
            if self.ledger is not None:
                self.ledger.close()
                self.ledger = None
            self.lock.release()
            raise

    def _open_ledger(self, settings: dict[str, Any], version: str) -> Ledger:
        """Order matters at every step: see the rules at the top of ledger.py."""
        ledger = sink_ledger(self.sink, version, self.incremental, self.notices)
        try:
            self._publish_pending(ledger)
            if ledger.resetting():  # a --full killed between emptying the ledger and the sink
                self._reset_sink(ledger)
            if check_settings(ledger, settings, not self.incremental, _option_defaults(settings.get("task"))):
                # --full, or other settings with --full: empty the output. A new ledger alone
                # empties nothing (a shared Qdrant collection keyed by ids that upsert in place).
                wipe = not ledger.is_new() or not self.incremental
                ledger.reset(settings, resetting=wipe)
                if wipe:
                    self._reset_sink(ledger)
            renamed = self.sink.recover(ledger.locations(), ledger.meta("last_location"))
            if renamed:
                ledger.rename_locations(renamed)
            self.remove_stale(ledger)
        except BaseException:
            ledger.close()
            raise
        return ledger

    def _reset_sink(self, ledger: Ledger) -> None:
        self.sink.reset()
        ledger.reset_done()

    def _publish_pending(self, ledger: Ledger) -> None:
        pending = ledger.meta("publish")
        if pending is not None:
            self.sink.publish(pending)
            ledger.set_meta("publish", None)

    def close(self, clean: bool = True) -> None:
        """Remove superseded rows (when the run's writes all landed), then release everything:
        every step runs even when one before it failed (a full disk fails the failures file's
        flush, not the lock's release); the first error goes up after the last step."""
        steps = [lambda: self.remove_stale(self.ledger) if clean and self.ledger is not None else None,
                 lambda: fold(self, self.ledger, AUTO_MIN_SMALL) if clean and self.ledger is not None else None,
                 self.sink.close, lambda: self.failures.close() if self.failures is not None else None,
                 lambda: self.ledger.close() if self.ledger is not None else None, self.lock.release]
        first: BaseException | None = None
        for step in steps:
            try:
                step()
            except BaseException as exc:  # noqa: BLE001 - kept, raised after the other steps
                first = first or (os_error(exc, str(self.lock.path)) if isinstance(exc, OSError) else exc)
        if first is not None:
            raise first

    def discard(self) -> None:
        """After `close`, for a run that found no input: take back what its open created (a new
        output's directories, its empty files, its lock and ledger), so that a mistaken path
        leaves nothing behind. Anything with content stays."""
        self.sink.discard()  # what the sink's open made (an embedded Qdrant collection)
        created, new_files = self._made
        for path in new_files:
            with suppress(OSError):
                if path.is_file() and not path.is_symlink() and path.stat().st_size == 0:
                    path.unlink()
        remove_created(self.sink.state_dir, created)

    def remove_stale(self, ledger: Ledger) -> None:  # at the open, the close, and after a watch's passes
        stale = ledger.stale()
        if not stale:
            return
        rewrite = self.sink.supersede(stale, self.pruned)
        if rewrite is None:
            ledger.clear_stale(stale)
            return
        ledger.rename_locations(rewrite.renamed, stale, rewrite.pending)
        self._publish_pending(ledger)

    # --- during the run ------------------------------------------------------------------
    def all_new(self) -> bool:
        """Whether every input found is work: no earlier run finished any (or `--full`)."""
        return not self.incremental or not self.ledger.has_done()

    def lookup(self):
        """For the reader: the ledger's entries, or None when no entry can spare a read: for
        `--full`, and for a first run (the reader skips only inputs an earlier run finished)."""
        return None if self.all_new() else self.ledger.lookup

    # The writer's thread (commit.write) records; the loop never waits on these disk syncs.
    def commit_part(self, table: Any, sources: list[Source], rows: list[int]) -> None:
        """A part and its inputs marked done, in the order the ledger keeps (Ledger.write_done)."""
        self.ledger.write_done(self.sink, table, sources, rows)

    def failed(self, failures: list[Failure]) -> int:
        """Failure records, in the failures file and then the ledger (one transaction for all);
        returns how many are known ones (failed before, input unchanged). A skipped path (a file
        now a symlink that leaves the root) is no input any more: rows an earlier run made of it
        go, as a pruned input's do (its record is the skip)."""
        for failure in failures:
            self.failures.add(failure)
        skipped = [failure.path for failure in failures if failure.stage == Stage.SKIP]
        if skipped:
            self.pruned.update(self.ledger.forget(skipped))
        return self.ledger.mark_failed([failure for failure in failures if failure.stage != Stage.SKIP])

    def begin_attempts(self, sources: list[Source]) -> dict[str, int]:
        return self.ledger.begin_attempts(sources)

    def end_attempts(self, paths: list[str]) -> None:
        self.ledger.end_attempts(paths)

    def unchanged(self, sources: list[Source]) -> None:
        """Inputs done earlier with the same content (the writer's thread, a commit's worth)."""
        self.ledger.mark_unchanged(sources)

    # --- --prune: only what the walk could see is known to be gone -------------------------
    def mark_seen(self, paths: list[str]) -> None:
        """The paths this run's walk found (inputs and failure records), once per read chunk
        from a reader thread; kept in the ledger, not in memory (it grows with the tree)."""
        self.ledger.mark_seen(paths)

    def prune(self, report: WalkReport, prune_all: bool = False, log: Callable[[str], None] | None = None,
              refuse_all: bool = True) -> int:
        """After a complete walk: forget inputs done earlier that it did not find, but only where it
        could see (a root it listed, not under a directory it could not list, not under an empty
        root unless `prune_all`); their rows go at close. Removing every row of a non-empty output
        is refused (RunFailedError, exit 3, nothing removed) unless `prune_all`, or `refuse_all` is
        off (a watch's later walks): a moved mount point or a changed root argument looks so."""
        log = log or (lambda message: None)
        if not report.complete:
            log("--prune: the walk did not finish; nothing pruned")
            return 0
        for note in report.notes(prune_all):
            log(f"--prune: {note}")
        gone = [path for path in self.ledger.unseen_done() if report.may_prune(path, prune_all)]
        if gone and refuse_all and not prune_all and len(gone) == self.ledger.done_count():
            raise RunFailedError(
                f"--prune would remove every row of {self.display} ({len(gone)} inputs): none of its inputs "
                "was found under the paths given (rows are named relative to the root argument). Nothing was "
                "removed. Check the paths, or pass --prune-all to remove them")
        self.ledger.prune(gone)
        self.pruned.update(gone)
        return len(gone)

    def walk_exclusions(self) -> list[str]:
        """What the walk must never read: the output's own paths (state_dir.own_paths)."""
        return own_paths(self.sink)


def _option_defaults(task: Any) -> dict[str, Any]:
    """The task's option defaults, for migrating a gpucli 0.1 ledger; empty when unknown."""
    import dataclasses

    try:
        from gpucli.tasks import get_task

        return dataclasses.asdict(get_task(str(task)).Options())
    except Exception:  # noqa: BLE001 - a task that cannot be built without options: the migration tries every subset
        return {}


def _weights_signature(path: str) -> list:
    """Names and sizes of the weight files: a cheap identity of the weights in the fingerprint."""
    if not path or not os.path.isdir(path):
        return []
    suffixes = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".ckpt")
    return sorted((name, os.path.getsize(os.path.join(path, name))) for name in os.listdir(path)
                  if name.endswith(suffixes))

