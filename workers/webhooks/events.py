"""Webhook event types, their payloads and stable webhook ids (pure functions, no I/O).

Every payload has the Standard Webhooks shape ``{"type", "timestamp", "data"}``:

- ``query.completed``: one per ``request_id``, when the query log records its first final
  response; ``data`` renders its answer view (:class:`topics.answers.Answer`): the request id,
  tenant, the question as asked (``query``), status (``answered`` or ``failed``), answer
  (``null`` on a failure), citations, evidence spans with their offsets, truncated flag, typed
  error, answer tier, token usage, whether it was cached, and a trace summary (per-stage ms);
- ``ingest.job.completed``: when a bulk job reaches a final status; ``data`` holds the job id,
  status, document and chunk counts and the first :data:`MAX_JOB_FAILURES` failed documents.

A webhook id is ``msg_`` + the first 32 hex digits of SHA-256 over (event type, tenant,
subject, target URL). The subject is the request id, or the job id with its final outcome, so
a replayed answer or a re-announced job maps to the same id, finds the existing delivery and
sends nothing new, while receivers can de-duplicate on the ``webhook-id`` header.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any, Final

from ragstream.db.models import IngestJob, as_utc
from topics.answers import Answer
from topics.responses import QueryResponse

QUERY_COMPLETED: Final = "query.completed"
INGEST_JOB_COMPLETED: Final = "ingest.job.completed"
#: Every event type a tenant may subscribe to; ``*`` subscribes to all of them.
EVENT_TYPES: Final = (QUERY_COMPLETED, INGEST_JOB_COMPLETED)
WILDCARD: Final = "*"
#: Failed documents listed in an ``ingest.job.completed`` payload (the rest are counted).
MAX_JOB_FAILURES: Final = 100
#: The answer view's fields a ``query.completed`` payload carries as they are (its ``trace``
#: is summarised; the query log's times stay in the log).
WEBHOOK_FIELDS: Final = (
    "request_id", "tenant", "query", "status", "answer", "citations", "evidence", "truncated",
    "error", "tier", "usage", "cached", "refused",
)  # fmt: skip


def webhook_id(event_type: str, tenant: str, subject: str, url: str) -> str:
    """The stable id of one logical delivery: ``msg_<32 hex>`` (36 characters).

    Args:
        event_type: e.g. ``query.completed``.
        tenant: the tenant the event belongs to.
        subject: what the event is about (a request id; a job id and its outcome).
        url: the target URL exactly as it will be posted to.
    """
    material = "\x1f".join((event_type, tenant, subject, url)).encode()
    return "msg_" + hashlib.sha256(material).hexdigest()[:32]


def _iso(value: dt.datetime) -> str:
    return as_utc(value).isoformat().replace("+00:00", "Z")


def query_completed(response: QueryResponse, query: str = "") -> dict[str, Any]:
    """The ``query.completed`` payload of a final response, rendered from its answer view
    (:meth:`topics.answers.Answer.of`); ``query`` is the question as asked (the query log's,
    ``""`` when the log has none, e.g. a response whose request was never logged).

    ``timestamp`` is the response event's ``created_at`` (so the payload is the same whenever
    it is built); ``data.trace`` is ``{"stages": [{"stage", "duration_ms"}], "total_ms"}``.
    """
    answer = Answer.of(response, query=query)
    view = answer.model_dump(mode="json")
    stages = [{"stage": t.stage, "duration_ms": round(t.duration_ms, 3)} for t in answer.trace]
    return {
        "type": QUERY_COMPLETED,
        "timestamp": _iso(response.created_at),
        "data": {
            **{k: view[k] for k in WEBHOOK_FIELDS},
            "trace": {"stages": stages, "total_ms": round(answer.total_ms, 3)},
        },
    }


def job_subject(job: IngestJob) -> str:
    """Subject of a job's completion: the job id and its outcome.

    A job that a retry brings to a different outcome is announced again (a new id); the same
    outcome announced twice (a redelivered task, a racing batch) is one delivery.
    """
    return f"{job.id}:{job.status}:{job.done_documents}:{job.failed_documents}:{job.chunk_count}"


def ingest_job_completed(job: IngestJob, failures: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The ``ingest.job.completed`` payload of a finished job.

    Args:
        job: the job row, in a final status.
        failures: ``(path, error)`` of failed documents; the first :data:`MAX_JOB_FAILURES`
            are listed, ``failures_truncated`` says whether there were more.
    """
    when = job.finished_at or job.created_at
    return {
        "type": INGEST_JOB_COMPLETED,
        "timestamp": _iso(when),
        "data": {
            "job_id": job.id,
            "tenant": job.tenant,
            "status": job.status,
            "total_documents": job.total_documents,
            "done_documents": job.done_documents,
            "failed_documents": job.failed_documents,
            "chunk_count": job.chunk_count,
            "error": job.error,
            "failures": [
                {"path": path, "error": error} for path, error in failures[:MAX_JOB_FAILURES]
            ],
            "failures_truncated": len(failures) > MAX_JOB_FAILURES,
        },
    }
