"""Subtitle files and word times without a model (gpucli/tasks/transcribe/subtitles.py, word_times.py):
composed files parsed back by real parsers (`srt`, `webvtt-py`), the atomic write, where files
go, and word times mapped from a chunk's speech back into the recording."""

from __future__ import annotations

import html
import io
from pathlib import Path

import pytest

from gpucli.core import durable
from gpucli.tasks.transcribe import TranscribeOptions, subtitles, word_times
from gpucli.tasks.transcribe.subtitles import SubtitleFiles, compose

srt = pytest.importorskip("srt")
webvtt = pytest.importorskip("webvtt")

SEGMENTS = [
    {"start": 0.4, "end": 3.98, "text": "The quick brown fox."},
    {"start": 7.86, "end": 10.8604, "text": "Fish & chips <b>not bold</b> --> still text"},
    {"start": 12.0, "end": 12.0, "text": "   "},  # no text: no cue
    {"start": 3725.5, "end": 3730.25, "text": "line one\n\n\nline two"},  # past an hour; a blank line inside
]
TEXTS = ["The quick brown fox.", "Fish & chips <b>not\nbold</b> --> still text", "line one\nline two"]  # 43 > 42: two lines
TIMES = [(0.4, 3.98), (7.86, 10.86), (3725.5, 3730.25)]


def test_srt_parses_back_with_the_segments_texts_and_times():
    subs = list(srt.parse(compose(SEGMENTS, "srt")))
    assert [s.content for s in subs] == TEXTS
    assert [(s.start.total_seconds(), s.end.total_seconds()) for s in subs] == TIMES
    assert [s.index for s in subs] == [1, 2, 3]


def test_vtt_parses_back_with_the_segments_texts_and_times():
    text = compose(SEGMENTS, "vtt")
    assert text.startswith("WEBVTT\n\n")
    captions = webvtt.from_buffer(io.StringIO(text)).captions
    assert [html.unescape(c.text) for c in captions] == TEXTS  # WebVTT's character references are HTML's
    assert [(c.start_in_seconds + c.start_time.milliseconds / 1000,
             c.end_in_seconds + c.end_time.milliseconds / 1000) for c in captions] == TIMES
    assert "&amp;" in text and "&lt;b&gt;" in text and "--&gt;" in text  # nothing reads as markup or a cue end


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_times_never_go_back_and_a_cue_never_ends_before_it_starts(fmt):
    odd = [{"start": 2.0, "end": 1.0, "text": "a"}, {"start": 1.5, "end": 3.0, "text": "b"}]
    assert subtitles.cues(odd) == [(2000, 2000, "a"), (2000, 3000, "b")]
    assert compose([], fmt) == ("" if fmt == "srt" else "WEBVTT\n\n")


def test_files_go_under_the_recordings_path_with_the_suffix_appended(tmp_path):
    files = SubtitleFiles(tmp_path / "t.subtitles", "srt")
    assert files.path_of("sub/talk.wav") == tmp_path / "t.subtitles" / "sub" / "talk.wav.srt"
    assert files.path_of("talk.mp3") != files.path_of("talk.wav")
    for bad in ("../escape.wav", "/etc/passwd", "a/../../b.wav", ""):
        with pytest.raises(ValueError):
            files.path_of(bad)
    assert subtitles.default_dir(str(tmp_path / "t.parquet")) == tmp_path / "t.subtitles"
    assert subtitles.default_dir(str(tmp_path / "calls.jsonl")) == tmp_path / "calls.subtitles"


def test_write_replaces_whole_files_and_leaves_no_partial_file(tmp_path):
    files = SubtitleFiles(tmp_path / "subs", "vtt")
    target = files.write("a/b.wav", SEGMENTS)
    assert target.read_text(encoding="utf-8") == compose(SEGMENTS, "vtt")
    partial = target.with_name(f".{target.name}{subtitles.PARTIAL}")
    partial.write_text("half a fi")  # what a run killed mid-write leaves
    files.write("a/b.wav", SEGMENTS[:1])
    assert target.read_text(encoding="utf-8") == compose(SEGMENTS[:1], "vtt")
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.wav.vtt"]
    files.remove("a/b.wav")
    files.remove("a/b.wav")  # gone already: nothing to do
    files.remove("../outside.wav")  # could never exist: nothing to do
    assert not target.exists()


