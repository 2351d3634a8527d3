"""Texts -> token ids and the character span of each token, for a text task's windows: in one
`encode_batch` per chunk of files (it releases the GIL and uses the cores), a long text in
slices (memory bounded per file), the prompt's tokens cut off again.

Offsets are what the windows' `char_start`/`char_end` come from; an ASCII text that surely fits
one window needs only its first and last, which skips most of the tokenizer's offset work.

Where a one-window text's tokens start and end, without the tokenizer's offsets (`ascii_ends`):
a row's `char_start`/`char_end`/`text` need only the first token's start and the last token's
end. Asking the tokenizer for offsets costs ~15% of `encode_batch` (`encode_batch_fast` skips
them), and tokenizing is most of a reader's time on one-sentence files. For one family of
tokenizers the two ends follow from the text itself: BERT's (BertNormalizer with clean_text,
BertPreTokenizer, WordPiece), on ASCII text. Why that holds: clean_text drops the ASCII control
characters (0-31 but tab, newline and carriage return; 127) and turns those three into spaces;
the pre-tokenizer splits on whitespace and makes each ASCII punctuation character a word;
WordPiece covers every word whole (sub-words, or one [UNK] for a word it cannot cut or longer than
its limit). So every character from 33 to 126 lies in some token and no other ASCII character
does: the first token starts at the first such character, the last ends after the last one.
Added tokens ([CLS], [MASK], ...) matched in the text cover exactly their characters unless they
strip whitespace around them, so a tokenizer with such a token keeps the offsets. Lower-casing and
accent stripping keep ASCII lengths. tests/integration/test_embed.py checks the rule against the
tokenizer's own offsets on texts built to break it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

SLICE_CHARS = 1 << 18  # texts longer than this are tokenized in slices (bounded memory per file)
SLICES_PER_CALL = 8  # slices per encode_batch call: 2 MiB of text at a time
NO_TOKEN = "".join(map(chr, range(33))) + "\x7f"  # the ASCII characters that belong to no token


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
        text (`ascii_ends`): ~15% of the tokenizer's time."""
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


def ends_from_text(tokenizer: Any) -> bool:
    """Whether `ascii_ends` gives this tokenizer's first and last offsets on ASCII texts."""
    normalizer, pre, model = tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.model
    if (type(normalizer).__name__, type(pre).__name__, type(model).__name__) != \
            ("BertNormalizer", "BertPreTokenizer", "WordPiece"):
        return False
    if not getattr(normalizer, "clean_text", False) or not hasattr(tokenizer, "encode_batch_fast"):
        return False
    added = tokenizer.get_added_tokens_decoder().values()
    return not any(getattr(token, "lstrip", True) or getattr(token, "rstrip", True) for token in added)


def ascii_ends(text: str) -> tuple[tuple[int, int]]:
    """Offsets holding the first token's start ([0][0]) and the last token's end ([-1][1]) of an
    ASCII text with at least one token (see the module doc)."""
    return ((len(text) - len(text.lstrip(NO_TOKEN)), len(text.rstrip(NO_TOKEN))),)


def split_prompt(ids: list[int], offsets: list[tuple[int, int]], prompt_chars: int,
                 head: list[int] | None = None) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """Cut the encoding of `prompt + text` (no special tokens) into (prompt ids, text ids, text
    offsets into `text`). A token that straddles the boundary belongs to the text, its offset
    clamped to 0. With `head` (the prompt's `prompt_ids`), tokens after it that still lie in the
    prompt (a lone `▁` that did not join the text's first word) go to the text at offset (0, 0), so
    that head + the first window is exactly sentence-transformers' joint tokenization."""
    cut = 0
    while cut < len(ids) and offsets[cut][0] < prompt_chars and offsets[cut][1] <= prompt_chars:
        cut += 1
    if head is not None and len(head) < cut and list(ids[: len(head)]) == list(head):
        cut = len(head)
    text_offsets = [(max(0, start - prompt_chars), max(0, end - prompt_chars)) for start, end in offsets[cut:]]
    return list(ids[:cut]), list(ids[cut:]), text_offsets
