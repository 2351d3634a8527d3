"""Audio for `gpucli transcribe`, parent side: decode any container to 16 kHz mono PCM, and
cut a recording into speech chunks of at most 30 s (Silero VAD, as faster-whisper's batched
pipeline does), so that chunks of many files can share one model batch.

Runs in the reader's threads. Chunks stay int16 (2 bytes a sample): half the memory and
pipe traffic of float32, and exactly what faster-whisper's own decoder produces before it
divides by 32768, so results match a direct faster-whisper call sample for sample.
PyAV (a faster-whisper dependency) is imported inside the functions: `gpucli --help` must
not pay for it.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage

if TYPE_CHECKING:
    import numpy as np

SAMPLE_RATE = 16000
VAD_WINDOW_S = 300  # VAD runs on windows of this length: its float32 copies stay bounded
VAD_MIN_SILENCE_MS = 160  # faster-whisper's BatchedInferencePipeline defaults
_GROUP_SAMPLES = 500_000  # frames are grouped before resampling, as faster-whisper does


@dataclass(slots=True)
class Chunk:
    """Speech of one recording (int16, 16 kHz, silences between VAD clips removed) and where
    it lies in the original recording, in seconds."""

    pcm: np.ndarray
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


# --- decoding --------------------------------------------------------------------------------

def decode(data: bytes, max_seconds: float = 0) -> np.ndarray:
    """Any audio container and codec PyAV reads -> int16 mono 16 kHz. Raises
    `InputError(Stage.DECODE, ...)` for empty, non-audio, corrupt, truncated or frameless input,
    and for recordings over `max_seconds` (0 = no limit)."""
    if not data:
        raise InputError(Stage.DECODE, "empty file (0 bytes)")
    wav_shortfall = _wav_shortfall(data)
    if wav_shortfall:
        raise InputError(Stage.DECODE, f"truncated WAV: the header announces {wav_shortfall[0]} bytes of audio, "
                                   f"the file holds {wav_shortfall[1]}")
    import av

    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except (av.error.FFmpegError, ValueError, EOFError) as exc:
        raise InputError(Stage.DECODE, f"not a readable audio file ({_reason(exc)})") from None
    with container:
        if not container.streams.audio:
            raise InputError(Stage.DECODE, "no audio stream in this file")
        stream = container.streams.audio[0]
        declared = _declared_seconds(container, stream, data)
        pcm, errors = _decode_stream(container, stream, max_seconds)
    seconds = len(pcm) / SAMPLE_RATE
    if len(pcm) == 0:
        detail = f" ({errors} unreadable packets)" if errors else ""
        raise InputError(Stage.DECODE, f"no audio frames could be decoded{detail}")
    if declared and seconds < declared * 0.98 - 0.05:
        raise InputError(Stage.DECODE, f"truncated: decoded {seconds:.2f} s of the {declared:.2f} s the header announces")
    return pcm


def _decode_stream(container: Any, stream: Any, max_seconds: float) -> tuple[np.ndarray, int]:
    """Decode, group and resample like `faster_whisper.audio.decode_audio`, counting the
    packets that fail instead of hiding them."""
    import av
    import numpy as np

    resampler = av.audio.resampler.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    fifo = av.audio.fifo.AudioFifo()
    parts: list[np.ndarray] = []
    errors, total = 0, 0
    limit = int(max_seconds * SAMPLE_RATE) if max_seconds else 0

    def drain(frame: Any) -> None:
        nonlocal total
        for out in resampler.resample(frame):
            array = out.to_ndarray().reshape(-1)
            parts.append(array)
            total += len(array)
        if limit and total > limit:
            raise InputError(Stage.DECODE, f"longer than --max-duration-s {max_seconds:g} s; raise the limit to read it")

    frames = container.decode(stream)
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            break
        except (av.error.InvalidDataError, av.error.PatchWelcomeError):
            errors += 1
            continue
        except av.error.EOFError:
            break
        except av.error.FFmpegError as exc:
            raise InputError(Stage.DECODE, f"cannot decode audio ({_reason(exc)})") from None
        frame.pts = None
        fifo.write(frame)
        if fifo.samples >= _GROUP_SAMPLES:
            drain(fifo.read())
    if fifo.samples > 0:
        drain(fifo.read())
    drain(None)  # flush the resampler
    pcm = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    return pcm.astype(np.int16, copy=False), errors


def _declared_seconds(container: Any, stream: Any, data: bytes) -> float:
    """The length the header states, where it is exact (FLAC, MP4/M4A, MP3 with a Xing, Info
    or VBRI header); 0 where ffmpeg only estimates it (Ogg, plain CBR/VBR MP3, WAV, which
    `_wav_shortfall` checks itself)."""
    name = container.format.name
    exact = name == "flac" or name.startswith("mov") or (name == "mp3" and _has_mp3_length_header(data))
    if not exact or not stream.duration or not stream.time_base:
        return 0.0
    return float(stream.duration * stream.time_base)


def _has_mp3_length_header(data: bytes) -> bool:
    head = data[:16384]
    return any(tag in head for tag in (b"Xing", b"Info", b"VBRI"))


def _wav_shortfall(data: bytes) -> tuple[int, int] | None:
    """(announced, present) bytes of a RIFF/WAVE `data` chunk cut short, else None. ffmpeg
    quietly plays a truncated WAV to its last byte, so the header is checked here."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if chunk_id == b"data":
            present = len(data) - pos - 8
            if size in (0, 0xFFFFFFFF):  # written while streaming: length unknown
                return None
            return (size, present) if present + 4 < size else None
        pos += 8 + size + (size & 1)
    return None


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text).rstrip(".")


