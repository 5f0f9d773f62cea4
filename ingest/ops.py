"""One way to turn a source into an ingest operation, for every path of the write path.

A source is inline text (``POST /v1/documents`` as JSON, an ``IngestRequest`` with ``text``), an
uploaded file (``POST /v1/documents`` as multipart) or a server-side path (an ``IngestRequest``
with ``source_path``, a bulk job's item from the API, the CLI or an archive).
:func:`prepare_op` makes the :class:`IngestOp` of each, with the ingest settings; the API's
check, the ingest pool (:func:`op_from_request`) and the Celery task (:func:`op_from_item`) all
call it, and :func:`parse_op` is the one parse of an op (the pipeline's and the API check's),
with the settings' :class:`~ingest.types.ParseOptions` (``ingest.json_text_field``).

Parse once: the API parses an upload to refuse a bad one before answering 202 and stores that
parse beside the upload (:func:`ingest.uploads.store_document`); when the pool prepares the op
of the stored file, :func:`prepare_op` picks the stored parse up (same bytes, same parse
options), so the pool does not parse the file again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from ingest.parsers import parse
from ingest.sources import read_source
from ingest.types import MetaValue, ParsedDocument, ParseOptions
from ingest.uploads import stored_parse
from ragstream.db.models import IngestJobItem
from ragstream.settings import IngestSettings
from topics.acl import normalise_readers
from topics.ingest import IngestRequest


@dataclass(frozen=True, slots=True)
class IngestOp:
    """One upsert (raw ``data`` bytes of a file or inline text), delete or permission change
    (``acl``) of a document.

    ``parsed``: the documents of ``data`` when they were parsed already (by the API's check,
    or read back from the parse stored beside an upload); ``None``: the pipeline parses ``data``
    (:func:`parse_op`). ``principals``: the document's readers (:mod:`topics.acl`); on an
    upsert ``None`` keeps the readers it has (a new document: everyone of the tenant); on an
    ``acl``, ``None`` makes it readable by everyone of the tenant. ``sent_at``: when its
    producer says it sent it (the event's ``created_at``, UTC): refused when too far in the
    future, and ordering nothing (:mod:`ingest.order`); ``None`` on the batch path.
    ``event_id``: the ``rag.ingest`` event's id (a copy of an applied event is not applied
    again); ``None`` on the batch path. ``warnings`` and ``surrogates``: what the pipeline
    repaired in its title, source and metadata (lone surrogates replaced), as on
    :class:`~ingest.types.ParsedDocument`.
    """

    tenant: str
    doc_id: str
    op: Literal["upsert", "delete", "acl"] = "upsert"
    data: bytes = b""
    filename: str | None = None
    content_type: str | None = None
    source: str | None = None
    title: str | None = None
    metadata: dict[str, MetaValue] = field(default_factory=dict)
    parsed: tuple[ParsedDocument, ...] | None = None
    principals: tuple[str, ...] | None = None
    sent_at: dt.datetime | None = None
    event_id: str | None = None
    warnings: tuple[str, ...] = ()
    surrogates: int = 0


@dataclass(frozen=True, slots=True)
class InlineText:
    """Text sent in the request itself; ``content_type`` defaults to ``text``."""

    text: str
    content_type: str | None = None


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """The bytes of an uploaded file, its (base) name and its format (as sniffed)."""

    data: bytes
    filename: str | None
    content_type: str | None


@dataclass(frozen=True, slots=True)
class SourcePath:
    """A file on the server, under one of ``ingest.allowed_roots``."""

    path: str
    content_type: str | None = None


Source = InlineText | UploadedFile | SourcePath


def parse_op(op: IngestOp, options: ParseOptions) -> tuple[ParsedDocument, ...]:
    """The documents of ``op``: ``op.parsed`` when set, else ``op.data`` parsed with ``options``.

    Raises:
        ParseError: as :func:`ingest.parsers.parse` (unsupported, corrupt, empty...).
    """
    if op.parsed is not None:
        return op.parsed
    return tuple(
        parse(
            op.data,
            filename=op.filename,
            content_type=op.content_type,
            json_text_field=options.json_text_field,
        )
    )


def prepare_op(
    tenant: str,
    doc_id: str,
    source: Source,
    settings: IngestSettings,
    *,
    title: str | None = None,
    label: str | None = None,
    metadata: Mapping[str, MetaValue] | None = None,
    principals: tuple[str, ...] | None = None,
    parse_now: bool = False,
) -> IngestOp:
    """The upsert of ``source`` as document ``(tenant, doc_id)``.

    Args:
        tenant, doc_id: the document.
        source: where its bytes are (see the module docstring).
        settings: the ingest settings: allowed roots, size limit, parse options.
        title, metadata: the caller's (the parser's title and metadata fill what is missing).
        label: the document's ``source`` field; defaults to a path source's path.
        principals: its readers (normalised, :func:`topics.acl.normalise_readers`); ``None``:
            keep the readers it has (a new document: everyone of the tenant).
        parse_now: parse here (the API's check) instead of in the pipeline.

    Returns:
        The op; its ``parsed`` is set when ``parse_now``, or when ``source`` is an upload
        stored with its parse (:func:`ingest.uploads.stored_parse`) under the same options.

    Raises:
        SourceRejectedError: a path outside the allowed roots, missing, unreadable or too big.
        ParseError: with ``parse_now``, the source does not parse.
    """
    parsed: tuple[ParsedDocument, ...] | None = None
    filename: str | None = None
    content_type: str | None
    if isinstance(source, InlineText):
        data, content_type = source.text.encode(), source.content_type or "text"
    elif isinstance(source, UploadedFile):
        data, content_type, filename = source.data, source.content_type, source.filename
    else:
        data = read_source(source.path, settings.allowed_roots, settings.max_document_bytes)
        content_type, filename = source.content_type, source.path
        label = label or source.path
        parsed = stored_parse(settings, tenant, source.path, data)
    op = IngestOp(
        tenant,
        doc_id,
        "upsert",
        data=data,
        filename=filename,
        content_type=content_type,
        source=label,
        title=title,
        metadata=dict(metadata or {}),
        parsed=parsed,
        principals=principals,
    )
    if parse_now and op.parsed is None:
        op = replace(op, parsed=parse_op(op, ParseOptions.from_settings(settings)))
    return op


def op_from_request(event: IngestRequest, settings: IngestSettings) -> IngestOp:
    """The op of a ``rag.ingest`` event (the ingest pool): ``sent_at`` its ``created_at``,
    ``event_id`` its ``event_id``.

    Raises:
        SourceRejectedError: ``source_path`` is outside the allowed roots or unreadable.
    """
    sent_at, event_id = event.created_at, event.event_id
    if event.op == "delete":
        return IngestOp(event.tenant, event.doc_id, "delete", sent_at=sent_at, event_id=event_id)
    principals = normalise_readers(event.principals)
    if event.op == "acl":
        return IngestOp(
            event.tenant,
            event.doc_id,
            "acl",
            principals=principals,
            sent_at=sent_at,
            event_id=event_id,
        )
    source: Source
    if event.text is not None:
        source = InlineText(event.text, event.content_type)
    else:
        assert event.source_path is not None  # the event's validator: exactly one of the two
        source = SourcePath(event.source_path, event.content_type)
    op = prepare_op(
        event.tenant,
        event.doc_id,
        source,
        settings,
        title=event.title,
        label=event.source,
        metadata=event.metadata,
        principals=principals,
    )
    return replace(op, sent_at=sent_at, event_id=event_id)


def op_from_item(
    tenant: str,
    item: IngestJobItem,
    settings: IngestSettings,
    readers: tuple[str, ...] | None = None,
) -> IngestOp:
    """The op of one item of a bulk job (the Celery task); ``doc_id`` defaults to its path and
    is the document's ``source`` (an archive's member: ``<archive>/<member>``, never the
    server's folder); ``readers``: the job's (every document of a job gets them; ``None``:
    keep / everyone).

    Raises:
        SourceRejectedError: the item's path is outside the allowed roots or unreadable.
    """
    doc_id = item.doc_id or item.path
    op = prepare_op(
        tenant,
        doc_id,
        SourcePath(item.path),
        settings,
        title=item.title,
        label=doc_id,
        metadata=item.metadata_ or {},
        principals=readers,
    )
    # An archive's member is filed under its name in the archive, not the server's folder.
    return op if doc_id == item.path else replace(op, filename=doc_id)
