"""JSON and JSON Lines: one document per record (object)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ingest.parsers.text import (
    EMPTY,
    clean_line,
    count_surrogates,
    escape_surrogates,
    first_line,
    normalize_text,
    replace_surrogates,
    surrogate_problem,
    surrogates_warning,
)
from ingest.types import MetaValue, ParsedDocument, ParseError, Section

_ID_FIELDS = ("doc_id", "id")


def parse_json(text: str, *, text_field: str = "text") -> list[ParsedDocument]:
    """Parse a JSON object, or a list of objects, into one document per object.

    Each record's ``text_field`` is its text; ``doc_id`` (else ``id``) its id; ``title`` its
    title (else its text's first line); every other field is metadata (lists and objects as
    JSON strings; lone surrogates in metadata keys and values become U+FFFD, as in text).
    Records are named "record N" (from 1) in errors.

    A record whose id holds a lone surrogate is rejected alone: it comes back with ``error``
    set and no sections (see :class:`~ingest.types.ParsedDocument`), and the other records are
    parsed as usual.

    Raises:
        ParseError: invalid JSON, a non-object record, a missing/non-string/empty text field,
            a bad or duplicate id, or no records. One such bad record fails the whole file.
    """
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"invalid JSON: {exc}") from exc
    records = value if isinstance(value, list) else [value]
    return _documents(
        ((f"record {n}", record) for n, record in enumerate(records, 1)), text_field, "json"
    )


def parse_jsonl(text: str, *, text_field: str = "text") -> list[ParsedDocument]:
    """Parse JSON Lines (one object per line, blank lines skipped), one document per line.

    Fields as in :func:`parse_json`; records are named "line N" (from 1, counting blank lines).

    Raises:
        ParseError: naming the line: invalid JSON, not an object, bad text field or id. One bad
            line fails the whole file (no partial ingest), as does a file with no records.
    """
    return _documents(_jsonl_records(text), text_field, "jsonl")


def _jsonl_records(text: str) -> Iterable[tuple[str, Any]]:
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            reason = f"{exc.msg} at column {exc.colno}"
            raise ParseError(f"line {number}: invalid JSON ({reason})") from exc
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"line {number}: invalid JSON ({exc})") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _documents(
    records: Iterable[tuple[str, Any]], text_field: str, content_type: str
) -> list[ParsedDocument]:
    documents: list[ParsedDocument] = []
    first_seen: dict[str, str] = {}
    for where, record in records:
        document = _document(where, record, text_field, content_type)
        if document.doc_id is not None:
            if document.doc_id in first_seen:
                raise ParseError(
                    f"{where}: duplicate doc_id {document.doc_id!r} "
                    f"(first in {first_seen[document.doc_id]})"
                )
            first_seen[document.doc_id] = where
        documents.append(document)
    if not documents:
        raise ParseError(EMPTY)
    return documents


def _document(where: str, record: Any, text_field: str, content_type: str) -> ParsedDocument:
    if not isinstance(record, dict):
        raise ParseError(f"{where}: expected a JSON object, got {type(record).__name__}")
    raw = record.get(text_field)
    if not isinstance(raw, str):
        problem = "is missing" if raw is None else f"is {type(raw).__name__}, not a string"
        raise ParseError(f"{where}: text field {text_field!r} {problem}")
    text = normalize_text(raw)
    if not text.strip():
        raise ParseError(f"{where}: {EMPTY}")
    doc_id, id_field = _doc_id(where, record)
    if doc_id is not None:
        bad_id = surrogate_problem(doc_id, f"{where}: {id_field}")
        if bad_id is not None:
            return ParsedDocument(
                title="",
                sections=(),
                content_type=content_type,
                doc_id=escape_surrogates(doc_id),
                error=f"{bad_id}; this record was not indexed",
            )
    title = record.get("title")
    title = clean_line(title) if isinstance(title, str) else ""
    used = {text_field, id_field, "title"} if title else {text_field, id_field}
    metadata = {
        replace_surrogates(key): _meta_value(value)
        for key, value in record.items()
        if key not in used
    }
    found = _replaced(record, used, text_field)
    return ParsedDocument(
        title=title or first_line(text),
        sections=(Section(heading_path=(), text=text),),
        content_type=content_type,
        metadata=metadata,
        doc_id=doc_id,
        warnings=tuple(surrogates_warning(n, where) for where, n in found.items()),
        surrogates=sum(found.values()),
    )


def _replaced(record: dict[str, Any], used: set[str | None], text_field: str) -> dict[str, int]:
    """How many lone surrogates the record's text, title and metadata (keys, and values as
    :func:`_meta_value` writes them) held, by where (only those with any)."""
    raw_title = record.get("title")
    meta = [
        (key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for key, value in record.items()
        if key not in used
    ]
    counts = {
        "text": count_surrogates(record[text_field]),
        "title": count_surrogates(raw_title)
        if "title" in used and isinstance(raw_title, str)
        else 0,
        "metadata": count_surrogates(*(t for pair in meta for t in pair)),
    }
    return {where: n for where, n in counts.items() if n}


def _doc_id(where: str, record: dict[str, Any]) -> tuple[str | None, str | None]:
    """Return ``(id as str, field it came from)``; ``(None, None)`` when there is none."""
    for field in _ID_FIELDS:
        value = record.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ParseError(f"{where}: {field} must be a string or an integer")
        doc_id = str(value).strip()
        if not doc_id:
            raise ParseError(f"{where}: {field} is empty")
        return doc_id, field
    return None, None


def _meta_value(value: Any) -> MetaValue:
    if isinstance(value, str):
        return replace_surrogates(value)
    if value is None or isinstance(value, int | float | bool):
        return value
    return replace_surrogates(json.dumps(value, ensure_ascii=False, sort_keys=True))
