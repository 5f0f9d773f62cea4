"""Bytes to text for the text formats: byte-order mark, then strict UTF-8, then detection."""

from __future__ import annotations

import codecs
import re

import charset_normalizer
import structlog

from ingest.types import ParseError

log = structlog.get_logger(__name__)

#: Western text has accented letters and typographic marks (dashes, quotes) one or two at a time
#: between ASCII letters; text of another script read as windows-1252 has runs of them.
WESTERN_MAX_RUN = 2

# UTF-32 LE must be tried before UTF-16 LE: its mark (FF FE 00 00) starts with FF FE.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# Labels that WHATWG decodes as windows-1252 (pages that say latin-1 usually mean cp1252).
_CP1252_ALIASES = frozenset({"iso8859-1", "ascii"})


def bom_encoding(data: bytes) -> tuple[str, int] | None:
    """Return ``(codec name, BOM length in bytes)`` when ``data`` starts with a Unicode BOM."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding, len(bom)
    return None


def decode_bytes(data: bytes, *, declared: str | None = None) -> str:
    """Decode ``data`` to text without losing any non-ASCII character.

    Order: a byte-order mark (UTF-8/16/32) decides; else strict UTF-8; else the ``declared``
    charset (a MIME ``charset=`` parameter or an HTML ``<meta charset>``); else the best guess
    of charset-normalizer (which recognises e.g. GB18030, Shift-JIS/cp932, cp1251), except that
    mostly-ASCII text whose few other bytes are Latin letters or typographic marks in
    windows-1252 is windows-1252 (the WHATWG fallback for undeclared Western text: a lone
    ``0x96`` is an en dash, not the Ukrainian letter charset-normalizer may guess). A guessed
    encoding is logged.

    Args:
        data: the raw bytes.
        declared: a charset label the sender declared, or ``None``.

    Returns:
        The decoded text, BOM removed; newlines and Unicode form are left as they are.

    Raises:
        ParseError: invalid bytes after a BOM, or no encoding fits (binary data).
    """
    bom = bom_encoding(data)
    if bom is not None:
        encoding, length = bom
        try:
            return data[length:].decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"invalid {encoding} after its byte-order mark at byte {exc.start + length}"
            ) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if declared:
        text = _decode_declared(data, declared)
        if text is not None:
            return text
    western = _western(data)
    if western is not None:
        log.info("decode.guessed", encoding="cp1252", rule="western")
        return western
    best = charset_normalizer.from_bytes(data).best()
    if best is None:
        raise ParseError("cannot detect the text encoding (binary data?)")
    log.warning("decode.guessed", encoding=best.encoding, rule="charset-normalizer")
    return str(best)


def _western(data: bytes) -> str | None:
    """``data`` as windows-1252 when its non-ASCII characters are Latin-1 letters or General
    Punctuation marks, never more than :data:`WESTERN_MAX_RUN` in a row; else ``None``."""
    longer_run = rb"[\x80-\xff]{%d}" % (WESTERN_MAX_RUN + 1)
    if not re.search(rb"[\x80-\xff]", data) or re.search(longer_run, data):
        return None
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    ok = all(
        ord(ch) < 0x100
        or 0x2000 <= ord(ch) <= 0x206F
        or ch in "\u20ac\u0160\u0161\u017d\u017e\u0152\u0153\u0178\u0192"
        for ch in text
        if ord(ch) >= 0x80
    )
    return text if ok else None


def _decode_declared(data: bytes, label: str) -> str | None:
    try:
        name = codecs.lookup(label.strip().lower()).name
    except LookupError:
        return None
    if name in _CP1252_ALIASES:
        name = "cp1252"
    try:
        return data.decode(name)
    except UnicodeDecodeError:
        return None
