"""A ``rag.ingest`` upsert the pool cannot serve (its source missing or outside the allowed
roots) is answered ``failed`` and recorded in the document registry with the reason, as a
parse failure is, so ``GET /v1/documents/{id}`` and a vector store's file say why; a refusal
that a later change of the same document in the batch supersedes is not recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.pipeline import IngestPipeline
from ingest.types import ParseOptions
from ragstream.settings import IngestSettings, PoolSettings
from tests.unit.test_ingest_outcomes import Embed, FakeRegistry, Log, OneChunk
from tests.unit.test_model_follow import RecordingIndex
from topics.ingest import IngestRequest
from workers.pools.ingest import ingest_handler
from workers.runtime.handler import Emit


def _handler(tmp_path: Path) -> tuple[Any, FakeRegistry, Path]:
    root = tmp_path / "root"
    root.mkdir()
    settings = IngestSettings(allowed_roots=[root], upload_root=root)
    registry = FakeRegistry(Log())
    pipeline = IngestPipeline(
        OneChunk(), Embed(), RecordingIndex(), registry,  # type: ignore[arg-type]
        parse_options=ParseOptions.from_settings(settings),
    )  # fmt: skip
    return ingest_handler(pipeline, settings, PoolSettings()), registry, root


def _lost(root: Path, doc_id: str) -> IngestRequest:
    return IngestRequest(
        tenant="t", doc_id=doc_id, op="upsert", source_path=str(root / "gone.md"),
        content_type="markdown",
    )  # fmt: skip


def test_a_missing_source_is_a_recorded_failure(tmp_path: Path) -> None:
    handler, registry, root = _handler(tmp_path)
    [result] = handler.fn([_lost(root, "vs_1/file-1")])
    assert isinstance(result, Emit) and result.event.status == "failed"  # type: ignore[attr-defined]
    [(tenant, doc_id, error)] = registry.failures
    assert (tenant, doc_id) == ("t", "vs_1/file-1")
    assert error.startswith("ingest failed: ") and "gone.md" in error


def test_a_refusal_a_later_change_supersedes_is_not_recorded(tmp_path: Path) -> None:
    handler, registry, root = _handler(tmp_path)
    text = IngestRequest(
        tenant="t", doc_id="d", op="upsert", text="# D\n\nnow readable", content_type="markdown"
    )
    results = handler.fn([_lost(root, "d"), text])
    statuses = sorted(r.event.status for r in results if isinstance(r, Emit))  # type: ignore[attr-defined]
    assert statuses == ["failed", "indexed"] and registry.failures == []
