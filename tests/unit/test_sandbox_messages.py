"""The extraction children's protocol without processes: a call is a typed message the handler
dispatches on, a reply one of four types (gpucli/inputs/documents/sandbox.py, calls.py)."""

from __future__ import annotations

import pytest

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.documents import calls
from gpucli.inputs.documents.sandbox import Crashed, Limits, OutOfMemory, Refused, Returned, Stop, answer, outcome
from gpucli.inputs.extract import Document
from tests.sandbox_calls import Bug, Echo, Refuse, act

LIMITS = Limits(timeout_s=5.0, memory_mb=1024)


def too_big(call: object) -> object:
    raise MemoryError


def test_a_child_answers_each_call_with_a_typed_reply():
    assert answer(act, Echo("a")) == Returned("a")
    assert answer(act, Refuse("encrypted PDF")) == Refused(Stage.DECODE, "encrypted PDF")
    assert answer(too_big, Echo("a")) == OutOfMemory()
    assert answer(act, Bug()) == Crashed("ZeroDivisionError: division by zero")


def test_each_reply_becomes_the_value_or_the_inputs_failure_with_its_own_stage():
    assert outcome(Returned([1, 2]), LIMITS) == [1, 2]
    refused = outcome(Refused(Stage.PREPROCESS, "no text"), LIMITS)
    assert isinstance(refused, InputError) and refused.stage is Stage.PREPROCESS and str(refused) == "no text"
    memory = outcome(OutOfMemory(), LIMITS)
    assert isinstance(memory, InputError) and "1024 MiB" in str(memory)
    crashed = outcome(Crashed("KeyError: 'x'"), LIMITS)
    assert isinstance(crashed, InputError) and str(crashed) == "the extractor failed: KeyError: 'x'"


@pytest.mark.parametrize("reply", [("ok", 1), ("input", ("decode", "x")), None, Stop()])
def test_a_reply_of_no_reply_type_is_a_bug_not_an_inputs_failure(reply):
    with pytest.raises(TypeError, match="This is a bug"):
        outcome(reply, LIMITS)


def test_the_documents_handler_dispatches_on_the_calls_type():
    document = calls.run(calls.Extract("html", b"<html><body><p>Hello there</p></body></html>"))
    assert isinstance(document, Document) and document.text.strip() == "Hello there"
    with pytest.raises(InputError, match="not a valid PDF"):
        calls.run(calls.PdfPages(b"not a pdf"))
    with pytest.raises(TypeError, match="This is a bug"):
        calls.run(("extract", "html", b"<p>x</p>"))
