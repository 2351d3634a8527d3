"""Which encoding a text file's bytes are in: decided by evidence, or refused, never guessed.

A file's text is its true text, or the file is one failure record that says its encoding could
not be determined and how to name it (`--encoding`, docs/encodings.md). The order, strongest
evidence first:

1. a byte-order mark (UTF-8, UTF-16, UTF-32);
2. escape-based encodings, recognised by their escapes: ISO-2022-JP/-KR designations
   (`ESC $ B`...) and HZ's `~{ ... ~}`, in 7-bit data (they are valid ASCII: UTF-8 must not win);
3. valid UTF-8 (pure ASCII included);
4. the encoding the user named for this path (`--encoding NAME` or `--encoding 'GLOB=NAME'`),
   decoding strictly (a named ISO-2022 or HZ encoding is taken before all of these);
5. UTF-16 without a mark (NULs in every other byte of ASCII-heavy text);
6. NUL bytes: binary, refused;
7. among the legacy encodings (`CANDIDATES`: the Windows, ISO and DOS code pages of Western,
   Central-European, Cyrillic, Greek, Turkish, Baltic, Hebrew, Arabic and Thai text, and the
   Chinese, Japanese and Korean multi-byte encodings): every one that decodes the bytes is scored
   by what its text looks like (`evidence`); the reading with the least implausibility wins when
   every other reading that gives a different text is clearly worse; a tie is a refusal.

The evidence (`Evidence`) looks only at what differs between readings, the non-ASCII characters:
a control, unassigned or private-use character rules a reading out; a symbol glued to letters
("Gr¸þe"), letters of two alphabets in one word ("Cafй", "b飉e"), a case pattern no language
writes ("пЯИБЕР", "GrŁŖe"), and letters no single language's alphabet holds together ("crčme
brűlée": Czech č beside Hungarian ű) each count against it. Readings still tied after that are
ranked by letter frequencies only within one non-Latin script and one case (`_by_coherence`: the
frequent ideographs of Chinese, Japanese or Korean tell Big5 from GBK; charset-normalizer's
coherence KOI8-R from CP1251 on a paragraph) when the difference is clear, else refused. Measured on
Python's cjkencodings test data and Western, Central-European and Cyrillic texts in their code
pages (benchmarks/encodings.py, docs/encodings.md): no row with a text that is not the truth.
"""

from __future__ import annotations

import codecs
import fnmatch
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage

BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))

# The legacy encodings considered, by Python codec name; readings that give the same text are one.
SINGLE_BYTE = ("cp1252", "iso8859_15", "latin_1", "cp1250", "iso8859_2", "cp1251", "koi8_r", "koi8_u", "cp866",
               "iso8859_5", "mac_cyrillic", "cp1253", "iso8859_7", "cp1254", "iso8859_9", "cp1257", "iso8859_13",
               "cp1255", "iso8859_8", "cp1256", "cp874", "mac_roman", "cp437", "cp850")
MULTI_BYTE = ("gb18030", "big5", "big5hkscs", "cp950", "shift_jis", "cp932", "shift_jis_2004", "euc_jp",
              "euc_jis_2004", "euc_kr", "cp949", "johab")
CANDIDATES = SINGLE_BYTE + MULTI_BYTE
ESCAPE_ENCODINGS = ("iso2022_jp", "iso2022_jp_1", "iso2022_jp_2", "iso2022_jp_2004", "iso2022_jp_3",
                    "iso2022_jp_ext", "iso2022_kr", "hz")
SAMPLE_BYTES = 1 << 16  # evidence is read from the first 64 KiB (cut at a line end); the winner decodes all
COHERENCE_MARGIN = 0.1  # charset-normalizer's coherence must differ by this much to break a tie

# ISO-2022 designations (ESC $ @, ESC $ B, ESC $ ( D, ESC $ ) C, ESC ( J...): never in ASCII text.
ISO2022 = re.compile(rb"\x1b(?:\$[@AB]|\$\([A-Z@]|\$\)[AC]|\([BIJ])")
HZ = re.compile(rb"~\{(?:[\x21-\x7e]{2})+~\}")


class EncodingUnknown(InputError):
    """The bytes fit several encodings and the evidence does not decide (or fit none)."""

    def __init__(self, readings: list[str]) -> None:
        if readings:
            shown = " or ".join(readings[:3])
            why = f"its encoding could not be determined (it reads as {shown}, and the evidence does not decide)"
        else:
            why = "its encoding could not be determined (no text encoding decodes it)"
        super().__init__(Stage.DECODE, f"{why}; name it with --encoding NAME, or --encoding 'GLOB=NAME' for "
                                       "these files (per run or in the config: docs/encodings.md)")


