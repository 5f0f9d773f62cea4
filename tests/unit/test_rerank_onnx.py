"""The ONNX cross-encoder backend: pair encoding and truncation, batching, sigmoid scores,
top-N scoring, the factory, and clear errors for a missing or malformed model directory.

The encoding and batching tests run a tiny WordPiece tokenizer built here and a fake session
(``onnx`` is not installed to build a graph); the model test runs the exported model under
``<infra.local_dir>/models/rerank/`` and is skipped when none has been exported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ragstream.errors import ConfigurationError
from ragstream.settings import RerankSettings, Settings
from workers.rerank.backends import NoneReranker, Reranker
from workers.rerank.factory import make_reranker, onnx_model_dir, rerank_models_dir
from workers.rerank.onnx_cross_encoder import OnnxCrossEncoder, sigmoid
from workers.rerank.select import score_top_n

WORDS = "what is the port answer default value of a server listens on five four three two"


def tiny_tokenizer() -> Tokenizer:
    """BERT-shaped: lower-casing WordPiece, ``[CLS] a [SEP] b [SEP]`` with type ids."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for w in WORDS.split():
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    return tok


class FakeSession:
    """Logit of a pair: occurrences of ``answer`` in its passage (type 1, unmasked) minus 0.5;
    records the feeds of every run."""

    def __init__(self, inputs: Sequence[str] = ("input_ids", "attention_mask", "token_type_ids")):
        self.inputs = inputs
        self.feeds: list[dict[str, Any]] = []
        self.answer_id = tiny_tokenizer().token_to_id("answer")

    def get_inputs(self) -> list[Any]:
        return [SimpleNamespace(name=n) for n in self.inputs]

    def get_outputs(self) -> list[Any]:
        return [SimpleNamespace(name="logits", shape=["batch", 1])]

    def run(self, output_names: Any, feeds: dict[str, Any]) -> list[Any]:
        del output_names
        self.feeds.append(feeds)
        ids, mask = feeds["input_ids"], feeds["attention_mask"]
        types = feeds.get("token_type_ids", np.ones_like(ids))
        hits = ((ids == self.answer_id) & (mask == 1) & (types == 1)).sum(axis=1)
        return [(hits - 0.5).astype(np.float32).reshape(-1, 1)]


def _encoder(session: FakeSession | None = None, **kw: Any) -> OnnxCrossEncoder:
    ce = OnnxCrossEncoder("/nonexistent/rerank/tiny", **kw)
    ce.attach(session or FakeSession(), tiny_tokenizer())
    return ce


def test_scores_are_the_sigmoid_of_the_logits_in_input_order() -> None:
    ce = _encoder()
    pairs = [("what is the port", "five"), ("q", "answer answer"), ("q", "answer")]
    scores = ce.score(pairs)
    assert scores == pytest.approx([sigmoid(np.array(x)).item() for x in (-0.5, 1.5, 0.5)])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert isinstance(ce, Reranker)
    assert ce.score([]) == []


def test_one_call_runs_sub_batches_of_batch_size() -> None:
    session = FakeSession()
    ce = _encoder(session, batch_size=2)
    pairs = [("q", "answer " * i) for i in range(5)]
    scores = ce.score(pairs)
    assert (ce.model_calls, ce.session_runs, ce.pairs_scored) == (1, 3, 5)
    assert [f["input_ids"].shape[0] for f in session.feeds] == [2, 2, 1]
    assert all(f["input_ids"].dtype == np.int64 for f in session.feeds)
    assert scores == sorted(scores)  # more "answer" tokens, higher score, input order kept


def test_truncation_keeps_the_question_and_cuts_the_passage() -> None:
    session = FakeSession()
    ce = _encoder(session, max_length=12)
    question = "what is the default port"
    (enc,) = ce.encode([(question, "answer " * 40)])
    assert len(enc.ids) == 12
    assert enc.tokens[:7] == ["[CLS]", "what", "is", "the", "default", "port", "[SEP]"]
    assert enc.tokens[-1] == "[SEP]"
    # 12 - 5 question tokens - 3 special tokens: four passage tokens survive.
    assert ce.score([(question, "answer " * 40)]) == pytest.approx([sigmoid(np.array(3.5)).item()])


def test_a_question_longer_than_max_length_is_cut_to_half_of_it() -> None:
    ce = _encoder(max_length=10)
    (enc,) = ce.encode([("what is the port " * 10, "answer answer answer")])
    assert len(enc.ids) == 10
    assert enc.type_ids.count(0) == 5 + 2  # half of max_length, [CLS] and [SEP]


