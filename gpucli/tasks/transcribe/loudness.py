"""Where a recording is loud, 20 ms at a time: what ends a segment where the speech ends.

Whisper's alignment gives the last word of a sentence an end that runs on into the silence after
it (measured on the bundled clips: 0.3-0.5 s past the last audible sample for "week." and
"pie."), so a subtitle would stay up after the speaker stopped. The parent, which holds the
audio while it cuts chunks (tasks/transcribe/audio.py), keeps one byte per 20 ms frame of each chunk's span:
loud or not, against a threshold of the recording's own (RMS over 4% of its 95th-percentile
frame, and never under 200 of 32768, about -44 dBFS: a noise floor under speech stays "quiet",
a noisy recording simply trims nothing). A segment then ends at its last loud frame
(tasks/transcribe/segments.py); the `words` column keeps the alignment's own times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

FRAME_S = 0.02
RATIO = 0.04
FLOOR = 200.0
EDGE_FRAMES = 5  # 0.1 s of quiet ends a word's sound (a stop consonant's closure is shorter)
_BLOCK_FRAMES = 3000  # a minute of frames converted to float at a time: memory stays small


@dataclass(frozen=True)
class Loudness:
    """One chunk's span of the recording: `loud[i]` is 1 when the frame starting at
    start + i * FRAME_S is loud."""

    start: float
    loud: bytes

    @property
    def end(self) -> float:
        return self.start + len(self.loud) * FRAME_S


def frame_rms(pcm: np.ndarray, rate: int) -> np.ndarray:
    """RMS of every FRAME_S frame of int16 `pcm`, computed a block at a time."""
    import numpy as np

    size = int(FRAME_S * rate)
    count = len(pcm) // size
    out = np.empty(count, np.float32)
    for first in range(0, count, _BLOCK_FRAMES):
        last = min(first + _BLOCK_FRAMES, count)
        block = pcm[first * size:last * size].astype(np.float32).reshape(-1, size)
        out[first:last] = np.sqrt((block * block).mean(axis=1))
    return out


def threshold(rms: np.ndarray) -> float:
    import numpy as np

    return max(FLOOR, RATIO * float(np.percentile(rms, 95))) if len(rms) else FLOOR


def span(rms: np.ndarray, limit: float, start_s: float, end_s: float) -> Loudness:
    """The frames of [start_s, end_s] of the recording whose frame RMS is `rms`."""
    first, last = int(start_s / FRAME_S), min(len(rms), int(end_s / FRAME_S) + 1)
    return Loudness(first * FRAME_S, bytes((rms[first:last] > limit).astype("uint8")) if last > first else b"")


@dataclass(frozen=True)
class Heard:
    """A recording's loud frames, over the spans of its chunks, in order: what tasks/transcribe/segments.py
    asks of the audio (its `Audio` protocol)."""

    spans: tuple[Loudness, ...]

    def speech_end(self, start: float, end: float) -> float | None:
        """Where the sound of the word aligned to [start, end] ends: from the word's middle, the
        end of its loud stretch (it ends at a quiet run of EDGE_FRAMES, or at `end`); from a quiet
        middle, the end of the last loud frame before it. An edge of the neighbour's sound inside
        the span (the alignment's times overlap the next word's start) is not taken for its own.
        None: no frame known there, or none loud before the middle."""
        frames = self._frames(start, end)
        if not frames:
            return None
        loud = [is_loud for _, is_loud in frames]
        middle = len(frames) // 2
        if not loud[middle]:
            before = [i for i in range(middle) if loud[i]]
            return frames[before[-1]][0] + FRAME_S if before else None
        last = middle
        for i in range(middle, len(frames)):
            if loud[i]:
                last = i
            elif i - last >= EDGE_FRAMES:
                break
        return min(end, frames[last][0] + FRAME_S)

    def speech_start(self, start: float, end: float) -> float | None:
        """Where the sound of the word aligned to [start, end] starts (speech_end, mirrored)."""
        frames = self._frames(start, end)
        if not frames:
            return None
        loud = [is_loud for _, is_loud in frames]
        middle = len(frames) // 2
        if not loud[middle]:
            after = [i for i in range(middle, len(frames)) if loud[i]]
            return frames[after[0]][0] if after else None
        first = middle
        for i in range(middle, -1, -1):
            if loud[i]:
                first = i
            elif first - i >= EDGE_FRAMES:
                break
        return max(start, frames[first][0])

    def _frames(self, start: float, end: float) -> list[tuple[float, bool]]:
        out = []
        for piece in self.spans:
            if piece.end <= start or piece.start >= end:
                continue
            first = max(0, int((start - piece.start) / FRAME_S))
            last = min(len(piece.loud), int((end - piece.start) / FRAME_S) + 1)
            out.extend((piece.start + i * FRAME_S, piece.loud[i] == 1) for i in range(first, last))
        return out
