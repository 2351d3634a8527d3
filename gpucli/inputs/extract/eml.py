"""E-mail (.eml, RFC 5322) with the stdlib's email package (policy=default: headers decoded
from RFC 2047, bodies from their transfer encoding and charset).

The text is the Subject, From, To and Date headers, one "Name: value" line each, then the
text/plain parts; where a message has no plain part, its text/html parts through the HTML
extractor. Attachments (and messages attached to it) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.htmltext import html_to_text
from gpucli.inputs.extract.layout import join_lines, join_paragraphs

HEADERS = ("Subject", "From", "To", "Date")


def extract_eml(data: bytes) -> Document:
    """Headers, then the body text; no pages."""
    message = message_from_bytes(data, policy=policy.default)
    if not message.keys():
        raise InputError(Stage.DECODE, "not a valid e-mail file (no headers)")
    parts = list(_text_parts(message))
    plain = [_content(part) for part in parts if part.get_content_type() == "text/plain"]
    bodies = plain or [html_to_text(_content(part)) for part in parts if part.get_content_type() == "text/html"]
    return Document(join_paragraphs([_headers(message), *bodies]))


def _headers(message: EmailMessage) -> str:
    return join_lines(f"{name}: {value}" for name in HEADERS if (value := _header(message, name)))


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except Exception:  # noqa: BLE001 - a malformed address header can fail to parse: leave it out
        return ""
    return " ".join(str(value).split()) if value is not None else ""


def _text_parts(part: EmailMessage) -> Iterator[EmailMessage]:
    """The text/* leaves that are not attachments; attached parts are not opened."""
    if part.get_content_disposition() == "attachment":
        return
    if part.is_multipart():
        for child in part.iter_parts():
            yield from _text_parts(child)
    elif part.get_content_maintype() == "text":
        yield part


def _content(part: EmailMessage) -> str:
    try:
        return part.get_content()
    except (LookupError, UnicodeError, ValueError):  # an unknown or lying charset
        payload = part.get_payload(decode=True) or b""
        return payload.decode("utf-8", errors="replace")
