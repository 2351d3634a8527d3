"""A recording's segments from its words (tasks/transcribe/segments.py): sentences and pauses, cues that fit
the subtitle rules, words never split, times from the words."""

from __future__ import annotations

import pytest

from gpucli.tasks.transcribe.segments import MAX_LINE_CHARS, MAX_SECONDS, MIN_SECONDS, Word, fits, lines, segments


def spoken(text: str, start: float = 0.0, word_s: float = 0.3, gap_s: float = 0.05,
           pauses: dict[int, float] | None = None) -> list[Word]:
    """Words of `text` one after another (word i followed by pauses[i] of silence, if given)."""
    out, at = [], start
    for i, word in enumerate(text.split()):
        out.append(Word(" " + word, at, at + word_s))
        at += word_s + (pauses or {}).get(i, gap_s)
    return out


def test_a_segment_ends_after_every_sentence_even_without_a_pause():
    words = spoken("The fox jumps. It will rain today! Will it? Yes… \"Quite.\" Done")
    assert [s["text"] for s in segments(words)] == ["The fox jumps.", "It will rain today!", "Will it?", "Yes…",
                                                    "\"Quite.\"", "Done"]


def test_a_pause_of_half_a_second_ends_a_segment_and_a_shorter_one_does_not():
    words = spoken("one two three four five six", pauses={1: 0.6, 3: 0.4})
    assert [s["text"] for s in segments(words)] == ["one two", "three four five six"]


def test_times_are_the_words_own_and_segments_never_overlap():
    words = spoken("The quick brown fox jumps over the lazy dog. It rains.", start=2.0)
    cut = segments(words, duration_s=30.0)
    assert cut[0]["start"] == 2.0 and cut[0]["end"] == round(words[8].end, 3)
    assert cut[1]["start"] == round(words[9].start, 3)
    assert all(a["end"] <= b["start"] for a, b in zip(cut, cut[1:]))


def test_a_long_sentence_is_split_into_cues_that_fit_and_no_word_is_cut():
    text = ("It will rain in the morning and clear up by the afternoon, so bring a coat and an umbrella when you go "
            "out to the market near the old stone bridge at the end of the long road today.")
    words = spoken(text)
    cut = segments(words)
    assert len(cut) > 1 and " ".join(s["text"] for s in cut) == text
    for segment in cut:
        shown = lines(segment["text"])
        assert len(shown) <= 2 and all(len(line) <= MAX_LINE_CHARS for line in shown), shown
        assert segment["end"] - segment["start"] <= MAX_SECONDS
    assert any(s["text"].endswith("afternoon,") for s in cut) or any(s["text"].startswith("and") for s in cut)


def test_a_long_stretch_of_speech_without_punctuation_or_pause_is_cut_at_seven_seconds_at_most():
    words = spoken(" ".join(["word"] * 200), word_s=0.25, gap_s=0.02)
    cut = segments(words)
    assert all(s["end"] - s["start"] <= MAX_SECONDS for s in cut)
    assert sum(len(s["text"].split()) for s in cut) == 200


def test_a_word_longer_than_a_line_stays_whole_in_a_cue_of_its_own():
    url = "https://example.com/" + "x" * 60
    cut = segments(spoken(f"see {url} now"))
    assert url in [s["text"] for s in cut] or any(url in s["text"] for s in cut)
    assert all(url not in s["text"] or s["text"].count(url) == 1 for s in cut)


def test_words_of_a_language_without_spaces_are_joined_as_spelled():
    words = [Word("今天", 0.0, 0.4), Word("下雨", 0.4, 0.8), Word("。", 0.8, 0.9), Word("明天", 1.0, 1.4),
             Word("晴", 1.4, 1.8), Word("。", 1.8, 1.9)]
    assert [s["text"] for s in segments(words)] == ["今天下雨。", "明天晴。"]


