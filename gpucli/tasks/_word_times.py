"""Word times for `gpucli transcribe --word-timestamps` (issue 43, docs/subtitles.md): a `words`
column, each word with its start and end in the recording's own time and its probability.

Worker: after the batch's beam search, faster-whisper's own `WhisperModel.add_word_timestamps`
aligns each chunk's tokens with the audio (cross-attention, one `align` call for the batch),
as `BatchedInferencePipeline(word_timestamps=True)` does. The words come out in the chunk's
time: seconds into its speech, the silences between VAD clips removed.

Parent: each chunk carries its pieces (where each VAD clip lies in the chunk and in the
recording: `pieces`), so a word's time maps back to the recording exactly as faster-whisper's
`SpeechTimestampsMap` maps segment times; `merged` joins a recording's words in order.

The pieces come from `_audio`'s own clips and packing (`segment_with_pieces`): `_audio.Chunk`
does not keep them, so this does what `_audio.segment` does and then reads them off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpucli.tasks import _audio

if TYPE_CHECKING:
    import numpy as np

PREPEND, APPEND = "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、"  # faster-whisper's defaults
CHUNK_SPACING_S = 60.0  # chunks of a batch laid out this far apart for the alignment (see align_words)


def word_type() -> Any:
    import pyarrow as pa

    return pa.list_(pa.struct([("word", pa.string()), ("start", pa.float64()), ("end", pa.float64()),
                               ("probability", pa.float64())]))


# --- parent: chunks and their pieces ---------------------------------------------------------

def segment_with_pieces(pcm: np.ndarray, vad: bool, max_chunk_s: float) -> list[tuple[_audio.Chunk, list]]:
    """`_audio.segment`'s chunks, each with its pieces: [local start s, recording start s,
    recording end s] per clip it holds, in order."""
    if vad:
        clips = _audio._speech_clips(pcm, max_chunk_s)
    else:
        step = int(max_chunk_s * _audio.SAMPLE_RATE)
        clips = [{"start": s, "end": min(s + step, len(pcm))} for s in range(0, len(pcm), step)]
    chunks = _audio._pack(pcm, clips, max_chunk_s) if clips else []
    rate, out, at = _audio.SAMPLE_RATE, [], 0
    for chunk in chunks:
        pieces, local = [], 0
        while local < len(chunk.pcm) and at < len(clips):
            clip = clips[at]
            pieces.append([local / rate, clip["start"] / rate, clip["end"] / rate])
            local += clip["end"] - clip["start"]
            at += 1
        out.append((chunk, pieces))
    return out


def to_recording(words: list[dict[str, Any]], pieces: list, start: float, end: float) -> list[dict[str, Any]]:
    """A chunk's words, their times moved from the chunk's speech into the recording, within
    the chunk's span [start, end]."""
    return [{"word": str(w["word"]).strip(), "start": _mapped(float(w["start"]), pieces, False, start, end),
             "end": _mapped(float(w["end"]), pieces, True, start, end), "probability": float(w["probability"])}
            for w in words if str(w["word"]).strip()]


def _mapped(t: float, pieces: list, is_end: bool, start: float, end: float) -> float:
    if not pieces:
        return round(min(max(start + t, start), end), 3)
    piece = pieces[0]
    for candidate in pieces[1:]:
        if candidate[0] < t or (candidate[0] == t and not is_end):
            piece = candidate
    local, orig_start, orig_end = piece
    return round(min(max(orig_start + t - local, orig_start, start), orig_end, end), 3)


def merged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A recording's words, from its chunks' rows in order."""
    return [word for row in rows for word in (row.get("words") or [])]


# --- worker: the alignment -------------------------------------------------------------------

def align_words(model: Any, tokenizer: Any, encoded: Any, tokens: list[list[int]],
                seconds: list[float]) -> list[list[dict[str, Any]]]:
    """Each chunk's words in the chunk's time, for chunks of one language (`tokenizer`'s)
    encoded together (`encoded`). faster-whisper's heuristics for a word after a pause read the
    end of the previous segment; the chunks are laid out CHUNK_SPACING_S apart, so that each is
    treated as speech after a pause, whatever else shares its batch."""
    import math

    segments = [[{"tokens": list(t), "start": i * CHUNK_SPACING_S, "end": i * CHUNK_SPACING_S + s,
                  "seek": int(i * CHUNK_SPACING_S * model.frames_per_second)}]
                for i, (t, s) in enumerate(zip(tokens, seconds))]
    frames = [int(math.ceil(s) * model.frames_per_second) for s in seconds]
    model.add_word_timestamps(segments, tokenizer, encoded, frames, PREPEND, APPEND, -CHUNK_SPACING_S)
    return [[{**w, "start": w["start"] - i * CHUNK_SPACING_S, "end": w["end"] - i * CHUNK_SPACING_S}
             for w in segment[0].get("words", [])]
            for i, segment in enumerate(segments)]
