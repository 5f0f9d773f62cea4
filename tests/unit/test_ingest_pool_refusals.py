"""A ``rag.ingest`` upsert the pool cannot serve (its source missing or outside the allowed
roots) is answered ``failed`` and recorded in the document registry with the reason, as a
parse failure is, so ``GET /v1/documents/{id}`` and a vector store's file say why; a refused
delete records nothing."""

from __future__ import annotations

from pathlib import Path

from ingest.pipeline import IngestPipeline
from ingest.types import ParseOptions
from ragstream.settings import IngestSettings, PoolSettings
from tests.unit.test_ingest_outcomes import Embed, FakeRegistry, Log, OneChunk
from tests.unit.test_model_follow import RecordingIndex
from topics.ingest import IngestRequest
from workers.pools.ingest import ingest_handler
from workers.runtime.handler import Emit


def test_a_missing_source_is_a_recorded_failure(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    settings = IngestSettings(allowed_roots=[root], upload_root=root)
    registry = FakeRegistry(Log())
    pipeline = IngestPipeline(
        OneChunk(), Embed(), RecordingIndex(), registry,  # type: ignore[arg-type]
        parse_options=ParseOptions.from_settings(settings),
    )  # fmt: skip
    handler = ingest_handler(pipeline, settings, PoolSettings())
    lost = IngestRequest(
        tenant="t", doc_id="vs_1/file-1", op="upsert", source_path=str(root / "gone.md"),
        content_type="markdown",
    )  # fmt: skip
    [result] = handler.fn([lost])
    assert isinstance(result, Emit) and result.event.status == "failed"  # type: ignore[attr-defined]
    [(tenant, doc_id, error)] = registry.failures
    assert (tenant, doc_id) == ("t", "vs_1/file-1")
    assert error.startswith("ingest failed: ") and "gone.md" in error
