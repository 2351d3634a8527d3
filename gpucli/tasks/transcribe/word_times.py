"""Word times for `gpucli transcribe --word-timestamps` (docs/subtitles.md): a `words`
column, each word with its start and end in the recording's own time and its probability.

Worker: after the batch's beam search, faster-whisper's own `WhisperModel.add_word_timestamps`
aligns each chunk's tokens with the audio (cross-attention, one `align` call for the batch),
as `BatchedInferencePipeline(word_timestamps=True)` does. The words come out in the chunk's
time: seconds into its speech, the silences between VAD clips removed.

Parent: each chunk carries its pieces (where each VAD clip lies in the chunk and in the
recording: `pieces`), so a word's time maps back to the recording exactly as faster-whisper's
`SpeechTimestampsMap` maps segment times; `merged` joins a recording's words in order.

The pieces come from `audio`'s own clips and packing (`segment_with_pieces`): `audio.Chunk`
does not keep them, so this does what `audio.segment` does and then reads them off.
"""

from __future__ import annotations

import bisect
import itertools
from typing import TYPE_CHECKING, Any

from gpucli.tasks.transcribe import audio

if TYPE_CHECKING:
    import numpy as np

PREPEND, APPEND = "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、"  # faster-whisper's defaults


def word_type() -> Any:
    import pyarrow as pa

    return pa.list_(pa.struct([("word", pa.string()), ("start", pa.float64()), ("end", pa.float64()),
                               ("probability", pa.float64())]))


# --- parent: chunks and their pieces ---------------------------------------------------------

def segment_with_pieces(pcm: np.ndarray, vad: bool, max_chunk_s: float) -> list[tuple[audio.Chunk, list]]:
    """`audio.segment`'s chunks, each with its pieces: [local start s, recording start s,
    recording end s] per clip it holds, in order."""
    if vad:
        clips = audio._speech_clips(pcm, max_chunk_s)
    else:
        step = int(max_chunk_s * audio.SAMPLE_RATE)
        clips = [{"start": s, "end": min(s + step, len(pcm))} for s in range(0, len(pcm), step)]
    chunks = audio._pack(pcm, clips, max_chunk_s) if clips else []
    rate, out, at = audio.SAMPLE_RATE, [], 0
    for chunk in chunks:
        pieces, local = [], 0
        while local < len(chunk.pcm) and at < len(clips):
            clip = clips[at]
            pieces.append([local / rate, clip["start"] / rate, clip["end"] / rate])
            local += clip["end"] - clip["start"]
            at += 1
        out.append((chunk, pieces))
    return out


def to_recording(words: list[dict[str, Any]], pieces: list, start: float, end: float,
                 spelled: bool = False) -> list[dict[str, Any]]:
    """A chunk's words, their times moved from the chunk's speech into the recording, within
    the chunk's span [start, end]. Both ends of a word move by the piece that holds its middle,
    as faster-whisper's `restore_speech_timestamps` maps them: a word that ends a hair past its
    clip (the alignment's frames are 20 ms) must not be stretched across the silence VAD removed.
    `spelled`: each word's text as Whisper spelled it (its leading space kept: tasks/transcribe/segments.py
    joins them), else stripped (the `words` column)."""
    out = []
    for w in words:
        if not str(w["word"]).strip():
            continue
        first, last = float(w["start"]), float(w["end"])
        shift = _shift(pieces, (first + last) / 2, start)
        out.append({"word": str(w["word"]) if spelled else str(w["word"]).strip(),
                    "start": _within(first + shift, start, end),
                    "end": _within(last + shift, start, end), "probability": float(w["probability"])})
    return out


def _shift(pieces: list, middle: float, start: float) -> float:
    """What to add to a time of the chunk's speech to get the recording's: the silence before the
    piece holding `middle` (the first whose speech ends after it, else the last, as faster-whisper's
    `SpeechTimestampsMap.get_chunk_index`); the chunk's start when it has no pieces."""
    if not pieces:
        return start
    ends = [local + (orig_end - orig_start) for local, orig_start, orig_end in pieces]
    index = min(bisect.bisect(ends, middle), len(pieces) - 1)
    local, orig_start, _ = pieces[index]
    return orig_start - local


def _within(t: float, start: float, end: float) -> float:
    return round(min(max(t, start), end), 3)


def merged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A recording's words, from its chunks' rows in order."""
    return [word for row in rows for word in (row.get("words") or [])]


# --- worker: the alignment -------------------------------------------------------------------

def align_words(model: Any, tokenizer: Any, encoded: Any, tokens: list[list[int]],
                seconds: list[float]) -> list[list[dict[str, Any]]]:
    """Each chunk's words in the chunk's time, for chunks of one language (`tokenizer`'s)
    encoded together (`encoded`). faster-whisper's heuristics shorten a long first word "after a
    pause", a pause read from the end of the previous segment. Its batched pipeline lays a
    recording's chunks end to end in speech time, from 0, so no chunk follows a pause; the chunks
    here are laid out end to end too (whatever recordings share the batch), for the same words.
    (Laid out 60 s apart, every chunk's long first word was cut: `Please` at 0.57 s, not 0.43.)"""
    import math

    offsets = list(itertools.accumulate(seconds, initial=0.0))[:-1]
    segments = [[{"tokens": list(t), "start": at, "end": at + s, "seek": int(round(at * model.frames_per_second))}]
                for t, s, at in zip(tokens, seconds, offsets)]
    frames = [int(math.ceil(s) * model.frames_per_second) for s in seconds]
    model.add_word_timestamps(segments, tokenizer, encoded, frames, PREPEND, APPEND, 0.0)
    shifts = [segment[0]["seek"] / model.frames_per_second for segment in segments]  # what faster-whisper added
    return [[{**w, "start": w["start"] - shift, "end": w["end"] - shift} for w in segment[0].get("words", [])]
            for shift, segment in zip(shifts, segments)]