# --- segmenting ------------------------------------------------------------------------------

def segment(pcm: np.ndarray, vad: bool, max_chunk_s: float) -> list[Chunk]:
    """Cut a recording into chunks of at most `max_chunk_s` seconds. With `vad`, chunks hold
    only speech (Silero VAD clips, packed greedily as faster-whisper's `collect_chunks`
    does); without it, fixed windows. An empty list means no speech was found."""
    if vad:
        clips = _speech_clips(pcm, max_chunk_s)
    else:
        step = int(max_chunk_s * SAMPLE_RATE)
        clips = [{"start": s, "end": min(s + step, len(pcm))} for s in range(0, len(pcm), step)]
    return _pack(pcm, clips, max_chunk_s) if clips else []


def _speech_clips(pcm: np.ndarray, max_chunk_s: float) -> list[dict[str, int]]:
    """Silero VAD over windows of VAD_WINDOW_S, so a long recording never exists as float32
    in full. Recordings up to that length get exactly faster-whisper's clips."""
    import numpy as np
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    options = VadOptions(max_speech_duration_s=max_chunk_s, min_silence_duration_ms=VAD_MIN_SILENCE_MS)
    window = VAD_WINDOW_S * SAMPLE_RATE
    clips: list[dict[str, int]] = []
    for offset in range(0, len(pcm), window):
        audio = pcm[offset:offset + window].astype(np.float32) / 32768.0
        for clip in get_speech_timestamps(audio, options, sampling_rate=SAMPLE_RATE):
            clips.append({"start": clip["start"] + offset, "end": clip["end"] + offset})
    return clips


def _pack(pcm: np.ndarray, clips: list[dict[str, int]], max_chunk_s: float) -> list[Chunk]:
    """Group consecutive clips while they fit in `max_chunk_s`; map each group's speech
    time back to the recording with faster-whisper's own SpeechTimestampsMap."""
    import numpy as np
    from faster_whisper.vad import SpeechTimestampsMap

    limit = max_chunk_s * SAMPLE_RATE
    groups: list[list[dict[str, int]]] = [[]]
    size = 0
    for clip in clips:
        length = clip["end"] - clip["start"]
        if groups[-1] and size + length > limit:
            groups.append([])
            size = 0
        groups[-1].append(clip)
        size += length
    ts_map = SpeechTimestampsMap(clips, SAMPLE_RATE)
    chunks, offset = [], 0
    for group in groups:
        pcm_chunk = np.concatenate([pcm[c["start"]:c["end"]] for c in group])
        duration = len(pcm_chunk)
        start = ts_map.get_original_time(round(offset / SAMPLE_RATE, 3))
        end = ts_map.get_original_time(round((offset + duration) / SAMPLE_RATE, 3), is_end=True)
        chunks.append(Chunk(pcm_chunk, start, end))
        offset += duration
    return chunks


def cost_seconds(chunk: Chunk) -> int:
    """Batch cost of a chunk: whole audio seconds, rounded up, at least 1."""
    return max(1, math.ceil(chunk.seconds))
