"""The client's search request and the LangChain and LlamaIndex shapes of its passages (pure:
no server; ``tests/integration/test_search.py`` runs both libraries against the real API)."""

from __future__ import annotations

from langchain_core.documents import Document
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo

from api.search_models import SearchHit, SearchResults
from entry.client import Calls
from entry.langchain_retriever import RagstreamRetriever, documents
from entry.llama_index_retriever import nodes

RESULTS = SearchResults(
    query="What does VACUUM do?",
    ranker="hybrid",
    data=[
        SearchHit(n=1, doc_id="vacuum", chunk_id="vacuum#0", title="VACUUM",
                  source="sql-vacuum.html", score=0.0295, text="VACUUM reclaims storage.",
                  metadata={"version": 15, "title": "shadowed"}),
    ],
)  # fmt: skip


def test_the_search_call_leaves_out_what_is_not_given() -> None:
    call = Calls.search("vacuum", top_k=3, ranker="keyword")
    assert (call.method, call.path) == ("POST", "/v1/search")
    assert call.body == {"query": "vacuum", "top_k": 3, "ranker": "keyword"}
    filters = [{"kind": "term", "field": "metadata.version", "values": [15]}]
    call = Calls.search("vacuum", filters=filters, score_threshold=0.01, history=["earlier?"])
    assert call.body == {
        "query": "vacuum", "top_k": 10, "ranker": "hybrid", "filters": filters,
        "score_threshold": 0.01, "history": ["earlier?"],
    }  # fmt: skip
    assert call.parse(RESULTS.model_dump()) == RESULTS


def test_langchain_documents_carry_source_chunk_title_and_score() -> None:
    (doc,) = documents(RESULTS)
    assert isinstance(doc, Document)
    assert doc.id == "vacuum#0" and doc.page_content == "VACUUM reclaims storage."
    assert doc.metadata == {
        "version": 15, "doc_id": "vacuum", "chunk_id": "vacuum#0", "title": "VACUUM",
        "source": "sql-vacuum.html", "score": 0.0295, "rank": 1,
    }  # fmt: skip
    retriever = RagstreamRetriever(base_url="http://127.0.0.1:1", api_key="rsk_x")
    assert retriever.top_k == 10 and retriever.ranker == "hybrid" and retriever.filters == []


def test_llama_index_nodes_are_scored_and_point_at_their_document() -> None:
    (scored,) = nodes(RESULTS)
    assert scored.score == 0.0295
    node = scored.node
    assert node.node_id == "vacuum#0" and node.ref_doc_id == "vacuum"
    source = node.relationships[NodeRelationship.SOURCE]
    assert isinstance(source, RelatedNodeInfo) and source.node_id == "vacuum"
    assert node.metadata["title"] == "VACUUM" and node.metadata["source"] == "sql-vacuum.html"
    assert node.get_content() == "VACUUM reclaims storage."