def test_a_folder_that_cannot_be_made_raises_so_the_recording_fails(tmp_path):
    (tmp_path / "subs").write_text("a file where the folder should be")
    with pytest.raises(OSError):
        SubtitleFiles(tmp_path / "subs", "srt").write("x.wav", SEGMENTS)


def test_options_are_checked():
    with pytest.raises(ValueError, match="srt or vtt"):
        TranscribeOptions(subtitles="ass")
    with pytest.raises(ValueError, match="needs --subtitles"):
        TranscribeOptions(subtitles_dir="subs")
    assert TranscribeOptions(subtitles="vtt", subtitles_dir="subs", word_timestamps=True).subtitles == "vtt"


# --- word times: a chunk's speech time -> the recording's ------------------------------------

def test_word_times_map_through_the_silences_vad_removed():
    # a chunk of two clips: 0.5-2.5 s and 6.0-7.0 s of the recording (3.5 s of silence removed)
    pieces = [[0.0, 0.5, 2.5], [2.0, 6.0, 7.0]]
    words = [{"word": " Hello", "start": 0.1, "end": 0.9, "probability": 0.9},
             {"word": " there.", "start": 1.5, "end": 2.0, "probability": 0.8},  # ends at the clip's end
             {"word": " Again", "start": 2.0, "end": 2.6, "probability": 0.7},  # starts in the second clip
             {"word": " ", "start": 2.6, "end": 2.7, "probability": 0.1}]  # no word: dropped
    mapped = word_times.to_recording(words, pieces, 0.5, 7.0)
    assert [(w["word"], w["start"], w["end"]) for w in mapped] == [
        ("Hello", 0.6, 1.4), ("there.", 2.0, 2.5), ("Again", 6.0, 6.6)]
    assert word_times.to_recording(words[:1], [], 10.0, 12.0)[0]["start"] == 10.1  # no pieces: the span's time
    too_late = [{"word": "x", "start": 2.9, "end": 3.5, "probability": 1.0}]
    assert word_times.to_recording(too_late, pieces, 0.5, 7.0)[0]["end"] == 7.0  # never past the chunk


def test_both_ends_of_a_word_move_by_the_clip_that_holds_its_middle_as_faster_whisper_maps_them():
    """A word ending a hair past its clip (4.3 against 4.25) was stretched across the 4.75 s of
    silence VAD removed (its end mapped by the next clip: 9.05); faster-whisper maps both ends by
    the clip of the word's middle (restore_speech_timestamps)."""
    from faster_whisper.vad import SpeechTimestampsMap

    pieces = [[0.0, 0.0, 4.25], [4.25, 9.0, 12.0]]
    word = {"word": "x", "start": 4.1, "end": 4.3, "probability": 1.0}
    mapped = word_times.to_recording([word], pieces, 0.0, 12.0)[0]
    assert (mapped["start"], mapped["end"]) == (4.1, 4.3)
    clips = [{"start": int(orig_start * 16000), "end": int(orig_end * 16000)} for _, orig_start, orig_end in pieces]
    reference = SpeechTimestampsMap(clips, 16000)
    for start, end in [(4.1, 4.3), (4.2, 4.4), (0.5, 1.0), (4.3, 5.0), (6.9, 7.2)]:
        index = reference.get_chunk_index((start + end) / 2)
        expected = (reference.get_original_time(start, index), reference.get_original_time(end, index))
        got = word_times.to_recording([{**word, "start": start, "end": end}], pieces, 0.0, 12.0)[0]
        assert (got["start"], got["end"]) == pytest.approx(expected, abs=0.01), (start, end)


def test_write_is_atomic_by_rename(tmp_path, monkeypatch):
    """A crash between writing and renaming leaves the old file whole."""
    files = SubtitleFiles(tmp_path, "srt")
    target = files.write("x.wav", SEGMENTS[:1])

    def crash(src: str, dst: str) -> None:
        raise OSError("killed")

    monkeypatch.setattr(durable.os, "replace", crash)  # the one durable replace (core/durable.py)
    with pytest.raises(OSError):
        files.write("x.wav", SEGMENTS)
    assert Path(target).read_text(encoding="utf-8") == compose(SEGMENTS[:1], "srt")