def test_a_graph_without_token_type_ids_is_fed_without_them() -> None:
    session = FakeSession(inputs=("input_ids", "attention_mask"))
    _encoder(session).score([("q", "answer")])
    assert set(session.feeds[0]) == {"input_ids", "attention_mask"}


def test_a_graph_of_another_shape_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="input_ids"):
        _encoder(FakeSession(inputs=("pixel_values",)))
    wide = FakeSession()
    wide.get_outputs = lambda: [SimpleNamespace(name="logits", shape=["batch", 2])]  # type: ignore[method-assign]
    with pytest.raises(ConfigurationError, match="need 1"):
        _encoder(wide)


def test_missing_or_malformed_model_directories_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        OnnxCrossEncoder(tmp_path / "absent").warm_up()
    folder = tmp_path / "m"
    folder.mkdir()
    with pytest.raises(ConfigurationError, match=r"lacks model\.onnx, tokenizer\.json"):
        OnnxCrossEncoder(folder).warm_up()
    (folder / "model.onnx").write_bytes(b"not a graph")
    tiny_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ConfigurationError, match="manifest"):
        OnnxCrossEncoder(folder).warm_up()
    (folder / "manifest.json").write_text(json.dumps({"format": "other/2"}))
    with pytest.raises(ConfigurationError, match="format"):
        OnnxCrossEncoder(folder).warm_up()
    (folder / "manifest.json").write_text(json.dumps({"format": "ragstream-rerank-onnx/1"}))
    with pytest.raises(ConfigurationError, match="cannot load ONNX model"):
        OnnxCrossEncoder(folder).warm_up()
    (folder / "tokenizer.json").write_text("{")
    with pytest.raises(ConfigurationError, match="cannot load tokenizer"):
        OnnxCrossEncoder(folder).warm_up()


