"""A failure record names the input, never an object of gpucli's (issue 46): a library's error
that printed the file object it was handed (Pillow: "cannot identify image file <_io.BytesIO
object at 0x7f...>") reads, in every record, with the input's path in its place."""

from __future__ import annotations

from gpucli.core.records import Failure
from gpucli.core.stages import Stage


def test_an_object_repr_in_a_failure_becomes_the_input_s_path():
    failure = Failure("scans/page 1.png", "decode", "not a valid image file (UnidentifiedImageError: cannot "
                      "identify image file <_io.BytesIO object at 0x7f2df32df650>)")
    assert failure.error == ("not a valid image file (UnidentifiedImageError: cannot identify image file "
                             "'scans/page 1.png')")
    assert failure.stage is Stage.DECODE and failure.to_dict()["error"] == failure.error


def test_every_object_repr_is_replaced_and_other_text_is_left_alone():
    failure = Failure("posts.parquet//17", Stage.PREPROCESS, "<foo.Bar object at 0xDEAD> and <_io.BufferedReader "
                      "object at 0x1> at <0x12> object <not one>")
    assert failure.error == "'posts.parquet//17' and 'posts.parquet//17' at <0x12> object <not one>"
    plain = "cannot stat: Permission denied"
    assert Failure("a.txt", Stage.READ, plain).error == plain
