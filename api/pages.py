"""Cursor pagination of the list endpoints (``GET /v1/documents``, ``/v1/ingest/jobs``,
``/v1/queries``) and their page bodies.

A cursor is opaque to clients: the URL-safe base64 of the JSON sort key of the last item of a
page (keyset pagination, so a page never repeats or skips rows that existed when the first
page was read, however many rows are added meanwhile). Pass ``next_cursor`` back as
``cursor`` for the next page; ``null`` means the last page was reached.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from typing import Any

from pydantic import BaseModel, Field

from api.feedback_models import FeedbackTally
from api.models import DocumentOut, UtcDateTime

#: Items per page: the default and the most a client may ask for.
DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def encode_cursor(key: list[Any]) -> str:
    """The opaque cursor of a sort key (JSON scalars; datetimes as ISO 8601)."""
    plain = [v.isoformat() if isinstance(v, dt.datetime) else v for v in key]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, kinds: tuple[type, ...]) -> tuple[Any, ...] | None:
    """The sort key of ``cursor`` (``None`` for the first page), each value of its kind in
    ``kinds`` (``int``, ``str`` or ``dt.datetime``).

    Raises:
        ApiError: 422 ``INVALID_REQUEST`` for a cursor this API did not hand out.
    """
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(values, list) or len(values) != len(kinds):
            raise ValueError("wrong length")
        out: list[Any] = []
        for value, kind in zip(values, kinds, strict=True):
            if kind is dt.datetime:
                out.append(dt.datetime.fromisoformat(value))
            elif _valid(value, kind):
                out.append(value)
            else:
                raise ValueError("wrong type")
        return tuple(out)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        from api.errors import ApiError  # FastAPI: not for the HTTP client's page models

        raise ApiError(422, "INVALID_REQUEST", "cursor: not a cursor of this list") from exc


def _valid(value: Any, kind: type) -> bool:
    """A 64-bit row id, or a string a SQL driver takes (no NUL)."""
    if kind is int:
        return type(value) is int and 0 <= value < 2**63
    return type(value) is str and "\x00" not in value


class DocumentPage(BaseModel):
    """One page of the tenant's documents, newest first."""

    items: list[DocumentOut]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor`; null: last.")


class JobSummary(BaseModel):
    """A bulk ingest job in a list (``GET /v1/ingest/jobs/{id}`` has its failures)."""

    job_id: str
    status: str
    total_documents: int
    done_documents: int
    failed_documents: int
    chunk_count: int
    error: str | None = None
    created_at: UtcDateTime
    started_at: UtcDateTime | None = None
    finished_at: UtcDateTime | None = None
    links: dict[str, str] = Field(default_factory=dict)


class JobPage(BaseModel):
    """One page of the tenant's bulk ingest jobs, newest first."""

    items: list[JobSummary]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor`; null: last.")


class QuerySummary(BaseModel):
    """A logged query in a list (``GET /v1/queries/{id}`` has its answer)."""

    request_id: str
    query: str = Field(
        description="The question answered: a follow-up made standalone from the earlier "
        "questions (`<question> | context: <earlier questions>`), as a replay asks it."
    )
    question: str = Field(
        default="", description="The question as the user typed it (what a list shows)."
    )
    status: str
    tier: str = ""
    error_code: str | None = None
    created_at: UtcDateTime
    completed_at: UtcDateTime | None = None
    feedback: FeedbackTally = Field(
        default_factory=FeedbackTally,
        description="How many keys found the answer helpful and not "
        "(`POST /v1/queries/{id}/feedback`).",
    )
    links: dict[str, str] = Field(default_factory=dict)


class QueryPage(BaseModel):
    """One page of the tenant's logged queries, newest first."""

    items: list[QuerySummary]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor`; null: last.")
