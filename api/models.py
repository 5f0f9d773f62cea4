"""Request and response bodies of the HTTP API (they make the OpenAPI spec)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, Strict

from api.bodies import Body
from ragstream.clock import as_utc
from topics.acl import Readers
from topics.answers import Answer, AnswerStatus
from topics.ingest import DOC_ID_PATTERN
from topics.queries import Filter

#: A timestamp of a response: RFC 3339 with its offset, always UTC (SQLite hands back naive
#: datetimes; they are UTC and are sent with ``+00:00``, never without an offset).
UtcDateTime = Annotated[dt.datetime, AfterValidator(as_utc)]

Mode = Literal["sync", "async"]
#: The answer tier a query may force (``auto``: the router picks); the Python clients take it too.
Route = Literal["auto", "evidence", "small", "large"]
#: A callback URL the SSRF guard can check: ``http(s)://`` and a host, no spaces or controls.
CALLBACK_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\x00-\x20\x7f/?#@]+([/?#][^\x00-\x20\x7f]*)?$"


#: Readers as a body states them: a JSON array (FastAPI validates the decoded body, where an array
#: is a Python list, which strict mode refuses as a tuple).
ReadersIn = Annotated[Readers, Strict(False)]


class HistoryTurn(Body):
    """An earlier turn of ``history``: the question asked then and the answer shown for it."""

    question: str = Field(min_length=1, max_length=4000, pattern=r"^[^\x00]*$")
    answer: str = Field(default="", max_length=8000, pattern=r"^[^\x00]*$")


class QueryBody(Body):
    """``POST /v1/query``.

    ``mode="sync"`` (default) waits up to ``timeout_s`` (server default and cap apply) and
    answers 200 with the answer, or 202 while it is still pending; ``mode="async"`` answers 202
    at once. ``stream=true`` answers ``text/event-stream`` instead (see the route).
    """

    query: str = Field(
        min_length=1, max_length=4000, pattern=r"^[^\x00]*$", description="The question."
    )
    top_n: int | None = Field(default=None, ge=1, le=200, description="Candidates retrieved.")
    top_k: int | None = Field(default=None, ge=1, le=50, description="Passages kept.")
    filters: list[Filter] = Field(default_factory=list, max_length=20)
    route: Route = "auto"
    mode: Mode = "sync"
    stream: bool = False
    timeout_s: float | None = Field(default=None, gt=0, le=600, description="Sync wait, s.")
    callback_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=CALLBACK_URL,
        description="Signed webhook target for the answer: an http(s) URL whose host resolves "
        "to addresses webhooks may reach (else 422 naming RAGSTREAM_WEBHOOKS__ALLOW_NETWORKS).",
    )
    history: list[Annotated[str, Field(max_length=4000)] | HistoryTurn] = Field(
        default_factory=list,
        max_length=20,
        description="Earlier turns of the conversation, oldest first: each the question asked "
        "(a string) or `{question, answer}` with the answer that was shown. A follow-up such "
        "as 'And how do I change it?' is answered as the standalone question the earlier "
        "questions make of it, and never with the last turn's answer again. Travels on the "
        "query event as `conversation`; `query` stays as typed.",
    )


class CitationOut(BaseModel):
    """A cited passage; ``n`` is its ``[n]`` in the answer."""

    n: int
    doc_id: str
    chunk_id: str
    title: str = ""
    source: str = ""


class EvidenceOut(BaseModel):
    """A quoted span the answer rests on: ``n`` is its passage's ``[n]``; ``start``/``end`` are
    character offsets into that chunk's text."""

    n: int
    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str
    context: str = ""
    title: str = ""
    source: str = ""
    score: float = 0.0


class ErrorOut(BaseModel):
    """Why a query failed."""

    code: str
    message: str
    stage: str = ""


class StageOut(BaseModel):
    """One stage's timing from the event trace (ms)."""

    stage: str
    duration_ms: float
    wait_ms: float | None = Field(
        default=None,
        description="Time the query waited for this stage (Kafka hop, queue, batching), ms; "
        "null for a stage run right after the previous one in the same process.",
    )
    detail: dict[str, Any] = Field(default_factory=dict)


