"""`gpucli transcribe`'s options: each field becomes a flag, a TOML key and a GPUCLI_* variable
(gpucli/core/config.py), checked here on construction, before any model is opened. What a model
refuses (funasr and --word-timestamps) is its task's to say, once it knows the backend.

Subtitles and word times (docs/subtitles.md) are "unless-default" in the output's
fingerprint: an output made before they existed stays incremental, and an output's subtitle
files are never a mix of runs with and without them (a switch needs --full, which rewrites them
all). Where the files go (--subtitles-dir) changes no row: not in the fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SUBTITLE_FORMATS = ("", "srt", "vtt")  # "" = no subtitle files
COMPUTE_TYPES = ("auto", "default", "int8", "int8_float16", "int8_bfloat16", "int8_float32", "float16", "bfloat16",
                 "float32")


@dataclass(frozen=True)
class TranscribeOptions:
    language: str = field(default="", metadata={
        "help": "Spoken language code (en, zh, de, ...); empty = detect it (English-only models always use en).",
        "flag": "--language"})
    beam_size: int = field(default=5, metadata={
        "help": "Beam width of Whisper's search (1 = greedy, fastest).", "flag": "--beam-size"})
    vad: bool = field(default=True, metadata={
        "help": "Transcribe only the speech Silero VAD finds (skips silence, where Whisper invents words).",
        "flag": "--vad/--no-vad"})
    max_chunk_s: int = field(default=30, metadata={
        "help": "Longest piece of audio one model call sees, in seconds (Whisper: at most 30).",
        "flag": "--max-chunk-s"})
    compute_type: str = field(default="auto", metadata={
        "help": "CTranslate2 compute type for Whisper: auto (int8 on CPU, float16 on CUDA, or --dtype when "
                "given), int8, int8_float16, float16, bfloat16, float32.", "flag": "--compute-type"})
    max_duration_s: float = field(default=4 * 3600, metadata={
        "help": "Fail recordings longer than this many seconds (decoded audio takes 115 MB an hour).",
        "flag": "--max-duration-s"})
    # --- subtitles and word times (docs/subtitles.md) ------------------------------------------
    subtitles: str = field(default="", metadata={
        "help": "Also write one subtitle file per recording, srt or vtt: a cue per row segment, in "
                "--subtitles-dir under the recording's path plus .srt/.vtt (docs/subtitles.md).",
        "flag": "--subtitles", "default_help": "none", "fingerprint": "unless-default"})
    subtitles_dir: str = field(default="", metadata={
        "help": "Folder of the --subtitles files.", "flag": "--subtitles-dir",
        "default_help": "beside --out, named after it: t.parquet -> t.subtitles/", "fingerprint": False})
    word_timestamps: bool = field(default=False, metadata={
        "help": "Add a `words` column: each word with its start, end (seconds in the recording) and "
                "probability (Whisper's cross-attention alignment; funasr models cannot).",
        "flag": "--word-timestamps", "default_help": "off", "fingerprint": "unless-default"})

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError("--beam-size must be 1 or more")
        if not 1 <= self.max_chunk_s <= 600:
            raise ValueError("--max-chunk-s must be between 1 and 600 (Whisper models: at most 30)")
        if self.max_duration_s < 0:
            raise ValueError("--max-duration-s must be 0 (no limit) or positive")
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"--compute-type must be one of {', '.join(COMPUTE_TYPES)}")
        if self.subtitles not in SUBTITLE_FORMATS:
            raise ValueError(f"--subtitles must be srt or vtt, not {self.subtitles!r}")
        if self.subtitles_dir and not self.subtitles:
            raise ValueError("--subtitles-dir needs --subtitles srt or --subtitles vtt")
