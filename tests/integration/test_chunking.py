"""Chunk boundaries (gpucli/tasks/text/chunking.py) and the unknown-token rule (gpucli/tasks/text/unknown.py),
with the default model's tokenizer and no model forward."""

from __future__ import annotations

import re

import pytest

from gpucli.core.records import Source
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.layout import paged
from gpucli.tasks import TaskSpec, create_task
from gpucli.tasks.text.chunking import WindowBlock, text_windows, windows
from gpucli.tasks.text.unknown import MAX_UNKNOWN_SHARE, Unknown
from tests.helpers import SAMPLE

LONG = ["nature/bird_migration.txt", "tech/how_the_internet_works.txt", "culture/printing_press.txt"]


@pytest.fixture(scope="module")
def task():
    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    yield task
    task.documents.close()


def inside_word(text: str, at: int) -> bool:
    return 0 < at < len(text) and text[at - 1].isalnum() and text[at].isalnum()


def cut(task, text: str, window: int, overlap: int) -> list[tuple[int, int]]:
    enc = task.tokenizer.encode(text, add_special_tokens=False)
    return [(enc.offsets[a][0], enc.offsets[b - 1][1]) for a, b in text_windows(text, enc.offsets, window, overlap)]


@pytest.mark.parametrize("window, overlap", [(254, 32), (64, 16), (40, 0), (16, 4)])
def test_no_chunk_of_a_long_sample_starts_or_ends_inside_a_word(task, window, overlap):
    for name in LONG:
        text = (SAMPLE / "docs" / name).read_text(encoding="utf-8")
        spans = cut(task, text, window, overlap)
        assert len(spans) > 1
        for start, end in spans:
            assert not inside_word(text, start) and not inside_word(text, end), (name, text[start:end][:40])


def test_windows_cover_every_token_in_order_and_advance(task):
    text = (SAMPLE / "docs" / LONG[0]).read_text(encoding="utf-8")
    enc = task.tokenizer.encode(text, add_special_tokens=False)
    spans = text_windows(text, enc.offsets, 64, 16)
    assert spans[0][0] == 0 and spans[-1][1] == len(enc.ids)
    for (a0, b0), (a1, b1) in zip(spans, spans[1:]):
        assert a0 < a1 <= b0 < b1 and b0 - a0 <= 64  # no gap, always forward, never over the window


def test_a_window_ends_at_a_sentence_when_one_lies_in_its_last_tokens(task):
    text = " ".join(f"Sentence number {i} says a few plain words about rivers." for i in range(40))
    for start, end in cut(task, text, 48, 16)[:-1]:
        assert text[start:end].endswith("rivers."), text[start:end][-30:]


def test_a_paragraph_break_wins_over_a_later_sentence_end(task):
    para = "One two three four five six seven. Eight nine ten eleven."
    text = "\n\n".join([para] * 30)
    ends = [text[a:b] for a, b in cut(task, text, 40, 16)[:-1]]
    assert all(chunk.endswith("eleven.") for chunk in ends)


def test_a_word_longer_than_half_a_window_is_cut_by_count():
    text = "x" * 5000  # one "word" of 5000 letters: no boundary anywhere
    offsets = [(i * 10, i * 10 + 10) for i in range(500)]
    assert text_windows(text, offsets, 64, 8) == windows(500, 64, 8)


def test_a_document_that_fits_one_window_is_one_chunk_as_before(task):
    text = "  A short note about glaciers and the ice ages.\n"
    block, failures = task.prepare_many([Source(0, "a.txt", "a.txt")], [text.encode()])
    assert not failures and len(block) == 1
    assert block.meta["text"][0] == text.strip() and block.meta["char_start"][0] == 2
    assert block.payload.row(0).tolist() == task.tokenizer.encode(text, add_special_tokens=False).ids


def test_the_docstrings_example_holds(task):
    text = "The Sun is a star. It is hot and bright. Earth orbits it."
    assert [text[a:b] for a, b in cut(task, text, 10, 4)] == [
        "The Sun is a star.", "is a star. It is hot and bright.", "hot and bright. Earth orbits it."]


# --- pages: no window across a page boundary ----------------------------------------------------------

def rows(task, doc: Document, window: int, overlap: int) -> list[tuple[int, int, int]]:
    """(page, char_start, char_end) of each row WindowBlock cuts from `doc`, with every offset."""
    enc = task.tokenizer.encode(doc.text, add_special_tokens=False)
    block = WindowBlock(window, overlap)
    block.add(0, doc, enc.ids, enc.offsets)
    return list(zip(block.page, block.char_start, block.char_end))