def test_bad_arguments_are_refused() -> None:
    for kw in ({"batch_size": 0}, {"max_length": 4}, {"num_threads": -1}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            OnnxCrossEncoder("/m", **kw)


def test_sigmoid_is_stable_for_large_logits() -> None:
    out = sigmoid(np.array([-1000.0, 0.0, 1000.0]))
    assert out.tolist() == [0.0, 0.5, 1.0]
    assert not np.isnan(out).any()


def test_the_factory_builds_the_onnx_backend_from_its_directory(tmp_path: Path) -> None:
    settings = RerankSettings(backend="onnx", threads=2, batch_size=8, max_length=64)
    ce = make_reranker(settings, None, models_dir=tmp_path)
    assert isinstance(ce, OnnxCrossEncoder)
    assert (ce.model_dir, ce.num_threads, ce.batch_size, ce.max_length) == (
        tmp_path / "minilm-default",
        2,
        8,
        64,
    )
    explicit = settings.model_copy(update={"model": "/models/x"})
    assert onnx_model_dir(explicit, tmp_path) == Path("/models/x")
    with pytest.raises(ConfigurationError, match=r"rerank\.model"):
        make_reranker(settings, None)
    assert rerank_models_dir(Settings()) == Settings().infra.local_dir / "models" / "rerank"


def test_score_top_n_scores_the_first_n_of_each_request_in_one_call() -> None:
    calls: list[int] = []

    def score(pairs: Sequence[tuple[str, str]]) -> list[float]:
        calls.append(len(pairs))
        return [0.1 * (1 + i) for i in range(len(pairs))]  # ascending: reverses each head

    out = score_top_n(score, [("a", ["p0", "p1", "p2", "p3"]), ("b", ["p0"]), ("c", [])], 2)
    assert calls == [3]
    assert out[0][:2] == pytest.approx([0.1, 0.2])
    assert out[0][2:] == pytest.approx([-0.9, -1.9])  # below every scored one, fused order
    assert out[1] == pytest.approx([0.3])
    assert out[2] == []
    assert score_top_n(score, [("c", [])], 5) == [[]] and calls == [3]
    with pytest.raises(ValueError, match="top_n"):
        score_top_n(score, [], 0)
    with pytest.raises(ValueError, match="scores for"):
        score_top_n(lambda pairs: [], [("a", ["p"])], 1)
    none = score_top_n(NoneReranker().score, [("a", ["p0", "p1", "p2"])], 2)
    assert none[0] == sorted(none[0], reverse=True)  # no model: the fused order


def _exported_model() -> Path:
    models = rerank_models_dir(Settings())
    found = sorted(p for p in models.glob("*") if (p / "model.onnx").is_file())
    if not found:
        pytest.skip(f"no rerank model exported under {models} (`ragstream rerank train`)")
    return found[-1]


def test_an_exported_model_scores_pairs_in_batches_as_alone() -> None:
    ce = OnnxCrossEncoder(_exported_model(), batch_size=4, max_length=128)
    ce.warm_up()
    q = "What is the default port of the PostgreSQL server?"
    passages = [
        "The server listens on TCP port 5432 by default.",
        "CREATE TABLE creates a new table.",
        "word " * 400,
        "The json module encodes Python objects as JSON text.",
        "Ports below 1024 need root.",
    ]
    batched = ce.score([(q, p) for p in passages])
    alone = [ce.score([(q, p)])[0] for p in passages]
    print("batched", [round(s, 4) for s in batched], "alone", [round(s, 4) for s in alone])
    assert len(batched) == 5 and all(0.0 <= s <= 1.0 and not math.isnan(s) for s in batched)
    # int8 activations are quantised per batch, padding included: close, not equal.
    assert batched == pytest.approx(alone, abs=0.05)
    assert ce.session_runs == 2 + 5


def test_the_pool_scores_the_top_n_of_every_request_in_one_call() -> None:
    import datetime as dt

    from ragstream.settings import PoolSettings
    from topics.queries import QueryRequest
    from topics.reranked import RerankedPassages
    from topics.retrieved import Candidate, RetrievedCandidates
    from workers.pools.rerank import rerank_handler
    from workers.runtime.handler import Emit

    calls: list[list[tuple[str, str]]] = []

    def reverse(pairs: Sequence[tuple[str, str]]) -> list[float]:
        calls.append(list(pairs))
        return [float(i) for i in range(len(pairs))]  # the later, the better

    def event(query: str) -> RetrievedCandidates:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
        request = QueryRequest(tenant="t", query=query, deadline=deadline, top_k=3)
        candidates = tuple(
            Candidate(chunk_id=f"c{i}", doc_id=f"d{i}", text=f"text {i}", title="T", score=1.0)
            for i in range(3)
        )
        return RetrievedCandidates(tenant="t", request=request, candidates=candidates)

    scorer = SimpleNamespace(score=reverse)
    handler = rerank_handler(scorer, RerankSettings(top_n=2), pool=PoolSettings())
    out = handler.fn([event("first?"), event("second?")])
    assert [len(c) for c in calls] == [4]  # two requests, two candidates each, one call
    assert calls[0][0] == ("first?", "T\ntext 0")
    for o in out:
        assert isinstance(o, Emit) and isinstance(o.event, RerankedPassages)
        assert [p.chunk_id for p in o.event.passages] == ["c1", "c0", "c2"]


def test_the_demo_serves_the_configured_model_only_when_it_is_trained(tmp_path: Path) -> None:
    from entry.demo import demo_reranker

    settings = Settings().model_copy(
        update={"infra": Settings().infra.model_copy(update={"local_dir": tmp_path})}
    )
    model_dir = tmp_path / "models" / "rerank" / settings.rerank.onnx_model
    env, line = demo_reranker(settings)
    assert env == {} and "keeping the fused order" in line and str(model_dir) in line
    model_dir.mkdir(parents=True)
    (model_dir / "model.onnx").write_bytes(b"graph")
    (model_dir / "manifest.json").write_text(json.dumps({"trained": False}))
    assert demo_reranker(settings)[0] == {}
    (model_dir / "manifest.json").write_text(json.dumps({"trained": True}))
    env, line = demo_reranker(settings)
    assert env == {"RAGSTREAM_RERANK__BACKEND": "onnx", "RAGSTREAM_RERANK__MODEL": str(model_dir)}
    assert "trained cross-encoder" in line
    # A trained model that loses to the fused order on held-out data is not served.
    held = {"all": {"fused": {"hit@1": 0.58}, "model": {"hit@1": 0.11}}}
    for metrics in ({"held_out": held}, {"beats_fused": False, "held_out": held}):
        (model_dir / "manifest.json").write_text(json.dumps({"trained": True, "metrics": metrics}))
        env, line = demo_reranker(settings)
        assert env == {} and "does not beat the fused order" in line
    wins = {"beats_fused": True, "held_out": held}
    (model_dir / "manifest.json").write_text(json.dumps({"trained": True, "metrics": wins}))
    assert demo_reranker(settings)[0]["RAGSTREAM_RERANK__BACKEND"] == "onnx"
    configured = settings.model_copy(update={"rerank": RerankSettings(backend="llm", model="qwen")})
    assert demo_reranker(configured) == ({}, "rerank: the configured llm backend (qwen)")


def test_a_learned_rerankers_best_score_gates_refusal_per_tenant() -> None:
    import datetime as dt

    from ragstream.settings import EvidenceSettings
    from topics.answers import NOT_IN_DOCUMENTS
    from topics.queries import QueryRequest
    from topics.retrieved import Candidate
    from workers.evidence.stage import build_evidence_stage

    text = "The default is one second (1s) for deadlock_timeout."

    def request(tenant: str) -> QueryRequest:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
        return QueryRequest(
            tenant=tenant, query="What is the default deadlock_timeout?", deadline=deadline
        )

    def passages(score: float) -> list[Candidate]:
        c = Candidate(chunk_id="c", doc_id="d", text=text, title="t", score=1.0)
        return [c.model_copy(update={"rerank_score": score})]

    rerank = RerankSettings(backend="onnx", min_score=0.5, min_score_by_tenant={"lenient": 0.1})
    stage = build_evidence_stage(EvidenceSettings(min_relevance=0.0), None, frozenset(), rerank)
    decisions = stage.run(
        [
            (request("acme"), passages(0.3), "small"),
            (request("acme"), passages(0.7), "small"),
            (request("lenient"), passages(0.3), "small"),
        ]
    )
    assert [d.reason for d in decisions] == ["off_topic:rerank=0.300", "policy", "policy"]
    assert decisions[0].answer.text == NOT_IN_DOCUMENTS and not decisions[1].answer.refused
    # The fused order (no learned model) never gates on its scores, nor does an unset threshold.
    for plain in (RerankSettings(min_score=0.5), RerankSettings(backend="onnx")):
        stage = build_evidence_stage(EvidenceSettings(min_relevance=0.0), None, frozenset(), plain)
        [d] = stage.run([(request("acme"), passages(0.3), "small")])
        assert d.reason == "policy"
    # In addition to the kNN relevance gate, or in its place.
    both = build_evidence_stage(EvidenceSettings(min_relevance=0.8), None, frozenset(), rerank)
    assert both.policy_for(request("acme")).min_relevance == 0.8
    alone = rerank.model_copy(update={"min_score_replaces_relevance": True})
    stage = build_evidence_stage(EvidenceSettings(min_relevance=0.8), None, frozenset(), alone)
    policy = stage.policy_for(request("acme"))
    assert (policy.min_relevance, policy.min_rerank_score) == (0.0, 0.5)


def test_the_rerank_benchmark_scores_the_top_n_in_pool_sized_batches() -> None:
    from bench.query.rerank_cost import measure, render

    calls: list[int] = []

    def score(pairs: Sequence[tuple[str, str]]) -> list[float]:
        calls.append(len(pairs))
        return [0.5] * len(pairs)

    fused = [(f"q{i}", [f"p{j}" for j in range(25)]) for i in range(5)]
    rows = measure(SimpleNamespace(score=score), fused, [10, 30], batch=2)
    assert calls == [4, 20, 20, 10, 50, 50, 25]  # warm-up, then 3 batches per N
    assert [(r["n"], r["pairs_per_question"], r["questions"]) for r in rows] == [
        (10, 10.0, 5),
        (30, 25.0, 5),
    ]
    assert all(r["core_ms"] >= 0 and r["wall_ms"] >= 0 for r in rows)
    payload = {"model": "m", "threads": 1, "batch": 2, "questions_file": "f", "rows": rows}
    assert render(payload).row_count == 2
    with pytest.raises(ValueError, match="batch"):
        measure(SimpleNamespace(score=score), fused, [10], batch=0)


def test_the_abstention_sweep_counts_false_and_right_refusals() -> None:
    from bench.evaluation.abstain import sweep

    rows = [
        {"refuse": False, "best": 0.9},
        {"refuse": False, "best": 0.3},
        {"refuse": True, "best": 0.1},
        {"refuse": True, "best": 0.5},
    ]
    by_t = {r["threshold"]: r for r in sweep(rows, grid=(0.2, 0.4, 0.6))}
    assert (by_t[0.2]["false_refusals"], by_t[0.2]["refused"]) == (0, 1)
    assert (by_t[0.4]["false_refusals"], by_t[0.4]["refused"]) == (1, 1)
    assert (by_t[0.6]["false_refusal_rate"], by_t[0.6]["refused_rate"]) == (0.5, 1.0)
