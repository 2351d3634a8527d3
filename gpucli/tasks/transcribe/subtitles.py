"""Subtitle files for `gpucli transcribe --subtitles srt|vtt` (docs/subtitles.md): one
file per recording, a cue per segment of its row, in the recording's own time.

Where: `--subtitles-dir DIR`, else a folder beside the output named after it (`t.parquet` ->
`t.subtitles/`), holding each recording's path relative to its root with `.srt` or `.vtt`
appended (`sub/talk.wav` -> `t.subtitles/sub/talk.wav.srt`): appended, not swapped for the audio
suffix, so that `talk.wav` and `talk.mp3` in one folder keep a file each.

How the files follow the run's guarantees (the task calls these; nothing here knows the run):

* `write` composes the whole file and puts it in place atomically: a fixed temporary name beside
  it (a dot-file, `.talk.wav.srt.partial`), fsynced, `os.replace`d, the folder fsynced. A killed
  run leaves a whole old file, a whole new one, or none; never half of one.
* The task writes a recording's file when its rows are complete (`finish`, in the parent),
  which is *before* the part holding them is durable: there is no task hook after the commit
  step. So a run killed in between may leave a file for a recording whose rows are not durable
  yet; the ledger has not marked it done, so the next run redoes the recording and rewrites the
  file. What is durable in the ledger always has its file; a file may run ahead of the ledger,
  never behind it.
* `remove` runs when a recording is read again (a changed input, one that failed before, or
  `--full`), before it is decoded: if it now fails, at any stage, it is left with no file.
* `--prune` does not remove subtitle files (the prune is the output's, and tells the task
  nothing); docs/subtitles.md says so.

SRT is composed by the `srt` package. WebVTT is "WEBVTT", a blank line, then cues; its cue text
escapes `&`, `<` and `>` (the only characters WebVTT parses in text), so no text can end a cue
early or read as markup. Neither format allows a blank line inside a cue: text lines are
joined by single newlines.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpucli.core.durable import write_durably

FORMATS = ("srt", "vtt")
PARTIAL = ".partial"  # a file being written: `.NAME.srt.partial`


def default_dir(out: str) -> Path:
    """The folder beside the output, named after it: `t.parquet` -> `t.subtitles`."""
    target = Path(out.rstrip("/\\") or ".").absolute()
    return target.parent / f"{target.stem}.subtitles"


@dataclass(frozen=True)
class SubtitleFiles:
    """Where a run's subtitle files go, and in which format."""

    root: Path
    fmt: str

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"subtitle format {self.fmt!r}: one of {', '.join(FORMATS)}")

    def path_of(self, relpath: str) -> Path:
        """The file of the recording at `relpath` (posix, relative to its root). A path that
        would leave the folder (absolute, or with '..') is refused: ValueError."""
        parts = PurePosixPath(relpath).parts
        if not parts or PurePosixPath(relpath).is_absolute() or ".." in parts:
            raise ValueError(f"cannot place a subtitle file for {relpath!r} inside {self.root}")
        return self.root.joinpath(*parts[:-1], f"{parts[-1]}.{self.fmt}")

    def write(self, relpath: str, segments: list[dict[str, Any]]) -> Path:
        """The recording's file, from its row's segments, put in place atomically."""
        target = self.path_of(relpath)
        text = compose(segments, self.fmt)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_durably(target, text, target.with_name(f".{target.name}{PARTIAL}"))
        return target

    def remove(self, relpath: str) -> None:
        """The recording's file, if any (it is read again: its old cues are stale)."""
        try:
            self.path_of(relpath).unlink(missing_ok=True)
        except (OSError, ValueError):
            pass  # no file to remove, or none could exist: a later write says what is wrong




# --- composing -----------------------------------------------------------------------------------

def cues(segments: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(start ms, end ms, text) per segment with text, in order, a text of one line broken into
    at most two (tasks/transcribe/segments.py: lines; one that holds its own line breaks keeps them). Times
    are whole milliseconds (both formats' precision), never decreasing, and a cue never ends
    before it starts."""
    from gpucli.tasks.transcribe.segments import lines

    out: list[tuple[int, int, str]] = []
    last = 0
    for segment in segments:
        given = [line.strip() for line in str(segment["text"]).splitlines() if line.strip()]
        text = "\n".join(given if len(given) > 1 else lines(given[0]) if given else [])
        if not text:
            continue
        start = max(last, round(float(segment["start"]) * 1000))
        end = max(start, round(float(segment["end"]) * 1000))
        out.append((start, end, text))
        last = start
    return out


def compose(segments: list[dict[str, Any]], fmt: str) -> str:
    """The whole file's text: SRT (by the `srt` package) or WebVTT."""
    if fmt == "srt":
        import srt

        return srt.compose([srt.Subtitle(i, _delta(start), _delta(end), text)
                            for i, (start, end, text) in enumerate(cues(segments), 1)])
    if fmt == "vtt":
        blocks = [f"{_vtt_time(start)} --> {_vtt_time(end)}\n{_vtt_text(text)}" for start, end, text in cues(segments)]
        return "WEBVTT\n\n" + "".join(block + "\n\n" for block in blocks)
    raise ValueError(f"subtitle format {fmt!r}: one of {', '.join(FORMATS)}")


def _delta(ms: int) -> dt.timedelta:
    return dt.timedelta(milliseconds=ms)


def _vtt_time(ms: int) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}"


def _vtt_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
