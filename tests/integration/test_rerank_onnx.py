"""The lean ONNX cross-encoder in the rerank pool, on candidates from a real Elasticsearch index.

A page of several chunks and a few other pages are indexed in the test's own index; hybrid
retrieval gives the fused candidates; the rerank pool's handler, given an
:class:`~workers.rerank.onnx_cross_encoder.OnnxCrossEncoder`, orders them by the model's scores.

The model is an export of ``ragstream rerank train`` under ``<infra.local_dir>/models/rerank/``:
any export for the ordering test (skipped when there is none), a TRAINED one that beats the
fused order as `make demo` serves it (``entry.demo.loses_to_fused``; the configured
``rerank.onnx_model`` first) for the
relevance test: a definition's name and summary, asked as the question, rank the chunk holding
its description above the page's other chunks.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from entry.demo import loses_to_fused
from ingest.ops import IngestOp
from ragstream.settings import PoolSettings, RerankSettings, RetrievalSettings, Settings
from tests.integration.ingestkit import Kit
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.retrieved import Candidate, RetrievedCandidates
from workers.pools.rerank import _passage, rerank_handler
from workers.rerank.factory import rerank_models_dir
from workers.rerank.onnx_cross_encoder import OnnxCrossEncoder
from workers.rerank.select import select_top_k
from workers.retrieval.hybrid import HybridRetriever
from workers.runtime.handler import Emit

TENANT = "acme"
#: A reference page: the entry's description is one chunk, the page's other sections
#: (examples that call it, related functions, a command line) are others.
PAGE = """# json — JSON encoder and decoder

## Basic usage

Encoding basic Python object hierarchies is one call. For example,
json.dumps(['foo', {'bar': ('baz', None, 1.0, 2)}]) returns a string, json.dumps("foo") quotes
it, and json.dumps({"c": 0, "b": 0, "a": 0}, sort_keys=True) sorts the keys. Compact encoding
uses json.dumps([1, 2, 3, {'4': 5, '6': 7}], separators=(',', ':')), and pretty printing uses
json.dumps({'4': 5, '6': 7}, sort_keys=True, indent=4). Decoding uses json.loads.

## json.dumps(obj, *, skipkeys=False, ensure_ascii=True, indent=None, sort_keys=False)

Serialize obj to a JSON formatted str using this conversion table. The arguments have the same
meaning as in dump(). Keys in key/value pairs of JSON are always of the type str. When a
dictionary is converted into JSON, all the keys of the dictionary are coerced to strings. If
skipkeys is true, dict keys that are not of a basic type are skipped instead of raising a
TypeError.

## json.loads(s, *, cls=None, object_hook=None)

Deserialize s (a str, bytes or bytearray instance containing a JSON document) to a Python object
using this conversion table. If the data being deserialized is not a valid JSON document, a
JSONDecodeError will be raised.

## Command line interface

