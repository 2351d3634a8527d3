"""What a run reports at its end: the counts, the stage times, the exit code (`RunSummary`,
printed by the CLI as its last line or as JSON), and the clock that times a stage."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gpucli import __version__

TIMED_STAGES = ("read", "queue", "infer", "write")  # the run's stages with a busy time (stage_seconds)


@dataclass
class RunSummary:
    task: str
    model: str
    inputs: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    # of `skipped`, by reason (core/stages.SkipReason: "no reader for this type", "excluded", "too large", "link
    # outside the root", "unchanged since the last run"): every file found is accounted for
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    out: str = ""
    failures_file: str = ""
    elapsed_s: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIMED_STAGES, 0.0))
    inputs_per_s: float = 0.0  # inputs / elapsed_s: the rate the progress shows as inputs/s
    rows_per_s: float = 0.0  # rows / elapsed_s: the progress's rows/s
    items_per_s: float = 0.0  # model items (embed: chunks; transcribe: speech chunks) per second; kept for scripts
    exit_code: int = 0
    error: str = ""  # a run that failed (exit 3: disk full, found no input...): its one-line error, as on stderr
    failed_known: int = 0  # of `failed`: inputs that had failed before and have not changed since
    unknown_tokens: int = 0  # of `failed`: texts in a language the model does not read (--allow-unknown-tokens)
    version: str = __version__
    started_at: str = ""
    finished_at: str = ""
    devices: list[str] = field(default_factory=list)
    unchanged: int = 0  # done by an earlier run, counted in skipped
    deduplicated: int = 0  # of `succeeded`: copies of content embedded once, given its rows without a forward pass
    pruned: int = 0
    unfinished: int = 0
    interrupted: bool = False
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stage_seconds"] = {k: round(v, 3) for k, v in self.stage_seconds.items()}
        data["elapsed_s"] = round(self.elapsed_s, 3)
        for rate in ("inputs_per_s", "rows_per_s", "items_per_s"):
            data[rate] = round(data[rate], 2)
        return data


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class BusyClock:
    """Wall time during which at least one holder is inside (threads may overlap): a stage's
    busy time, which cannot exceed the run's wall time however many threads do the work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self.seconds = 0.0

    def __enter__(self) -> BusyClock:
        with self._lock:
            if not self._active:
                self._since = time.monotonic()
            self._active += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._active -= 1
            if not self._active:
                self.seconds += time.monotonic() - self._since