@dataclass(frozen=True)
class NamedEncodings:
    """`--encoding`: one encoding for every file (`NAME`), or per glob (`GLOB=NAME`, matched as
    --include matches: the path under the root or the file name); the first glob that matches wins,
    then the bare name."""

    rules: tuple[tuple[str, str], ...] = ()  # (glob, codec name); glob "" = every file

    @staticmethod
    def parse(values: tuple[str, ...] | list[str]) -> NamedEncodings:
        rules = []
        for value in values:
            glob, _, name = value.rpartition("=")
            try:
                codec = codecs.lookup(name.strip()).name
            except LookupError:
                raise ValueError(f"--encoding {value!r}: {name.strip()!r} is not an encoding Python knows "
                                 "(e.g. cp1252, latin-1, shift_jis, gb18030, koi8-r)") from None
            rules.append((glob.strip(), codec))
        rules.sort(key=lambda rule: rule[0] == "")  # globs first, the bare name last
        return NamedEncodings(tuple(rules))

    def for_path(self, path: str) -> str | None:
        name = path.rsplit("/", 1)[-1]
        for glob, codec in self.rules:
            if not glob or fnmatch.fnmatch(path, glob) or fnmatch.fnmatch(name, glob):
                return codec
        return None


def decode(data: bytes, named: str | None = None) -> str:
    """The text of `data` (see the module doc), or an InputError (stage decode) saying why not."""
    if named in ESCAPE_ENCODINGS:  # 7-bit: valid UTF-8 too, so taken as named
        return _strict(data, named, "as --encoding names it")
    escape = _escape_encoding(data)
    for bom, encoding in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                break
    if escape is not None:
        return data.decode(escape)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if named is not None:
        return _strict(data, named, "as --encoding names it")
    if b"\x00" in data[:4096]:
        if _utf16_like(data):
            return _utf16(data)
        raise InputError(Stage.DECODE, "binary content, not text (NUL bytes)")
    encoding = detect(data)
    return _strict(data, encoding, "as its first 64 KiB said")