@pytest.mark.parametrize("window, overlap", [(254, 32), (40, 8), (16, 4)])
def test_no_window_spans_two_pages_and_every_page_with_text_has_one(task, window, overlap):
    sizes = [3, 0, 30, 1, 12, 0, 0, 2, 45, 1]  # sentences per page: blank pages, short slides, long pages
    pages = [" ".join(f"Page {n} sentence {k} tells of tides and moons." for k in range(size))
             for n, size in enumerate(sizes, 1)]
    doc = paged(pages)
    cut = rows(task, doc, window, overlap)
    for page, start, end in cut:
        assert doc.page_at(start) == page == doc.page_at(end - 1), (page, doc.text[start:end][:40])
        assert set(re.findall(r"Page (\d+) ", doc.text[start:end])) <= {str(page)}  # only its own page's words
    assert {page for page, _, _ in cut} == {n for n, size in enumerate(sizes, 1) if size}
    for n, text in enumerate(pages, 1):  # a page's rows cover it from its first word to its last
        on_page = [(start, end) for page, start, end in cut if page == n]
        if text:
            assert doc.text[on_page[0][0]:].startswith(text[:20]) and doc.text[:on_page[-1][1]].endswith(text[-20:])


def test_short_pages_that_fit_one_window_together_are_a_row_each(task):
    doc = paged(["Tide Tables", "", "Agenda: approve the budget.", "Questions?"])
    assert [(page, doc.text[a:b]) for page, a, b in rows(task, doc, 254, 32)] == [
        (1, "Tide Tables"), (3, "Agenda: approve the budget."), (4, "Questions?")]


def test_a_document_of_one_page_is_cut_as_a_text_without_pages(task):
    text = (SAMPLE / "docs" / LONG[0]).read_text(encoding="utf-8")
    assert [(a, b) for _, a, b in rows(task, Document(text, (0,)), 64, 16)] == \
        [(a, b) for _, a, b in rows(task, Document(text), 64, 16)]


def test_a_paged_document_without_every_offset_is_refused_as_a_bug(task):
    doc = paged(["First page.", "Second page."])
    enc = task.tokenizer.encode(doc.text, add_special_tokens=False)
    with pytest.raises(ValueError, match="This is a bug"):
        WindowBlock(254, 32).add(0, doc, enc.ids, [enc.offsets[0], enc.offsets[-1]])


# --- the unknown-token rule -------------------------------------------------------------------------

def refusal(task, text: str) -> str | None:
    enc = task.tokenizer.encode(text, add_special_tokens=False)
    return task.unknown.refusal(text, enc.ids, enc.offsets)


def test_chinese_text_is_refused_with_the_share_and_a_model_that_reads_it(task):
    text = (SAMPLE / "zh" / "giant_panda.txt").read_text(encoding="utf-8")
    reason = refusal(task, text)
    assert reason is not None and "unknown to the model ([UNK])" in reason and "Chinese" in reason
    assert "intfloat/multilingual-e5-small" in reason and "--allow-unknown-tokens" in reason
    share = int(reason.split("%")[0])
    assert share > MAX_UNKNOWN_SHARE * 100


@pytest.mark.parametrize("text", [
    "★ → ✓ ☃ ♫ ⚡",  # symbols only: no letters, the rule does not apply
    "3.14159 2.71828 1.41421 = 42",  # numbers
    "I love pizza 🍕🍕🍕🍕🍕🍕",  # emoji are not words of a language
    "Based on a patch by 张丹丹 <zhangdandan@loongson.cn>.",  # a name in another script: 20%, at the bar
    "The word Straße and the word naïve and café are fine.",
])
def test_texts_the_model_reads_are_not_refused(task, text):
    assert refusal(task, text) is None


def test_the_rule_never_applies_to_a_tokenizer_without_an_unknown_token():
    class Model:
        unk_token = None

    class Tok:
        model = Model()

    rule = Unknown.of(Tok(), "gpt2")
    assert rule.unk_id is None and rule.refusal("任何文字", [1, 2, 3], [(0, 1), (1, 2), (2, 3)]) is None


def test_allow_unknown_tokens_embeds_them(task):
    allowed = create_task(TaskSpec("embed", "minilm", {"allow_unknown_tokens": True}))
    allowed.open()
    text = (SAMPLE / "zh" / "dumplings.txt").read_bytes()
    block, failures = allowed.prepare_many([Source(0, "z.txt", "z.txt")], [text])
    assert not failures and len(block) >= 1
    block, failures = task.prepare_many([Source(0, "z.txt", "z.txt")], [text])
    assert block is None and failures[0].stage == "preprocess" and failures[0].cause == "unknown_tokens"
