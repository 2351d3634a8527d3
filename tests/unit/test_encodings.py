"""A text file's encoding (issue 52): its true text, or one failure that says to name it; never a row
of mojibake. The files are real: Python's own Lib/test/cjkencodings (each beside its UTF-8 truth) and
texts written by Python's codecs, the writers of those code pages."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from gpucli.core.errors import InputError
from gpucli.inputs.encodings import EncodingUnknown, NamedEncodings, decode
from gpucli.inputs.text import decode_text

CJK = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
CJK_FILES = sorted(p.stem for p in CJK.glob("*.txt") if not p.stem.endswith("-utf8"))


def truth(name: str) -> str:
    return (CJK / f"{name}-utf8.txt").read_text(encoding="utf-8")


def test_python_ships_the_cjk_test_files():
    assert len(CJK_FILES) == 15


@pytest.mark.parametrize("name", CJK_FILES)
def test_every_cjk_test_file_decodes_to_its_truth_or_is_refused_never_mojibake(name):
    data = (CJK / f"{name}.txt").read_bytes()
    try:
        text = decode_text(data)
    except InputError as exc:
        assert "--encoding" in str(exc)
        return
    assert text == truth(name)


@pytest.mark.parametrize("name", ["iso2022_jp", "iso2022_kr", "hz"])
def test_escape_encodings_are_recognised_by_their_escapes(name):
    """7-bit data: valid ASCII, so UTF-8 would win; before, ISO-2022-JP became 3 rows of `$N3+H/$O!"`."""
    assert decode((CJK / f"{name}.txt").read_bytes()) == truth(name)


@pytest.mark.parametrize("name", ["cp949", "johab", "shift_jis", "gb2312", "big5", "euc_jp"])
def test_multi_byte_files_decode_to_their_truth(name):
    """CP949 and Johab were "binary content"; Shift-JIS was read as GB18030."""
    assert decode((CJK / f"{name}.txt").read_bytes()) == truth(name)


def test_big5_hkscs_is_refused_with_how_to_name_it_and_named_it_decodes():
    data = (CJK / "big5hkscs.txt").read_bytes()
    with pytest.raises(EncodingUnknown, match="--encoding"):
        decode(data)
    assert decode(data, "big5hkscs") == truth("big5hkscs")


@pytest.mark.parametrize("text", [
    "Café crème brûlée\n",  # was read as cp1250: "Café crčme brűlée"
    "Grüße aus Köln\n" + "A plain ASCII line of the same file.\n" * 6,  # was mac_iceland, then refused as Latin
    "Le garçon a mangé une pomme à la fenêtre de l'hôtel.\n",
])
def test_western_text_in_latin_1_decodes_to_its_truth(text):
    assert decode(text.encode("latin-1")) == text
    assert decode(text.encode("cp1252")) == text


@pytest.mark.parametrize("text", ['print("böse")\n', "Naïve … señor\n", "Zu Hause\n\u00e8\n"])
def test_a_short_western_text_is_its_truth_or_refused(text):
    """`print("böse")` was read as Big5 (b飉e), then refused as Chinese; too little evidence may be a
    refusal, never another text."""
    try:
        assert decode(text.encode("cp1252")) == text
    except EncodingUnknown as exc:
        assert "--encoding" in str(exc)


@pytest.mark.parametrize("text,encoding", [
    ("Zażółć gęślą jaźń: to zdanie zawiera wszystkie polskie litery, które mają znaki diakrytyczne.\n", "cp1250"),
    ("Zażółć gęślą jaźń: to zdanie zawiera wszystkie polskie litery, które mają znaki diakrytyczne.\n", "iso8859_2"),
    ("Příliš žluťoučký kůň úpěl ďábelské ódy a pak se napil z řeky.\n", "cp1250"),
    ("Съешь же ещё этих мягких французских булок, да выпей чаю. Это предложение содержит все буквы.\n", "cp1251"),
    ("Съешь же ещё этих мягких французских булок, да выпей чаю. Это предложение содержит все буквы.\n", "koi8_r"),
    ("Съешь же ещё этих мягких французских булок, да выпей чаю. Это предложение содержит все буквы.\n", "cp866"),
])
def test_central_european_and_cyrillic_code_pages(text, encoding):
    assert decode(text.encode(encoding)) == text


def test_a_byte_order_mark_wins_and_valid_utf_8_wins():
    text = "Grüße, 深度学习"
    assert decode(b"\xef\xbb\xbf" + text.encode()) == text
    assert decode(text.encode("utf-16")) == text
    assert decode(text.encode(), "cp1252") == text  # named, but the bytes are valid UTF-8: not "GrÃ¼ÃŸe"


def test_a_named_encoding_decodes_strictly_and_says_when_the_bytes_are_not_in_it():
    assert decode("Grüße".encode("latin-1"), "latin-1") == "Grüße"
    with pytest.raises(InputError, match="not valid shift_jis"):
        decode(b"\x81\x20abc", "shift_jis")


def test_named_encodings_by_glob_then_for_every_file():
    named = NamedEncodings.parse(["cp1252", "legacy/*.txt=shift_jis", "*.ru=koi8-r"])
    assert named.for_path("legacy/a.txt") == "shift_jis"
    assert named.for_path("b/c.ru") == "koi8-r"
    assert named.for_path("other.txt") == "cp1252"
    assert NamedEncodings.parse([]).for_path("x.txt") is None
    with pytest.raises(ValueError, match="not an encoding"):
        NamedEncodings.parse(["latin-9000"])


def test_encoding_per_glob_in_the_config_file(tmp_path):
    from gpucli.core.config import build_config
    from gpucli.tasks.embed.options import EmbedOptions

    config = tmp_path / "gpucli.toml"
    config.write_text('[embed]\nencoding = ["legacy/*.txt=cp1252", "*.sjis=shift_jis"]\n', encoding="utf-8")
    built = build_config("embed", EmbedOptions, {"paths": ("x",)}, config, environ={})
    assert built.task_options["encoding"] == ("legacy/*.txt=cp1252", "*.sjis=shift_jis")
    named = NamedEncodings.parse(EmbedOptions(**built.task_options).encoding)
    assert named.for_path("legacy/a.txt") == "cp1252" and named.for_path("b.sjis") == "shift_jis"
