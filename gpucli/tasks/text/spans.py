"""Where a one-window text's tokens start and end, without the tokenizer's offsets.

A row's `char_start`/`char_end`/`text` need only the first token's start and the last token's
end. Asking the tokenizer for offsets costs ~15% of `encode_batch` (`encode_batch_fast` skips
them), and tokenizing is most of a reader's time on one-sentence files. For one family of
tokenizers the two ends follow from the text itself: BERT's (BertNormalizer with clean_text,
BertPreTokenizer, WordPiece), on ASCII text.

Why that holds: clean_text drops the ASCII control characters (0-31 but tab, newline and
carriage return; 127) and turns those three into spaces; the pre-tokenizer splits on whitespace
and makes each ASCII punctuation character a word; WordPiece covers every word whole (sub-words,
or one [UNK] for a word it cannot cut or longer than its limit). So every character from 33 to
126 lies in some token and no other ASCII character does: the first token starts at the first
such character, the last ends after the last one. Added tokens ([CLS], [MASK], ...) matched in
the text cover exactly their characters unless they strip whitespace around them, so a
tokenizer with such a token keeps the offsets. Lower-casing and accent stripping keep ASCII
lengths. tests/test_embed.py checks the rule against the tokenizer's own offsets on texts built
to break it.
"""

from __future__ import annotations

from typing import Any

NO_TOKEN = "".join(map(chr, range(33))) + "\x7f"  # the ASCII characters that belong to no token


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
