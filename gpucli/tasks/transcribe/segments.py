"""A recording's segments as people read them: sentence-sized, cut at pauses, each one
subtitle cue. Made from the recording's words and their times (tasks/transcribe/word_times.py), whatever
chunks the audio was cut into for the model (one per 30-second window of speech, which made cues
of 30 seconds and six sentences on one line).

The numbers follow the Netflix Timed Text Style Guide for English, the most widely cited set of
subtitle rules (the BBC's and the EBU's are close), and live here:

    MAX_LINE_CHARS   42   characters a line
    MAX_LINES         2   lines a cue
    MAX_SECONDS     7.0   a cue on screen at most (a longer stretch of speech is split)
    MIN_SECONDS     1.0   on screen at least (Netflix: 5/6 s): a short cue's end is held into the
                          silence after it, never past the next cue's start or the recording's end
    PAUSE_SECONDS   0.5   a silence between words this long ends a segment, as a sentence end does

How a recording is cut:
1. after every word that ends a sentence (`.`, `?`, `!`, `…` and their CJK forms, a closing quote
   or bracket allowed after them), and wherever the speech pauses for PAUSE_SECONDS or more: a
   gap between the words' times, or between where one word is last heard and the next first
   heard (tasks/transcribe/loudness.py; the alignment often gives a silence to the word before it, and a
   small model leaves some sentences without a full stop);
2. a piece that does not fit one cue (MAX_LINES lines of MAX_LINE_CHARS, MAX_SECONDS) is split
   again where it reads best: after a comma, semicolon, colon or dash (or before a conjunction),
   at the longest pause, near its middle, each half split again until every piece fits; never
   inside a word (a single word longer than a cue stays whole);
3. a segment's times are its words': the first word's start, the last word's end, each moved to
   where that word is heard when the alignment ran into the silence (START_MARGIN_S before its
   first loud frame, END_MARGIN_S after its last: tasks/transcribe/loudness.py), then held for MIN_SECONDS
   where the silence allows; its text is its words' own, joined as Whisper spelled them (with
   their spaces, none added between the words of a language written without).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Protocol

MAX_LINE_CHARS = 42
MAX_LINES = 2
MAX_SECONDS = 7.0
MIN_SECONDS = 1.0
PAUSE_SECONDS = 0.5
END_MARGIN_S = 0.1  # a segment ends this long after the last loud 20 ms of its last word (tasks/transcribe/loudness.py)
START_MARGIN_S = 0.05  # and starts this long before the first loud 20 ms of its first word

SENTENCE_END = re.compile(r"[.?!…。？！](?:[\"'”’)\]»」』]*)$")
CLAUSE_END = re.compile(r"[,;:，；：、—–-](?:[\"'”’)\]»」』]*)$")
# English words a clause often starts with: a cut before one reads well when no punctuation offers
CONJUNCTIONS = frozenset("and but or so because when while which that if then although though where".split())


@dataclass(frozen=True)
class Word:
    text: str  # as Whisper spelled it, with its leading space where the language has spaces
    start: float
    end: float


class Audio(Protocol):
    """What the segments ask of the recording's sound (tasks/transcribe/loudness.py: Heard)."""

    def speech_end(self, start: float, end: float) -> float | None: ...

    def speech_start(self, start: float, end: float) -> float | None: ...


def segments(words: list[Word], duration_s: float | None = None, audio: Audio | None = None) -> list[dict[str, Any]]:
    """The recording's segments, {start, end, text} in order, from its words in order. With the
    recording's `audio`, a pause is also where the sound is quiet between two words whose aligned
    times touch (the alignment often gives a silence to the word before it), and a segment starts
    and ends where its first and last words are heard."""
    words = [w for w in words if w.text.strip()]
    pieces = [part for run in _runs(words, audio) for part in _fitted(run, audio)]
    out = [{"start": round(_start(p[0], audio), 3), "end": round(_end(p[-1], audio), 3), "text": _text(p)}
           for p in pieces]
    _hold(out, duration_s)
    return out


def _start(first: Word, audio: Audio | None) -> float:
    """The first word's start, or where it is first heard when that is later (never past its end)."""
    heard = audio.speech_start(first.start, first.end) if audio is not None else None
    return first.start if heard is None else min(max(first.start, heard - START_MARGIN_S), first.end - 0.05)


def _end(last: Word, audio: Audio | None) -> float:
    """The last word's end, or the end of the speech under it plus END_MARGIN_S when that is sooner."""
    heard = audio.speech_end(last.start, last.end) if audio is not None else None
    return last.end if heard is None else max(last.start + 0.05, min(last.end, heard + END_MARGIN_S))


