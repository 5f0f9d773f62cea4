"""The ingest pool (stream path): ``rag.ingest`` requests in, one ``rag.ingest.results`` each.

Upserts carry inline text or a source path under an allowed root; deletes carry neither. Each
becomes an op through :func:`ingest.ops.op_from_request`, as a bulk job's items do in the
Celery task (an upload checked by the API comes with the API's parse, not parsed again). A
request that cannot be served (path outside the roots, unparsable file) becomes a ``failed``
result with the reason: it is answered, not dead-lettered, and an upsert's failure is recorded
in the document registry as a parse failure is (``GET /v1/documents/{id}`` and a vector
store's file status say why). Elasticsearch being unreachable is
transient: the batch is retried and not committed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ingest.ops import IngestOp, op_from_request
from ingest.outcome import IngestOutcome
from ingest.pipeline import IngestPipeline
from ingest.sources import SourceRejectedError
from ragstream.settings import IngestSettings, PoolSettings, Settings
from topics.ingest import IngestRequest, IngestResult
from topics.registry import INGEST, INGEST_RESULTS
from workers.registry import register_pool
from workers.runtime.build import pool_handler
from workers.runtime.handler import Emit, Handler, Outcome, derive_event_id


def result_event(event: IngestRequest, outcome: IngestOutcome) -> IngestResult:
    """The result event of one document outcome (id derived from the request's id)."""
    return IngestResult(
        event_id=derive_event_id(event.event_id, f"ingest:{outcome.doc_id}"),
        tenant=event.tenant,
        doc_id=outcome.doc_id,
        request_event_id=event.event_id,
        status=outcome.status,
        version=outcome.version,
        chunk_count=outcome.chunk_count,
        error=outcome.error,
        timings_ms=outcome.timings_ms,
        trace=event.trace,
    )


def ingest_handler(
    pipeline: IngestPipeline, settings: IngestSettings, pool: PoolSettings, group: str | None = None
) -> Handler[IngestRequest]:
    """The ingest pool's handler: one batched :meth:`IngestPipeline.apply` per batch."""

    def fn(events: list[IngestRequest]) -> Sequence[Outcome]:
        out: list[Outcome] = []
        ops: list[IngestOp] = []
        served: list[IngestRequest] = []
        refused: dict[tuple[str, str], str] = {}  # the last change of a document, if refused
        for e in events:
            try:
                ops.append(op_from_request(e, settings))
                served.append(e)
                refused.pop((e.tenant, e.doc_id), None)  # a later change supersedes it
            except SourceRejectedError as exc:
                failed = IngestOutcome(e.tenant, e.doc_id, "failed", error=str(exc))
                out.append(Emit(INGEST_RESULTS, result_event(e, failed)))
                if e.op == "upsert":
                    refused[(e.tenant, e.doc_id)] = f"ingest failed: {exc}"
        for e, outcomes in zip(served, pipeline.apply(ops), strict=True):
            out.extend(Emit(INGEST_RESULTS, result_event(e, o)) for o in outcomes)
        pipeline.registry.record_failures([(t, d, why) for (t, d), why in refused.items()])
        return out

    return pool_handler(
        "ingest", input=INGEST, outputs=(INGEST_RESULTS,), fn=fn, pool=pool, group=group
    )


def run_ingest_pool(settings: Settings) -> Callable[[], None]:
    """Pool factory of ``ragstream worker ingest``."""
    from ingest.factory import build_pipeline
    from workers.runtime.build import build_runner, pool_group, until_signalled

    pool = settings.pools.ingest
    pipeline = build_pipeline(settings)
    handler = ingest_handler(pipeline, settings.ingest, pool, group=pool_group(settings, "ingest"))
    runner = build_runner(handler, settings, pool)
    return until_signalled(runner)


register_pool("ingest", run_ingest_pool)
