"""`gpucli transcribe`: audio -> text (segments, subtitles, word times).

    task        TranscribeTask: models, backends, items and rows
    options     its options and their checks
    audio       decoding to 16 kHz mono and cutting speech into chunks (Silero VAD), in the reader
    whisper     faster-whisper in a worker (the default backend)
    funasr      the funasr backend (Paraformer, SenseVoice)
    word_times  words aligned in the worker, mapped back to the recording (--word-timestamps keeps them)
    segments    a recording's segments cut at its sentences and pauses from those words
    loudness    where the speech of a segment ends, from the parent's loudness of the recording
    subtitles   --subtitles srt|vtt: a file per recording
"""

from __future__ import annotations

from gpucli.tasks.transcribe.options import TranscribeOptions
from gpucli.tasks.transcribe.task import TranscribeTask

__all__ = ["TranscribeOptions", "TranscribeTask"]