class QueryResult(BaseModel):
    """The state of a query: ``pending``, ``answered`` or ``failed``.

    The HTTP form of the answer view (:class:`topics.answers.Answer`): the same fields, plus
    ``latency_ms`` and ``links``; built only by :meth:`render`.
    """

    request_id: str
    tenant: str = ""
    query: str = Field(default="", description="The question as asked (when known).")
    status: AnswerStatus
    answer: str | None = None
    citations: list[CitationOut] = Field(default_factory=list)
    evidence: list[EvidenceOut] = Field(
        default_factory=list, description="Quoted spans of the cited passages, best first."
    )
    truncated: bool = Field(
        default=False, description="The LLM's answer hit its token limit and was cut."
    )
    degraded: list[str] = Field(
        default_factory=list,
        description="Steps left out because a pool was behind ('propose': the name proposer "
        "was shed under load); empty for a full answer.",
    )
    tier: str = ""
    error: ErrorOut | None = None
    trace: list[StageOut] = Field(default_factory=list)
    usage: dict[str, int] = Field(default_factory=dict)
    cached: bool = False
    refused: bool = Field(
        default=False,
        description="The answer is the refusal: the documents do not contain the answer.",
    )
    latency_ms: float | None = Field(default=None, description="Time in the API, ms.")
    created_at: UtcDateTime | None = None
    completed_at: UtcDateTime | None = None
    links: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def render(
        cls,
        answer: Answer,
        *,
        latency_ms: float | None = None,
        links: dict[str, str] | None = None,
    ) -> QueryResult:
        """The HTTP form of ``answer`` (the one place a public query result is built)."""
        fields = answer.model_dump(mode="json")
        return cls.model_validate({**fields, "latency_ms": latency_ms, "links": links or {}})


class DocumentBody(Body):
    """``POST /v1/documents``: upsert one document from inline text (stream path)."""

    doc_id: str = Field(min_length=1, max_length=512, pattern=DOC_ID_PATTERN)
    text: str = Field(min_length=1, max_length=1_000_000)
    content_type: Literal["text/plain", "text/markdown", "text/html"] = "text/plain"
    title: str | None = Field(default=None, max_length=1024, pattern=r"^[^\x00]*$")
    source: str | None = Field(default=None, max_length=2048, pattern=r"^[^\x00]*$")
    metadata: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, max_length=64
    )
    #: Who may read it (``user:<id>``/``group:<id>``); absent: keep its readers (a new
    #: document: everyone of the tenant). See docs/permissions.md.
    readers: ReadersIn | None = None


class ReadersBody(Body):
    """``PUT /v1/readers/{doc_id}``: who may read the document from now on;
    ``null``: everyone of the tenant."""

    readers: ReadersIn | None


class DocumentAccepted(BaseModel):
    """The upsert, delete or readers event was durably produced; it applies asynchronously."""

    doc_id: str
    op: Literal["upsert", "delete", "acl"]
    event_id: str
    status: Literal["accepted"] = "accepted"
    links: dict[str, str] = Field(default_factory=dict)


class RejectedEvent(BaseModel):
    """A ``rag.ingest`` event of a document that the write path did not apply
    (``docs/write-path.md``, section "Order")."""

    event_id: str = Field(description="The event's `event_id`.")
    status: str = Field(
        description="Its outcome on `rag.ingest.results`: `duplicate` (a copy of an event "
        "applied already) or `refused` (its `created_at` beyond `ingest.max_clock_skew_s` "
        "in the future)."
    )
    reason: str = Field(description="Why, as that result's `error` says it.")
    at: UtcDateTime = Field(description="When the write path screened it out (its clock, UTC).")


class DocumentOut(BaseModel):
    """A document of the registry."""

    doc_id: str
    status: str
    version: int
    chunk_count: int
    title: str | None = None
    source: str | None = None
    error: str | None = None
    #: What ingest repaired in its input, one line each (e.g. lone surrogates in a record's
    #: text replaced by U+FFFD: those characters are lost); empty: nothing.
    warnings: list[str] = Field(default_factory=list)
    updated_at: UtcDateTime | None = None
    #: Who may read it; ``None``: everyone of the tenant.
    readers: list[str] | None = None
    #: How many changes were applied to it, in the order the write path applied them
    #: (``docs/write-path.md``); 0: none recorded.
    sequence: int = 0
    #: The ``event_id`` of the newest ``rag.ingest`` event applied to it (``None``: its last
    #: change came from a bulk job), and when that change was applied (UTC). The API's own
    #: writes (``DELETE``, ``PUT /v1/readers``) are never dropped: they apply in order.
    last_event_id: str | None = None
    last_event_at: UtcDateTime | None = None
    last_rejected: RejectedEvent | None = Field(
        default=None,
        description="The last `rag.ingest` event of this document the write path did not "
        "apply (a `duplicate` or `refused` result on `rag.ingest.results`), or `null`: none "
        "recorded. Kept when a later change applies (compare its `at` with `last_event_at`); "
        "an event refused before the document existed is only on `rag.ingest.results`.",
    )


class JobBody(Body):
    """``POST /v1/ingest/jobs``: paths on the server, under the allowed roots; ``readers``:
    who may read every document of the job (absent: keep / everyone of the tenant)."""

    paths: list[str] = Field(min_length=1, max_length=100)
    callback_url: str | None = Field(default=None, max_length=2048, pattern=CALLBACK_URL)
    readers: ReadersIn | None = None


class JobFailure(BaseModel):
    """One document that failed, with its reason."""

    path: str
    error: str


class JobOut(BaseModel):
    """Progress of a bulk ingest job."""

    job_id: str
    status: str
    total_documents: int
    done_documents: int
    failed_documents: int
    chunk_count: int
    error: str | None = None
    failures: list[JobFailure] = Field(default_factory=list)
    links: dict[str, str] = Field(default_factory=dict)