def _strict(data: bytes, encoding: str, why: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(Stage.DECODE, f"not valid {encoding} text {why} (byte {exc.start})") from None


def _escape_encoding(data: bytes) -> str | None:
    """An ISO-2022 or HZ encoding that decodes 7-bit `data` whose escapes name it; else None."""
    if not data.isascii():
        return None
    if b"\x1b" in data and ISO2022.search(data):
        names = ("iso2022_kr",) if b"\x1b$)C" in data else ESCAPE_ENCODINGS[:6]
    elif b"~{" in data and HZ.search(data):
        names = ("hz",)
    else:
        return None
    for name in names:
        try:
            data.decode(name)
        except UnicodeDecodeError:
            continue
        return name
    return None


def _utf16_like(data: bytes) -> bool:
    """UTF-16 without BOM: NULs in every other byte for ASCII-heavy text."""
    head = data[:4096]
    even, odd = head[0::2].count(0), head[1::2].count(0)
    return max(even, odd) > len(head) // 4 and min(even, odd) < len(head) // 64 + 1


def _utf16(data: bytes) -> str:
    head = data[:4096]
    encoding = "utf-16-le" if head[1::2].count(0) > head[0::2].count(0) else "utf-16-be"
    return _strict(data, encoding, "(no byte-order mark; NULs in every other byte)")


def detect(data: bytes) -> str:
    """The legacy encoding the evidence picks for `data` (not UTF-8, no NULs), or EncodingUnknown."""
    sample = _sample(data)
    readings: dict[str, list[str]] = {}  # text -> the encodings that read it
    for encoding in CANDIDATES:
        try:
            text = sample.decode(encoding)
        except UnicodeDecodeError:
            continue
        readings.setdefault(text, []).append(encoding)
    scored = sorted(((evidence(text), text) for text in readings), key=lambda pair: pair[0].faults)
    scored = [(ev, text) for ev, text in scored if not ev.ruled_out]
    if not scored:
        raise EncodingUnknown([])
    best = [(ev, text) for ev, text in scored if ev.faults == scored[0][0].faults]
    if len(best) > 1 and len({(_main_script(text), _capitals(text)) for _, text in best}) == 1 \
            and _main_script(best[0][1]) != "LATIN":
        best = _by_coherence(best)
    if len(best) > 1:
        if all(_looks_binary(text) for _, text in best):
            raise InputError(Stage.DECODE, "binary content, not text (no text encoding fits)")
        raise EncodingUnknown([readings[text][0] for _, text in best])
    return readings[best[0][1]][0]


def _sample(data: bytes) -> bytes:
    if len(data) <= SAMPLE_BYTES:
        return data
    cut = data.rfind(b"\n", 0, SAMPLE_BYTES)  # 0x0a is never inside a character of any candidate
    return data[: cut + 1] if cut > 0 else data[:SAMPLE_BYTES]


def _by_coherence(tied: list[tuple[Evidence, str]]) -> list[tuple[Evidence, str]]:
    """The readings among `tied` that the frequencies of their letters do not rule out. Readings in
    ideographs: the share of their ideographs among the most frequent ones of Chinese, Japanese or
    Korean (charset-normalizer's lists): the right reading holds 的, の or 이 on a line, a wrong one
    nearly never; a reading under half the best one's share is out. Others: charset-normalizer's
    coherence (letter frequencies per language), within COHERENCE_MARGIN of the best one's."""
    from charset_normalizer.cd import coherence_ratio

    ideographic = _main_script(tied[0][1]) == "CJK"

    def coherence(text: str) -> float:
        if ideographic:
            return _frequent_ideographs(text[:SAMPLE_BYTES])
        return max((ratio for _, ratio in coherence_ratio(text[:SAMPLE_BYTES], 0.0, None)), default=0.0)

    ranked = sorted(((coherence(text), ev, text) for ev, text in tied), key=lambda t: -t[0])
    top = ranked[0][0]
    if ideographic:
        return [(ev, text) for score, ev, text in ranked if score > top / 2 or top < 0.05]
    return [(ev, text) for score, ev, text in ranked if score > top - COHERENCE_MARGIN]


_FREQUENT: list[tuple[frozenset[str], ...]] = []


def _frequent_ideographs(text: str) -> float:
    if not _FREQUENT:
        from charset_normalizer.constant import FREQUENCIES

        japanese = frozenset(FREQUENCIES["Japanese"] + FREQUENCIES["Japanese—"] + FREQUENCIES["Japanese——"])
        _FREQUENT.append((frozenset(FREQUENCIES["Chinese"]), japanese, frozenset(FREQUENCIES["Korean"])))
    ideographs = [c for c in text if c.isalpha() and not c.isascii() and script(c) == "CJK"]
    if not ideographs:
        return 0.0
    return max(sum(1 for c in ideographs if c in frequent) for frequent in _FREQUENT[0]) / len(ideographs)


def _capitals(text: str) -> bool:
    """Whether most cased letters beyond ASCII are capitals. KOI8-R and CP1251 swap the cases: a
    lower-case line read in the other is capitals, whose letter frequencies mislead the coherence
    ("исследует" as "ХЯЯКЕДСЕР"); readings whose cases differ so are not ranked by it, but refused."""
    upper = sum(1 for c in text[:SAMPLE_BYTES] if not c.isascii() and c.isupper())
    lower = sum(1 for c in text[:SAMPLE_BYTES] if not c.isascii() and c.islower())
    return upper > lower


def _main_script(text: str) -> str:
    """The script of most letters beyond ASCII in `text`. Letter frequencies tell a right reading
    from a wrong one within one script (Big5 from GBK, KOI8-R from CP1251), not across scripts, and
    not between Latin code pages (measured: a coherence lead of 0.2 still picked the wrong one): a tie
    across scripts or between Latin readings is refused."""
    scripts = Counter(script(c) for c in text[:SAMPLE_BYTES] if c.isalpha() and not c.isascii())
    return scripts.most_common(1)[0][0] if scripts else "LATIN"


def _looks_binary(text: str) -> bool:
    symbols = sum(1 for c in text if not c.isascii() and not c.isalpha())
    return symbols > len(text) // 4


# --- the evidence ----------------------------------------------------------------------------------------------

# Punctuation and symbols real text puts beside letters (quotes, dashes, the degree sign, the
# Catalan middle dot, the soft hyphen...): not evidence against a reading.
COMMON = set("«»‹›„“”‘’‚–—…•·°§¶©®™€£¥¢¹²³¿¡´\u00a0\u00ad\u2009\u202f′″")
# The letters beyond ASCII of each language a legacy code page serves (CLDR's main exemplar sets,
# lower case; Cyrillic and Greek whole). A reading whose letters no single alphabet holds is suspect.
ALPHABETS = {
    "de": "äöüß", "fr": "àâæçéèêëîïôœùûüÿ", "es": "áéíñóúü", "it": "àèéìíîòóùú", "pt": "áàâãçéêíóôõú",
    "ca": "àçéèíïòóúü", "nl": "áäéëíïóöúü", "da": "æøåé", "no": "æøåéóò", "sv": "åäöé", "fi": "åäöšž",
    "is": "áðéíóúýþæö", "et": "äõöüšž", "tr": "çğıöşüâî", "pl": "ąćęłńóśźż", "cs": "áčďéěíňóřšťúůýž",
    "sk": "áäčďéíĺľňóôŕšťúýž", "hu": "áéíóöőúüű", "sl": "čšž", "hr": "čćđšž", "ro": "ăâîșțşţ", "sq": "çë",
    "lv": "āčēģīķļņšūž", "lt": "ąčęėįšųūž", "mt": "ċġħż",
    "ru": "абвгдеёжзийклмнопрстуфхцчшщъыьэюя", "uk": "абвгґдеєжзиіїйклмнопрстуфхцчшщьюя",
    "be": "абвгдеёжзійклмнопрстуўфхцчшыьэюя", "bg": "абвгдежзийклмнопрстуфхцчшщъьюя",
    "sr": "абвгдђежзијклљмнњопрстћуфхцчџш", "mk": "абвгдѓежзѕијклљмнњопрстќуфхцчџш",
    "el": "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώϊϋΐΰς",
}
ALPHABET_SETS = {lang: frozenset(letters) for lang, letters in ALPHABETS.items()}
CHECKED_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")  # scripts whose letters the alphabets above cover
IDEOGRAPHIC = {"CJK", "HIRAGANA", "KATAKANA", "HANGUL", "KATAKANA-HIRAGANA", "HALFWIDTH", "FULLWIDTH", "IDEOGRAPHIC",
               "BOPOMOFO"}
CURRENCY = set("€£¥¢")
APOSTROPHES = set("’‘\u02bc´`")  # ´ and ` stand for an apostrophe in many texts ("komma´s", "don´t")
DASHES = set("–—\u00ad")  # between two words of three letters or more: "Paris–Roubaix"
WORDS = re.compile(r"\S*[^\x00-\x7f]\S*")


@dataclass(frozen=True)
class Evidence:
    """What speaks against one reading: `ruled_out` (a control, unassigned or private-use
    character where the bytes were not ASCII), else `faults`, a count (see the module doc)."""

    ruled_out: bool
    faults: int


def evidence(text: str) -> Evidence:
    faults = 0
    letters: Counter[str] = Counter()
    for match in WORDS.finditer(text):
        word = match.group()
        symbols = set()
        for i, c in enumerate(word):
            if c.isascii():
                continue
            kind = unicodedata.category(c)
            if kind in ("Cc", "Cn", "Co", "Cs"):
                return Evidence(True, 0)
            if kind[0] == "L":
                lower = c.lower()
                letters[lower if len(lower) == 1 else c] += 1
                continue
            if kind[0] == "M":
                faults += _foreign_mark(word, i)
                continue
            if _glued(word, i):
                faults += 1  # "Gr¸þe", "conexi—n", "m·quina": a symbol glued to letters
            if kind[0] == "S" and c not in COMMON:
                symbols.add(c)  # box drawing read from letters: "╙╨╔╙╧╦"
        faults += _mixed_scripts(word) + _case_breaks(word) + _all_accented(word) + (len(symbols) > 1)
    faults += text.count("\u203e") + text.count("¥")  # Shift_JIS X 0213's reading of ASCII's \\ and ~
    faults += _halfwidth_kana(text)
    return Evidence(False, faults + _outside_alphabets(letters))


HALFWIDTH_KANA = re.compile("[\uff61-\uff9f]")
HIRAGANA = re.compile("[\u3041-\u309f]")


def _halfwidth_kana(text: str) -> int:
    """Half-width katakana (Shift-JIS's single bytes 0xA1-0xDF) in a text without hiragana: no
    Japanese prose is written so, a single-byte text read as Shift-JIS is ("ﾅﾛﾘ ﾖﾅ")."""
    kana = len(HALFWIDTH_KANA.findall(text))
    return kana if kana and not HIRAGANA.search(text) else 0


def _all_accented(word: str) -> int:
    """A Latin word of three letters or more none of which is ASCII ("ÉÍÍ", "Ïðèâåò"): no language
    writes one (Cyrillic read as Latin-1 looks so)."""
    return sum(1 for run in re.findall(r"[^\W\d_]{3,}", word)
               if not any(c.isascii() for c in run) and all(script(c) == "LATIN" for c in run))


def _foreign_mark(word: str, i: int) -> int:
    """A combining mark of one script on a letter of another ("seٌor": an Arabic vowel sign on a
    Latin e); generic combining marks (COMBINING ACUTE...) go on any letter."""
    mark = unicodedata.name(word[i], "UNKNOWN").split(" ", 1)[0]
    if mark == "COMBINING" or i == 0 or not word[i - 1].isalpha():
        return 0
    return int(script(word[i - 1]) != mark)


def _glued(word: str, i: int) -> bool:
    """Whether the symbol at `i` is glued to letters as no text writes it: a symbol beside a letter
    (the punctuation of COMMON only between two letters, an apostrophe and Catalan's l·l never),
    unless it is CJK punctuation ("、", "「", fullwidth forms) in a word with ideographs, as Chinese
    and Japanese write it (「ABC」の)."""
    c = word[i]
    before = i > 0 and word[i - 1].isalpha()
    after = i + 1 < len(word) and word[i + 1].isalpha()
    if not (before or after):
        return False
    if all(script(word[j]) == "CJK" for j in (i - 1, i + 1) if 0 <= j < len(word) and word[j].isalpha()):
        return False  # "☆첫가끝", "※注": symbols beside ideographs; a wrong CJK reading is coherence's to catch
    if "\u3000" <= c <= "\u303f" or "\uff00" <= c <= "\uffef" or c == "\u30fb":
        return not any(ch.isalpha() and script(ch) == "CJK" for ch in word)
    if c not in COMMON or c in CURRENCY:
        return True  # a currency sign after a letter ("пользовани€", "ММДД££") is a letter read wrong
    if not (before and after) or c in APOSTROPHES or (c == "·" and word[i - 1] == word[i + 1] == "l"):
        return False
    return c not in DASHES or min(_letters_run(word, i, -1), _letters_run(word, i, 1)) < 3


def _letters_run(word: str, i: int, step: int) -> int:
    n, j = 0, i + step
    while 0 <= j < len(word) and word[j].isalpha():
        n, j = n + 1, j + step
    return n


def script(c: str) -> str:
    """The Unicode script of a letter, from its name's first word (LATIN, CYRILLIC, CJK, HANGUL...)."""
    if c.isascii():
        return "LATIN"
    word = unicodedata.name(c, "UNKNOWN").split(" ", 1)[0]
    return "CJK" if word in IDEOGRAPHIC else word


def _mixed_scripts(word: str) -> int:
    """Letters of two alphabets in one run of letters ("Cafй", "Naпve"), or one or two ideographs
    glued to Latin letters ("b飉e", "f鯝": a multi-byte reading of a Latin-1 letter takes the next
    byte with it). Japanese writes "Pythonの使い方" without a space, so only short runs count."""
    faults = 0
    for run in re.findall(r"[^\W\d_]+", word):
        if run.isascii() or len(run) < 2:
            continue
        scripts = [script(c) for c in run]
        kinds = set(scripts) - {"COMBINING"}
        if len(kinds) < 2:
            continue
        if kinds & {"CJK"} and kinds <= {"CJK", "LATIN"}:
            faults += sum(1 for piece in re.findall(r"[^\W\d_]+", run)
                          for cjk in re.finditer(r"(?:(?![A-Za-z\u00c0-\u024f]).)+", piece)
                          if len(cjk.group()) <= 2 and (cjk.start() > 0 or cjk.end() < len(piece)))
        else:
            faults += 1
    return faults


def _case_breaks(word: str) -> int:
    """A lower-case letter followed by a capital, or a capital between a letter and a lower-case one,
    one of them beyond ASCII ("пЯИБЕР", "GrŁŖe", "KŲln", "kommaŽs"): no language writes that inside a
    word (ASCII camelCase is left alone)."""
    breaks = sum(1 for a, b in zip(word, word[1:]) if a.islower() and b.isupper() and not (a.isascii() and b.isascii()))
    return breaks + sum(1 for a, b, c in zip(word, word[1:], word[2:])
                        if a.isupper() and b.isupper() and c.islower() and not b.isascii())


def _outside_alphabets(letters: Counter[str]) -> int:
    """Occurrences of letters (Latin, Cyrillic, Greek, beyond ASCII) that the alphabet which holds
    the most of them does not hold."""
    checked = {c: n for c, n in letters.items() if script(c) in CHECKED_SCRIPTS}
    if not checked:
        return 0
    total = sum(checked.values())
    held = max(sum(n for c, n in checked.items() if c in alphabet) for alphabet in ALPHABET_SETS.values())
    return total - held
