"""Document parsers: bytes of text, Markdown, HTML, PDF, DOCX, JSON or JSONL to ``ParsedDocument``.

Use :func:`parse`; it picks the parser (see :func:`detect_content_type`) and raises only
:class:`~ingest.types.ParseError` for bad input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ingest.parsers.decoding import decode_bytes
from ingest.parsers.definitions import section_definitions
from ingest.parsers.detect import ContentType, detect_content_type, detect_upload, mime_charset
from ingest.parsers.html import parse_html
from ingest.parsers.markdown import parse_markdown
from ingest.parsers.pdf import parse_pdf
from ingest.parsers.records import parse_json, parse_jsonl
from ingest.parsers.text import EMPTY, parse_text
from ingest.parsers.word import parse_docx
from ingest.types import ParsedDocument, ParseError

#: Parsers of formats read from bytes, not decoded text.
_BINARY: dict[str, Callable[[bytes], ParsedDocument]] = {"pdf": parse_pdf, "docx": parse_docx}

__all__ = ["ContentType", "ParseError", "detect_content_type", "detect_upload", "parse"]


def parse(
    data: bytes,
    *,
    filename: str | None = None,
    content_type: str | None = None,
    json_text_field: str = "text",
) -> list[ParsedDocument]:
    """Parse one file or payload into documents.

    Text formats are decoded (BOM, else strict UTF-8, else a declared charset, else
    charset-normalizer), newlines become ``\\n``, NUL characters go, Unicode becomes NFC and runs
    of blank lines collapse; no non-ASCII character is dropped.

    Args:
        data: the raw bytes.
        filename: the file's name or path, used for its extension when ``content_type`` is
            ``None`` (and in error messages).
        content_type: a MIME type (its ``charset`` parameter is honoured) or a short name:
            text, markdown, html, pdf, docx, json, jsonl.
        json_text_field: the field holding each JSON/JSONL record's text.

    Returns:
        One document for text, Markdown, HTML, PDF and DOCX; one per record for JSON (an object or a
        list of objects) and JSONL (one object per non-blank line), each with ``doc_id`` from
        the record's ``doc_id``/``id`` field when present. ``content_type`` of each document
        is the short name of its format.

    Raises:
        ParseError: unsupported type, undecodable, corrupt or encrypted, or "document is
            empty"; for JSON/JSONL, one bad record or line (named in the message) fails the
            whole file, except a record whose id holds a lone surrogate, which is returned
            rejected (``error`` set) while the others are parsed. Any other exception of a
            parser is wrapped in a ParseError, except MemoryError, which is not a property of
            the input.
    """
    if not data.strip():
        raise ParseError(EMPTY)
    kind = "document"
    try:
        kind = detect_content_type(data, filename=filename, content_type=content_type)
        return _parse_as(kind, data, mime_charset(content_type), json_text_field)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:
        raise ParseError(f"cannot parse {kind}: {type(exc).__name__}: {exc}") from exc


def _parse_as(
    kind: ContentType, data: bytes, charset: str | None, json_text_field: str
) -> list[ParsedDocument]:
    if kind in _BINARY:
        return [_with_section_definitions(_BINARY[kind](data))]
    if kind == "html":
        return [parse_html(data, charset=charset)]
    text = decode_bytes(data, declared=charset)
    if kind == "markdown":
        return [_with_section_definitions(parse_markdown(text))]
    if kind == "json":
        return parse_json(text, text_field=json_text_field)
    if kind == "jsonl":
        return parse_jsonl(text, text_field=json_text_field)
    return [_with_section_definitions(parse_text(text))]


def _with_section_definitions(doc: ParsedDocument) -> ParsedDocument:
    """``doc`` with the definition entries of its sections (definition lists, "name —
    summary" headings: :func:`ingest.parsers.definitions.section_definitions`)."""
    return dataclasses.replace(doc, definitions=section_definitions(doc.sections))
