"""Top-K selection after rerank: order, stable ties, per-document cap, copies; factory."""

from __future__ import annotations

import pytest

from ragstream.errors import ConfigurationError
from ragstream.settings import RerankSettings
from topics.retrieved import Candidate
from workers.rerank.backends import CrossEncoderReranker, LlmReranker, NoneReranker, Reranker
from workers.rerank.factory import make_reranker
from workers.rerank.select import select_top_k


def _cands(docs: str) -> list[Candidate]:
    return [
        Candidate(chunk_id=f"c{i}", doc_id=d, text=f"text {i}", score=1.0 / (i + 1))
        for i, d in enumerate(docs)
    ]


def test_descending_score_order_with_rerank_score_set() -> None:
    cands = _cands("abcd")
    out = select_top_k(cands, [0.1, 0.9, 0.5, 0.7], k=3, max_per_doc=2)
    assert [c.chunk_id for c in out] == ["c1", "c3", "c2"]
    assert [c.rerank_score for c in out] == [0.9, 0.7, 0.5]
    assert all(c.rerank_score is None for c in cands)  # inputs untouched (copies returned)


def test_ties_keep_the_original_rank() -> None:
    out = select_top_k(_cands("abcd"), [0.5, 0.5, 0.9, 0.5], k=4, max_per_doc=2)
    assert [c.chunk_id for c in out] == ["c2", "c0", "c1", "c3"]


def test_per_document_cap_lets_the_next_document_in() -> None:
    cands = _cands("aaab")
    out = select_top_k(cands, [0.9, 0.8, 0.7, 0.1], k=3, max_per_doc=2)
    assert [c.chunk_id for c in out] == ["c0", "c1", "c3"]
    out = select_top_k(cands, [0.9, 0.8, 0.7, 0.1], k=3, max_per_doc=1)
    assert [c.chunk_id for c in out] == ["c0", "c3"]


def test_k_larger_than_candidates_and_zero() -> None:
    assert len(select_top_k(_cands("abc"), [1, 2, 3], k=10, max_per_doc=5)) == 3
    assert select_top_k(_cands("abc"), [1, 2, 3], k=0, max_per_doc=5) == []
    assert select_top_k([], [], k=5, max_per_doc=2) == []


def test_mismatched_lengths_and_bad_cap_are_refused() -> None:
    with pytest.raises(ValueError, match="scores"):
        select_top_k(_cands("ab"), [1.0], k=1, max_per_doc=1)
    with pytest.raises(ValueError, match="max_per_doc"):
        select_top_k(_cands("ab"), [1.0, 2.0], k=1, max_per_doc=0)


def test_none_reranker_keeps_the_fused_order() -> None:
    cands = _cands("abcde")
    reranker = NoneReranker()
    scores = reranker.score([("q", c.text) for c in cands])
    out = select_top_k(cands, scores, k=3, max_per_doc=2)
    assert [c.chunk_id for c in out] == ["c0", "c1", "c2"]


def test_factory_builds_each_backend_without_loading() -> None:
    assert isinstance(make_reranker(RerankSettings(), None), NoneReranker)
    llm = make_reranker(RerankSettings(backend="llm"), "http://127.0.0.1:8001/")
    assert isinstance(llm, LlmReranker) and llm.base_url == "http://127.0.0.1:8001"
    assert isinstance(llm, Reranker)


def test_factory_builds_the_cross_encoder_without_loading() -> None:
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    ce = make_reranker(RerankSettings(backend="cross-encoder", model="/m", max_length=128), None)
    assert isinstance(ce, CrossEncoderReranker) and ce.max_length == 128
    assert isinstance(ce, Reranker)


def test_factory_refuses_incomplete_settings() -> None:
    with pytest.raises(ConfigurationError, match=r"rerank\.model"):
        make_reranker(RerankSettings(backend="cross-encoder"), None)
    with pytest.raises(ConfigurationError, match="base URL"):
        make_reranker(RerankSettings(backend="llm"), None)
