"""The cross-encoder reranker on a real BERT (MiniLM weights with a fresh one-logit head).

The packaged all-MiniLM-L6-v2 encoder loads as a ``CrossEncoder`` with ``num_labels=1``; its
classification head is randomly initialised, so torch is seeded first and the scores carry no
meaning beyond being deterministic. The tests prove batching, truncation, ordering with the
per-document cap, and determinism, not relevance. They need the torch extra
(``pip install -e '.[torch]'``) and are skipped without it.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from ingest.embedding import resolve_model_path
from topics.retrieved import Candidate
from workers.rerank.backends import CrossEncoderReranker, Reranker
from workers.rerank.select import select_top_k

torch = pytest.importorskip("torch", reason="the cross-encoder needs the torch extra")
pytest.importorskip("sentence_transformers", reason="the cross-encoder needs the torch extra")
MAX_LENGTH = 128


@pytest.fixture(scope="module")
def reranker() -> CrossEncoderReranker:
    torch.manual_seed(1234)
    r = CrossEncoderReranker(
        str(resolve_model_path()), batch_size=16, max_length=MAX_LENGTH, num_labels=1
    )
    with warnings.catch_warnings():  # the fresh head's init may warn in some versions
        warnings.simplefilter("ignore")
        r.warm_up()
    return r


REQUESTS = {
    "how does postgres recover after a crash?": [
        ("wal", "The write-ahead log is replayed after a crash to restore committed changes."),
        ("wal", "Checkpoints bound the amount of WAL that recovery must replay."),
        ("wal", "The WAL is written sequentially to stable storage before data pages."),
        ("vacuum", "VACUUM reclaims space held by dead tuples."),
        ("cats", "Cats groom themselves with rough tongues."),
    ],
    "what is a python list comprehension?": [
        ("py", "List comprehensions build lists from an expression and a for clause."),
        ("py", "Tuples are immutable sequences."),
        ("tls", "TLS certificates are signed by a trusted authority."),
    ],
    "how do I encrypt connections?": [
        ("tls", "Connections can be encrypted with TLS."),
        ("tls", "Clients verify the server's host name against the certificate."),
        ("wal", "The WAL is archived for point-in-time recovery."),
        ("cats", "Cats sleep most of the day."),
    ],
}


def _candidates(passages: list[tuple[str, str]]) -> list[Candidate]:
    return [
        Candidate(chunk_id=f"{doc}-{i}", doc_id=doc, text=text, score=1.0 / (60 + i + 1))
        for i, (doc, text) in enumerate(passages)
    ]


def _encoder(reranker: CrossEncoderReranker) -> torch.nn.Module:
    """The transformer body (BertModel) under the classification head: one call per forward."""
    model = reranker.model.model
    assert model is not None
    body: torch.nn.Module = model.base_model
    return body


def test_is_a_reranker(reranker: CrossEncoderReranker) -> None:
    assert isinstance(reranker, Reranker)


def test_all_pairs_of_three_requests_in_one_predict_call(reranker: CrossEncoderReranker) -> None:
    pairs = [(q, text) for q, passages in REQUESTS.items() for _, text in passages]
    forwards: list[int] = []
    hook = _encoder(reranker).register_forward_pre_hook(lambda _m, _a: forwards.append(1))
    calls = reranker.model_calls
    try:
        scores = reranker.score(pairs)
    finally:
        hook.remove()
    assert reranker.model_calls == calls + 1
    assert len(scores) == len(pairs) == 12
    assert len(forwards) == 1  # 12 pairs fit one forward pass of batch_size=16
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)


def test_long_passage_is_truncated_to_max_length(reranker: CrossEncoderReranker) -> None:
    long_passage = " ".join(f"word{i % 97}" for i in range(5000))
    seen: list[tuple[int, ...]] = []

    def record(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        input_ids = args[0] if args else kwargs["input_ids"]
        seen.append(tuple(input_ids.shape))

    hook = _encoder(reranker).register_forward_pre_hook(record, with_kwargs=True)
    try:
        [score, short] = reranker.score([("what is word5?", long_passage), ("q", "short")])
    finally:
        hook.remove()
    assert seen == [(2, MAX_LENGTH)]  # padded to the longest pair, which was cut to MAX_LENGTH
    assert 0.0 <= score <= 1.0 and 0.0 <= short <= 1.0


def test_select_orders_by_score_with_the_per_doc_cap(reranker: CrossEncoderReranker) -> None:
    query = next(iter(REQUESTS))
    cands = _candidates(REQUESTS[query])
    scores = reranker.score([(query, c.text) for c in cands])
    top = select_top_k(cands, scores, k=4, max_per_doc=2)
    # Expected from the returned scores: descending (ties by rank), at most 2 per document.
    expected: list[str] = []
    per_doc: dict[str, int] = {}
    for i in sorted(range(len(cands)), key=lambda i: (-scores[i], i)):
        doc = cands[i].doc_id
        if per_doc.get(doc, 0) < 2 and len(expected) < 4:
            per_doc[doc] = per_doc.get(doc, 0) + 1
            expected.append(cands[i].chunk_id)
    assert [c.chunk_id for c in top] == expected
    assert sum(c.doc_id == "wal" for c in top) == 2  # three wal chunks, capped at two
    got = [c.rerank_score for c in top]
    assert got == sorted(got, reverse=True)  # type: ignore[type-var]


def test_scores_are_deterministic(reranker: CrossEncoderReranker) -> None:
    pairs = [(q, text) for q, passages in REQUESTS.items() for _, text in passages]
    first = reranker.score(pairs)
    assert reranker.score(pairs) == first
    assert reranker.score(pairs[::-1]) == pytest.approx(first[::-1], abs=1e-6)
    assert len(set(first)) > 1  # the head is not degenerate
