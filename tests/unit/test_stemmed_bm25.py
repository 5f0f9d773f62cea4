"""Client-side stemming and the BM25 query over the stemmed fields."""

from __future__ import annotations

from index.schema import CHUNKS_ONLY
from index.stemming import stem_text, stemmed_fields
from ragstream.settings import RetrievalSettings
from workers.retrieval.query import Bm25Boosts, bm25_query, es_filters, without_stop_words
from workers.retrieval.rrf import reciprocal_rank_fusion


def test_word_forms_share_a_stem_and_stop_words_go() -> None:
    assert stem_text("Blocked blocking blocks") == "block block block"
    assert stem_text("the configuration of the server") == "configur server"
    assert stem_text("the of and") == ""


def test_identifiers_are_split_into_stemmed_words() -> None:
    assert stem_text("shared_buffers") == "share buffer"
    assert stem_text("os.getcwd()") == "os getcwd"
    assert stem_text("pg_dump --incremental") == "pg dump increment"


def test_stemmed_fields_of_a_chunk() -> None:
    assert stemmed_fields(None, "Running queries") == {
        "title_stemmed": "",
        "text_stemmed": "run queri",
    }


def _should(body: dict[str, object]) -> list[dict[str, object]]:
    return body["query"]["bool"]["should"]  # type: ignore[index,no-any-return]


def test_without_stemmed_boosts_the_query_has_no_stemmed_clauses() -> None:
    body = bm25_query(
        "How do I set shared_buffers?", es_filters("t", []), 10, Bm25Boosts(2.0, 0, 0)
    )
    assert [next(iter(c["match"])) for c in _should(body)] == ["text", "title"]  # type: ignore[call-overload]


def test_stemmed_clauses_keep_the_exact_match_on_text_and_title() -> None:
    boosts = Bm25Boosts(title=1.5, stemmed=0.7, stemmed_title=0.3)
    body = bm25_query("Blocking os.getcwd calls", es_filters("t", []), 10, boosts)
    should = _should(body)
    assert should[0] == {"match": {"text": {"query": "Blocking os.getcwd calls"}}}
    assert should[1] == {"match": {"title": {"query": "Blocking os.getcwd calls", "boost": 1.5}}}
    assert should[2] == {"match": {"text_stemmed": {"query": "block os getcwd call", "boost": 0.7}}}
    assert should[3] == {
        "match": {"title_stemmed": {"query": "block os getcwd call", "boost": 0.3}}
    }
    assert body["query"]["bool"]["filter"] == [{"term": {"tenant": {"value": "t"}}}, CHUNKS_ONLY]  # type: ignore[index]
    assert "text_stemmed" in body["_source"]["excludes"]  # type: ignore[index]


def test_a_question_of_stop_words_only_gets_no_stemmed_clause() -> None:
    body = bm25_query("to be or not", es_filters("t", []), 5)
    assert len(_should(body)) == 2


def test_boosts_come_from_the_retrieval_settings() -> None:
    s = RetrievalSettings(title_boost=3.0, stemmed_boost=0.5, stemmed_title_boost=0.25)
    assert Bm25Boosts.from_settings(s) == Bm25Boosts(3.0, 0.5, 0.25)
    assert Bm25Boosts.from_settings(RetrievalSettings()) == Bm25Boosts() == Bm25Boosts(0.5, 1.0, 0)


def test_weighted_rrf_scales_each_list() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]], k=0, weights=[1.0, 3.0])
    assert fused == [("b", 1.0 * 0.5 + 3.0), ("a", 1.0 + 1.5)]
    assert reciprocal_rank_fusion([["a"], ["b"]], k=60) == reciprocal_rank_fusion(
        [["a"], ["b"]], k=60, weights=[1.0, 1.0]
    )


def test_stop_words_can_be_left_out_of_the_unstemmed_clauses() -> None:
    question = "What is the (default) value of os.path.sep?"
    body = bm25_query(question, [], 10, Bm25Boosts(stop_words=False), "it's a dir")
    clauses = [(field, m["query"]) for c in _should(body) for field, m in c["match"].items()]  # type: ignore[attr-defined]
    assert clauses == [
        ("text", "What (default) value os.path.sep?"),
        ("title", "What (default) value os.path.sep?"),
        ("text_stemmed", "what default valu os path sep"),
        ("text", "it's dir"),
        ("text_stemmed", "s dir"),
    ]
    kept = bm25_query(question, [], 10)
    assert _should(kept)[0] == {"match": {"text": {"query": question}}}


def test_a_question_of_stop_words_only_keeps_its_words() -> None:
    assert without_stop_words("To be, or not") == "To be, or not"
    assert without_stop_words("  Is   it  THE one ") == "one"
    assert Bm25Boosts.from_settings(RetrievalSettings(bm25_stop_words=False)).stop_words is False