def lines(text: str) -> list[str]:
    """The cue's text on at most MAX_LINES lines of MAX_LINE_CHARS, broken at a space: one line when
    it fits, else the break that keeps the lines most even (after punctuation when that is as
    even); a text that cannot fit (a word longer than a line) keeps its spaces' best break."""
    text = " ".join(text.split())
    if len(text) <= MAX_LINE_CHARS or " " not in text:
        return [text]
    spaces = [i for i, c in enumerate(text) if c == " "]
    best = min(spaces, key=lambda i: (max(i, len(text) - i - 1) > MAX_LINE_CHARS,  # fits first
                                      abs(len(text) - 2 * i - 1) - (6 if CLAUSE_END.search(text[:i]) else 0)))
    return [text[:best], text[best + 1:]]


def fits(words: list[Word]) -> bool:
    """One cue: MAX_LINES lines of MAX_LINE_CHARS, and MAX_SECONDS."""
    text = _text(words)
    shown = lines(text)
    return (len(shown) <= MAX_LINES and all(len(line) <= MAX_LINE_CHARS for line in shown)
            and words[-1].end - words[0].start <= MAX_SECONDS)


def _runs(words: list[Word], audio: Audio | None) -> list[list[Word]]:
    """Step 1: cut after sentence ends and at pauses."""
    runs: list[list[Word]] = []
    for word in words:
        if runs and not _ends_here(runs[-1][-1], word, audio):
            runs[-1].append(word)
        else:
            runs.append([word])
    return runs


def _ends_here(last: Word, following: Word, audio: Audio | None) -> bool:
    return bool(SENTENCE_END.search(last.text.strip())) or _pause(last, following, audio) >= PAUSE_SECONDS


def _pause(last: Word, following: Word, audio: Audio | None) -> float:
    """The silence between two words: between their times, or between where the first is last
    heard and the second first heard, whichever is longer."""
    gap = following.start - last.end
    if audio is None:
        return gap
    heard_end = audio.speech_end(last.start, last.end)
    heard_start = audio.speech_start(following.start, following.end)
    return gap if heard_end is None or heard_start is None else max(gap, heard_start - heard_end)


def _fitted(words: list[Word], audio: Audio | None) -> list[list[Word]]:
    """Step 2: split until every piece fits one cue (a single word stays whole)."""
    if len(words) == 1 or fits(words):
        return [words]
    chars = list(itertools.accumulate((len(w.text) for w in words), initial=0))
    pauses = [0.0] + [_pause(a, b, audio) for a, b in itertools.pairwise(words)]
    cut = max(range(1, len(words)), key=lambda i: _split_score(words, chars, pauses, i))
    return _fitted(words[:cut], audio) + _fitted(words[cut:], audio)


def _split_score(words: list[Word], chars: list[int], pauses: list[float], i: int) -> float:
    """How well a cut before words[i] reads: after punctuation, at a pause, near the middle (by
    characters: `chars` are the words' running lengths), and better still when both halves fit
    one cue (checked only where their lengths and times allow it: the check lays out lines)."""
    left, right = chars[i], chars[-1] - chars[i]
    balance = 1.0 - abs(left - right) / (chars[-1] or 1)
    pause = min(pauses[i], 1.0)
    clause = 1.0 if CLAUSE_END.search(words[i - 1].text.strip()) else \
        0.5 if words[i].text.strip().lower() in CONJUNCTIONS else 0.0
    room = MAX_LINES * (MAX_LINE_CHARS + 1)
    both_fit = (left <= room and right <= room and words[i - 1].end - words[0].start <= MAX_SECONDS
                and words[-1].end - words[i].start <= MAX_SECONDS and fits(words[:i]) and fits(words[i:]))
    return 2.0 * both_fit + 1.5 * clause + 2.0 * pause + balance


def _text(words: list[Word]) -> str:
    return "".join(w.text for w in words).strip()


def _hold(out: list[dict[str, Any]], duration_s: float | None) -> None:
    """Step 3's hold: a segment shorter than MIN_SECONDS ends later, into the silence after it."""
    for i, segment in enumerate(out):
        if segment["end"] - segment["start"] >= MIN_SECONDS:
            continue
        limit = out[i + 1]["start"] if i + 1 < len(out) else (duration_s if duration_s else segment["start"] + MIN_SECONDS)
        segment["end"] = round(max(segment["end"], min(segment["start"] + MIN_SECONDS, limit)), 3)
