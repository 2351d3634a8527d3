"""Texts -> token ids and the character span of each token, for a text task's windows: in one
`encode_batch` per chunk of files (it releases the GIL and uses the cores), a long text in
slices (memory bounded per file), the prompt's tokens cut off again.

Offsets are what the windows' `char_start`/`char_end` come from; an ASCII text that surely fits
one window needs only its first and last (tasks/text/spans.py), which skips most of the
tokenizer's offset work.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from gpucli.tasks.embed.st_model import split_prompt
from gpucli.tasks.text.spans import ascii_ends

SLICE_CHARS = 1 << 18  # texts longer than this are tokenized in slices (bounded memory per file)
SLICES_PER_CALL = 8  # slices per encode_batch call: 2 MiB of text at a time


@dataclass
class TextTokens:
    """A task's tokenizer with what frames its windows: the window's length in text tokens and
    the prompt put before each chunk (its ids are cut off the text's)."""

    tokenizer: Any
    window: int
    ends_from_text: bool = False
    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)

    def tokenize(self, texts: list[str], whole: Collection[int] = ()) -> list[tuple[Any, Any]]:
        """(text ids, offsets into the text) per text, the prompt's tokens cut off; the texts at
        indices `whole` get every offset even when they fit one window (a document of several
        pages: its windows end at page boundaries, tasks/text/chunking.py). Texts over SLICE_CHARS
        are tokenized in slices cut at whitespace, so that the parent's memory per file stays
        bounded (a whole 100 MB text in one `encode` peaked at ~170 MiB per MiB)."""
        small = [i for i, t in enumerate(texts) if len(t) <= SLICE_CHARS]
        if not self.prompt and len(small) == len(texts):  # the common case, without a step per text
            return self._plain(texts, whole)
        out: list[tuple[Any, Any]] = [([], [])] * len(texts)
        encodings = self.tokenizer.encode_batch([self.prompt + texts[i] for i in small], add_special_tokens=False)
        for i, enc in zip(small, encodings):
            out[i] = self._without_prompt(enc.ids, enc.offsets)
        for i in (i for i, t in enumerate(texts) if len(t) > SLICE_CHARS):
            out[i] = self._large(texts[i])
        return out

    def _plain(self, texts: list[str], whole: Collection[int]) -> list[tuple[Any, Any]]:
        """Texts without a prompt. An ASCII text that surely fits one window (no more characters
        than the window has tokens) is tokenized without offsets when its ends follow from the
        text (tasks/text/spans.py): ~15% of the tokenizer's time."""
        encode = self.tokenizer.encode_batch
        fast = [i for i, t in enumerate(texts) if len(t) <= self.window and t.isascii() and i not in whole] \
            if self.ends_from_text else []
        if not fast:
            return [(enc.ids, _ends(enc) if len(enc) <= self.window and i not in whole else enc.offsets)
                    for i, enc in enumerate(encode(texts, add_special_tokens=False))]
        out: list[tuple[Any, Any]] = [None] * len(texts)  # type: ignore[list-item]
        quick = self.tokenizer.encode_batch_fast([texts[i] for i in fast], add_special_tokens=False)
        for i, enc in zip(fast, quick):
            out[i] = (enc.ids, ascii_ends(texts[i]) if len(enc) else ())
        if len(fast) < len(texts):
            rest = [i for i, done in enumerate(out) if done is None]
            for i, enc in zip(rest, encode([texts[i] for i in rest], add_special_tokens=False)):
                out[i] = (enc.ids, _ends(enc) if len(enc) <= self.window and i not in whole else enc.offsets)
        return out

    def _without_prompt(self, ids: list[int], offsets: list[tuple[int, int]]) -> tuple[Any, Any]:
        if not self.prompt:
            return ids, offsets
        _, ids, offsets = split_prompt(ids, offsets, len(self.prompt), self.prompt_ids)
        return ids, offsets

    def _large(self, text: str) -> tuple[Any, Any]:
        """A long text in slices, SLICES_PER_CALL at a time through `encode_batch`: memory stays
        bounded, and the tokenizer runs without the GIL on the cores (`encode` holds the GIL: a
        tree of long PDFs kept the reader threads, and so the extraction children, waiting on it)."""
        import numpy as np

        ids, offsets = [], []
        spans = _slices(text, SLICE_CHARS)
        for first in range(0, len(spans), SLICES_PER_CALL):
            group = spans[first:first + SLICES_PER_CALL]
            pieces = [(self.prompt if first + k == 0 else "") + text[a:b] for k, (a, b) in enumerate(group)]
            for k, ((start, _), enc) in enumerate(zip(group, self.tokenizer.encode_batch(pieces,
                                                                                           add_special_tokens=False))):
                part_ids, part_offsets = enc.ids, enc.offsets
                if first + k == 0 and self.prompt:
                    part_ids, part_offsets = self._without_prompt(part_ids, part_offsets)
                ids.append(np.asarray(part_ids, dtype=np.int32))
                offsets.append(np.asarray(part_offsets, dtype=np.int64).reshape(-1, 2) + start)
        return np.concatenate(ids), np.concatenate(offsets)


def _ends(enc: Any) -> Any:
    """The offsets of a text's first and last tokens: all that one window needs of them (the
    whole list costs ~5 us a text to build, a third of what the rest of reading costs). A
    tokenizer that maps either token to no characters gets its whole list, as before."""
    if not len(enc):
        return ()
    first, last = enc.token_to_chars(0), enc.token_to_chars(len(enc) - 1)
    return (first, last) if first is not None and last is not None else enc.offsets


def _slices(text: str, size: int) -> list[tuple[int, int]]:
    """[start, end) ranges of about `size` characters, each cut after a whitespace character."""
    spans, start = [], 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            space = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = space + 1 if space > start else end
        spans.append((start, end))
        start = end
    return spans
