"""How a run ends, for both engines: the summary's figures and its exit code.

    0    every input done, or failed in a way --fail-on forgives
    1    failed inputs, by --fail-on (new: only those that had not failed before unchanged; any; never)
    3    a run that found no input under the roots given (an unmounted share looks like this),
         unless --allow-empty, or --prune-all, which says a root is empty on purpose
    130  interrupted by Ctrl-C, 143 by SIGTERM (a run an error stopped has the error's own code)

Pure: plain data in, a number or a sentence out; the job (gpucli/engines/job.py) says it.
"""

from __future__ import annotations

import signal

from gpucli.core.config import RunConfig
from gpucli.core.errors import EXIT_FAILED, EXIT_OK, EXIT_RUN_FAILED, EXIT_SIGINT, EXIT_SIGTERM
from gpucli.core.progress import Counts
from gpucli.core.summary import RunSummary, now_text
from gpucli.inputs.scope import WalkReport
from gpucli.tasks import Task


def summarize(s: RunSummary, counts: Counts, elapsed_s: float, stage_seconds: dict[str, float], stopping: int,
              unfinished: int) -> RunSummary:
    """The summary's totals, times and rates at the end (each stage a busy time within the
    wall time: see Job.finish)."""
    s.unfinished = unfinished
    s.inputs = s.succeeded + s.failed + s.skipped + s.unfinished
    s.elapsed_s = elapsed_s
    s.stage_seconds.update(stage_seconds)
    per_s = 1 / s.elapsed_s if s.elapsed_s else 0.0
    s.inputs_per_s, s.rows_per_s, s.items_per_s = s.inputs * per_s, s.rows * per_s, counts.items * per_s
    s.interrupted = bool(stopping)
    s.finished_at = now_text()
    return s


def count_passed_over(s: RunSummary, report: WalkReport) -> None:
    """The files the walk found and did not read, into `skipped` and its reasons (every
    file found is accounted for: inputs = succeeded + failed + skipped + unfinished)."""
    s.skipped += report.passed_over
    for reason, count in report.skipped.items():
        s.skipped_by_reason[reason] = s.skipped_by_reason.get(reason, 0) + count


def exit_code(config: RunConfig, s: RunSummary, stopping: int, found_nothing: bool) -> int:
    """The exit code of a run that ended or was stopped (see the module docstring)."""
    if stopping:
        return EXIT_SIGTERM if stopping == signal.SIGTERM else EXIT_SIGINT
    if found_nothing:
        return EXIT_RUN_FAILED
    failing = {"any": s.failed, "new": s.failed - s.failed_known, "never": 0}[config.fail_on]
    return EXIT_FAILED if failing else EXIT_OK


def found_nothing(config: RunConfig, counts: Counts) -> bool:
    """No input under the roots given, and the user did not say that is expected."""
    return counts.found == 0 and not (config.allow_empty or config.prune_all)


def nothing_found(config: RunConfig, report: WalkReport, task_cls: type[Task], model: str) -> str:
    """Why nothing was found, and what to do: files were there but none the task reads (its
    suffixes, or --include), or the roots were empty (an unmounted share looks so)."""
    where = ", ".join(config.paths) or config.from_table
    seen = report.passed_over
    if seen and config.include:
        globs = " ".join(f"--include {g!r}" for g in config.include)
        return (f"found no input under {where}: the walk saw {seen} file(s), none matching {globs}; check the "
                "glob (it matches the path under the root or the file name) (nothing was written)")
    hint = task_cls.hint_for_passed_over(report.passed_over_suffixes, model) if seen else ""
    if hint:
        return f"found no input under {where}: the walk saw {seen} file(s), {hint} (nothing was written)"
    if seen:
        return (f"found no input under {where}: the walk saw {seen} file(s), none of them files ending "
                f"{', '.join(task_cls.suffixes)}, which {task_cls.name} reads; pass --include 'GLOB' "
                "to read others (nothing was written)")
    return (f"found no input under {where}: nothing to do (an empty or unmounted directory?); pass "
            "--allow-empty when that is expected (nothing was written)")