def test_a_short_cue_is_held_for_a_second_but_never_past_the_next_or_the_recording():
    words = [Word(" Yes.", 1.0, 1.3), Word(" No.", 1.8, 2.1), Word(" Maybe.", 5.0, 5.2)]
    cut = segments(words, duration_s=5.6)
    assert cut[0]["end"] == 1.8  # held until the next cue starts
    assert cut[1]["end"] == round(1.8 + MIN_SECONDS, 3)  # held a second into the silence after it
    assert cut[2]["end"] == 5.6  # held to the recording's end, not past it


def test_lines_break_at_a_space_evenly_and_keep_a_short_text_on_one():
    assert lines("The quick brown fox.") == ["The quick brown fox."]
    two = lines("It will rain in the morning and clear up by the afternoon, so bring a coat")
    assert len(two) == 2 and all(len(line) <= MAX_LINE_CHARS for line in two)
    assert " ".join(two) == "It will rain in the morning and clear up by the afternoon, so bring a coat"
    assert fits(spoken("a short one")) and not fits(spoken("a " * 60))


def test_a_segment_ends_where_the_speech_under_its_last_word_ends_not_where_the_alignment_ran_on():
    import numpy as np

    from gpucli.tasks.transcribe import loudness

    rate = 16000
    pcm = np.zeros(4 * rate, np.int16)
    pcm[int(0.5 * rate):int(2.0 * rate)] = (8000 * np.sin(np.arange(int(1.5 * rate)) / 5)).astype(np.int16)
    rms = loudness.frame_rms(pcm, rate)
    limit = loudness.threshold(rms)
    spans = [loudness.span(rms, limit, 0.0, 1.2), loudness.span(rms, limit, 1.2, 4.0)]  # two chunks
    heard = loudness.Heard(tuple(spans))
    assert heard.speech_end(1.5, 3.0) == 2.0  # the last loud frame ends at 2.0 s
    assert heard.speech_end(2.5, 3.5) is None  # all quiet there
    assert heard.speech_start(0.2, 1.0) == 0.5 and heard.speech_start(2.1, 3.0) is None
    words = [Word(" The", 0.5, 1.2), Word(" end.", 1.3, 2.45)]  # aligned 0.45 s into the silence
    cut = segments(words, 4.0, heard)
    assert cut[0]["end"] == 2.1  # the speech's end plus END_MARGIN_S
    assert segments(words, 4.0)[0]["end"] == 2.45  # without the audio: the word's own end


def test_a_silence_the_alignment_gave_to_a_word_still_ends_a_sentence_without_a_full_stop():
    """A small model leaves out punctuation ("...to the sea along the way"), and the alignment runs
    "sea" on to the next word; the sound between them is quiet for 0.65 s: a segment ends there."""
    import numpy as np

    from gpucli.tasks.transcribe import loudness

    rate = 16000
    pcm = np.zeros(6 * rate, np.int16)
    tone = (8000 * np.sin(np.arange(rate) / 5)).astype(np.int16)
    pcm[int(1.0 * rate):int(2.0 * rate)] = tone  # "to the sea", until 2.0 s
    pcm[int(2.65 * rate):int(3.65 * rate)] = tone  # "along the way", from 2.65 s
    rms = loudness.frame_rms(pcm, rate)
    heard = loudness.Heard((loudness.span(rms, loudness.threshold(rms), 0.0, 6.0),))
    words = [Word(" to", 1.0, 1.4), Word(" the", 1.4, 1.7), Word(" sea", 1.7, 2.6), Word(" along", 2.6, 3.0),
             Word(" the", 3.0, 3.3), Word(" way", 3.3, 3.65)]
    assert [s["text"] for s in segments(words)] == ["to the sea along the way"]  # by the words alone: one
    cut = segments(words, 6.0, heard)
    assert [s["text"] for s in cut] == ["to the sea", "along the way"]
    assert cut[0]["end"] == pytest.approx(2.1, abs=0.03) and cut[1]["start"] == pytest.approx(2.6, abs=0.03)