The json.tool module provides a simple command line interface to validate and pretty-print JSON
objects, for example: echo '{"json": "obj"}' | python -m json.tool. If the optional infile and
outfile arguments are not specified, sys.stdin and sys.stdout are used.
"""
OTHERS = {
    "pickle": "# pickle — Python object serialization\n\nThe pickle module implements binary "
    "protocols for serializing and de-serializing a Python object structure. pickle.dumps "
    "returns the pickled representation of the object as a bytes object.",
    "csv": "# csv — CSV file reading and writing\n\nThe csv module implements classes to read "
    "and write tabular data in CSV format; csv.writer returns a writer object that converts "
    "the user's data into delimited strings.",
}
DESCRIPTION = "Serialize obj to a JSON formatted str"
QUESTION = "json.dumps: Serialize obj to a JSON formatted str."


def _models(trained_only: bool) -> list[Path]:
    root = rerank_models_dir(Settings())
    configured = root / Settings().rerank.onnx_model
    found = [p for p in sorted(root.glob("*")) if (p / "model.onnx").is_file()]
    found.sort(key=lambda p: p != configured)
    if not trained_only:
        return found
    out = []
    for p in found:
        try:
            manifest = json.loads((p / "manifest.json").read_text("utf-8"))
        except (OSError, ValueError):
            continue
        # the models the demo would serve: trained, and not losing to the fused order
        if manifest.get("trained") is True and not loses_to_fused(manifest):
            out.append(p)
    return out


def _candidates(kit: Kit, question: str) -> RetrievedCandidates:
    ops = [
        IngestOp(TENANT, "json", data=PAGE.encode(), content_type="markdown"),
        *(
            IngestOp(TENANT, doc, data=text.encode(), content_type="markdown")
            for doc, text in OTHERS.items()
        ),
    ]
    outs = [o[0] for o in kit.pipeline.apply(ops)]
    assert all(o.status == "indexed" for o in outs), outs
    kit.es.indices.refresh(index=kit.index.alias)
    request = QueryRequest(
        tenant=TENANT,
        query=question,
        deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5),
        top_n=20,
        top_k=20,
    )
    retriever = HybridRetriever(kit.es, kit.index.alias, RetrievalSettings())
    [fused] = retriever.search_batch([request], kit.embedder.embed([question]))
    assert sum(c.doc_id == "json" for c in fused) >= 3, [c.text[:40] for c in fused]
    return RetrievedCandidates(tenant=TENANT, request=request, candidates=tuple(fused))


def _rerank(model: Path, event: RetrievedCandidates) -> tuple[list[Candidate], list[float]]:
    """The pool's passages for ``event`` (no per-document cap), and the model's own scores of
    the fused candidates scored apart."""
    reranker = OnnxCrossEncoder(model, max_length=256)
    reranker.warm_up()
    settings = RerankSettings(backend="onnx", max_chunks_per_doc=100, top_n=20)
    [out] = rerank_handler(reranker, settings, pool=PoolSettings()).fn([event])
    assert isinstance(out, Emit) and isinstance(out.event, RerankedPassages)
    alone = reranker.score([(event.request.query, _passage(c)) for c in event.candidates])
    print(
        "fused:",
        [c.chunk_id[-6:] for c in event.candidates],
        "reranked:",
        [(p.chunk_id[-6:], round(p.rerank_score or 0, 3)) for p in out.event.passages],
    )
    return list(out.event.passages), alone


def test_the_pool_orders_real_candidates_by_the_onnx_models_scores(kit: Kit) -> None:
    models = _models(trained_only=False)
    if not models:
        pytest.skip(f"no rerank model exported under {rerank_models_dir(Settings())}")
    event = _candidates(kit, "How do I turn a Python object into a JSON string?")
    passages, alone = _rerank(models[0], event)
    expected = select_top_k(list(event.candidates), alone, 20, 100)
    assert [p.chunk_id for p in passages] == [c.chunk_id for c in expected]
    scores = [p.rerank_score for p in passages]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    # Pool-batched and scored apart agree up to int8 activation quantisation.
    by_id = {c.chunk_id: s for c, s in zip(event.candidates, alone, strict=True)}
    assert [p.rerank_score for p in passages] == pytest.approx(
        [by_id[p.chunk_id] for p in passages], abs=0.05
    )


def test_a_trained_model_ranks_a_definitions_description_above_its_pages_other_chunks(
    kit: Kit,
) -> None:
    models = _models(trained_only=True)
    if not models:
        pytest.skip(
            f"no TRAINED rerank model that beats the fused order under "
            f'{rerank_models_dir(Settings())} (manifest "trained": true and held-out metrics '
            "above the fused order's, as `make demo` serves; `ragstream rerank train`)"
        )
    event = _candidates(kit, QUESTION)
    passages, _ = _rerank(models[0], event)
    page = [p for p in passages if p.doc_id == "json"]
    assert DESCRIPTION in page[0].text, [p.text[:60] for p in page]
