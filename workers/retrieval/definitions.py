"""The definition index: look up and verify documented names in a tenant's documents.

Definition entries (:mod:`ingest.parsers.definitions`) live in the chunk index beside the
chunks of their document (``entry: "definition"``), so they share its tenant, version, readers
and lifecycle. Two reads:

- :meth:`DefinitionIndex.verify`: which of some names (proposed by a model, typed by a user)
  the tenant's documents define. A name matches an entry by its lookup keys
  (:func:`index.schema.definition_keys`): exactly (``os.makedirs``), else by the last part of
  a dotted name or with ``()`` dropped (``makedirs()`` → ``os.makedirs``). A name no entry
  defines gets no hit: it is never shown as the documents' answer.
- :meth:`DefinitionIndex.search`: the entries nearest a question, BM25 over name + text
  (signature, summary, example) and, given the question's embedding, kNN; fused with
  reciprocal rank fusion (:mod:`workers.retrieval.rrf`) like the passage searches.

Both send one ``_msearch`` and apply the same tenant and permission filters as the passage
searches (:func:`workers.retrieval.query.es_filters` with ``entry="definition"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticsearch import Elasticsearch

from index.schema import DEFINITION_ENTRY, definition_keys, definition_text
from ragstream.errors import PermanentError, TransientError, transient_http_status
from topics.retrieved import Candidate
from workers.retrieval.hybrid import es_errors
from workers.retrieval.query import bm25_query, es_filters, knn_clause
from workers.retrieval.rrf import reciprocal_rank_fusion

#: Fields a definition hit reads (no embedding, no stemmed text).
SOURCE_FIELDS = ["chunk_id", "doc_id", "version", "source", "title", "definition"]
#: kNN candidates per shard of a definition search, per neighbour asked for.
NUM_CANDIDATES_PER_K = 10


@dataclass(frozen=True, slots=True)
class DefinitionHit:
    """One definition entry found.

    Attributes:
        entry_id: its ``_id`` (a citation opens it through ``GET /v1/chunks/{id}``).
        doc_id, version, source: the document that defines it.
        name, kind, signature, summary, example, anchor: the entry
            (:class:`ingest.types.Definition`).
        score: the BM25 score (verify) or the RRF score (search); higher is better.
        exact: its name's first lookup key equals the asked name's (verify only).
        proposed: it defines a name the proposer named (:mod:`workers.retrieval.propose`).
    """

    entry_id: str
    doc_id: str
    version: int
    source: str
    name: str
    kind: str
    signature: str
    summary: str
    example: str
    anchor: str
    score: float
    exact: bool = False
    proposed: bool = False

    @property
    def page(self) -> str:
        """``source#anchor`` (the source alone when the entry has no anchor)."""
        return f"{self.source}#{self.anchor}" if self.anchor else self.source

    def candidate(self, *, proposed: bool = False) -> Candidate:
        """The entry as a passage: ``text`` = signature, summary and example, one per line
        (:func:`index.schema.definition_text`); ``metadata`` holds ``entry`` =
        ``definition``, the entry's fields and ``proposed`` (it defines a name the proposer
        named; :func:`definition_of` reads them back)."""
        text = definition_text(self.signature, self.summary, self.example)
        meta: dict[str, str | int | float | bool | None] = {
            "entry": DEFINITION_ENTRY,
            "name": self.name,
            "kind": self.kind,
            "signature": self.signature,
            "summary": self.summary,
            "example": self.example,
            "anchor": self.anchor,
            "proposed": proposed,
        }
        return Candidate(
            chunk_id=self.entry_id,
            doc_id=self.doc_id,
            text=text,
            title=self.name,
            source=self.source,
            score=self.score,
            metadata=meta,
        )


def definition_of(passage: Candidate) -> DefinitionHit | None:
    """The definition entry a passage is (:meth:`DefinitionHit.candidate`), else ``None``."""
    meta = passage.metadata
    if meta.get("entry") != DEFINITION_ENTRY:
        return None
    return DefinitionHit(
        entry_id=passage.chunk_id,
        doc_id=passage.doc_id,
        version=0,
        source=passage.source,
        name=str(meta.get("name") or passage.title),
        kind=str(meta.get("kind") or ""),
        signature=str(meta.get("signature") or ""),
        summary=str(meta.get("summary") or ""),
        example=str(meta.get("example") or ""),
        anchor=str(meta.get("anchor") or ""),
        score=passage.score,
        proposed=meta.get("proposed") is True,
    )


class DefinitionIndex:
    """Reads of the definition entries behind the chunk index alias.

    Args:
        es: an Elasticsearch client.
        alias: the chunk index alias (``settings.elasticsearch.index_alias``).
        target: returns the index to read instead of the alias, or ``None`` for the alias (the
            query embedder's model's index, as :class:`~workers.retrieval.hybrid.HybridRetriever`).
    """

    def __init__(
        self, es: Elasticsearch, alias: str, target: Callable[[], str | None] | None = None
    ) -> None:
        self.es = es
        self.alias = alias
        self.target = target

    def _index(self) -> str:
        return (self.target and self.target()) or self.alias

    def verify(
        self,
        tenant: str,
        names: Sequence[str],
        principals: Sequence[str] | None = None,
        *,
        size: int = 3,
    ) -> dict[str, list[DefinitionHit]]:
        """The entries of ``tenant``'s documents that define each of ``names``.

        Args:
            tenant: whose documents.
            names: the names to check, as proposed (``os.makedirs``, ``makedirs()``).
            principals: the asker's principals (``None``: every document of the tenant).
            size: entries kept per name.

        Returns:
            ``{name: hits}`` for every name, exact matches first; an empty list for a name no
            entry defines (and for a name with no lookup key).

        Raises:
            TransientError: Elasticsearch unreachable or overloaded.
            PermanentError: Elasticsearch refused the request.
        """
        return self.verify_many([(tenant, names, principals)], size=size)[0]

    def verify_many(
        self,
        queries: Sequence[tuple[str, Sequence[str], Sequence[str] | None]],
        *,
        size: int = 3,
    ) -> list[dict[str, list[DefinitionHit]]]:
        """:meth:`verify` for many ``(tenant, names, principals)`` in one ``_msearch`` (none
        when no name has a lookup key). Returns one result per query, in order; raises as
        :meth:`verify`."""
        outs: list[dict[str, list[DefinitionHit]]] = []
        asked: list[tuple[int, str, list[str]]] = []
        searches: list[dict[str, Any]] = []
        for at, (tenant, names, principals) in enumerate(queries):
            keyed = [(n, definition_keys(n)) for n in dict.fromkeys(names)]
            outs.append({n: [] for n, _ in keyed})
            filters = es_filters(tenant, [], principals, entry="definition")
            for name, keys in keyed:
                if not keys:
                    continue
                query = {"bool": {"filter": [*filters, {"terms": {"definition.keys": keys}}]}}
                searches += [
                    {"index": self._index()},
                    {"size": size * 4, "query": query, "_source": SOURCE_FIELDS},
                ]
                asked.append((at, name, keys))
        responses = self._msearch(searches) if searches else []
        for (at, name, keys), response in zip(asked, responses, strict=True):
            hits = [_hit(h, exact=_first_key(h) == keys[0]) for h in response["hits"]["hits"]]
            hits.sort(key=lambda h: not h.exact)  # stable: exact first, then index order
            outs[at][name] = hits[:size]
        return outs

    def search(
        self,
        tenant: str,
        text: str,
        vector: Sequence[float] | None = None,
        principals: Sequence[str] | None = None,
        *,
        size: int = 5,
    ) -> list[DefinitionHit]:
        """The definition entries nearest ``text``, best first.

        Args:
            tenant: whose documents.
            text: the question (BM25 over the entries' name, signature, summary and example).
            vector: the question's embedding (the index's model); ``None``: BM25 alone.
            principals: the asker's principals (``None``: every document of the tenant).
            size: entries returned.

        Returns:
            At most ``size`` hits, RRF-fused over the BM25 and kNN lists.

        Raises:
            TransientError: Elasticsearch unreachable or overloaded.
            PermanentError: Elasticsearch refused the request.
        """
        return self.search_many([(tenant, text, vector, principals)], size=size)[0]

    def search_many(
        self,
        queries: Sequence[tuple[str, str, Sequence[float] | None, Sequence[str] | None]],
        *,
        size: int = 5,
    ) -> list[list[DefinitionHit]]:
        """:meth:`search` for many ``(tenant, text, vector, principals)`` in one ``_msearch``.

        Returns:
            One hit list per query, in order. Raises as :meth:`search`.
        """
        searches: list[dict[str, Any]] = []
        shape: list[int] = []  # searches per query: 1 (BM25) or 2 (BM25 + kNN)
        for tenant, text, vector, principals in queries:
            filters = es_filters(tenant, [], principals, entry="definition")
            bm25 = bm25_query(text, filters, size * 2)
            bm25["_source"] = SOURCE_FIELDS
            searches += [{"index": self._index()}, bm25]
            if vector is not None:
                knn = knn_clause(vector, filters, size * 2, size * 2 * NUM_CANDIDATES_PER_K)
                searches += [
                    {"index": self._index()},
                    {"size": size * 2, "knn": knn, "_source": SOURCE_FIELDS},
                ]
            shape.append(1 if vector is None else 2)
        responses = self._msearch(searches) if searches else []
        out: list[list[DefinitionHit]] = []
        at = 0
        for n in shape:
            mine = responses[at : at + n]
            at += n
            lists = [[h["_id"] for h in r["hits"]["hits"]] for r in mine]
            by_id = {h["_id"]: h for r in mine for h in r["hits"]["hits"]}
            fused = reciprocal_rank_fusion(lists)[:size]
            out.append([_hit(by_id[i], score=score) for i, score in fused])
        return out

    def _msearch(self, searches: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
        with es_errors("msearch"):
            responses = list(self.es.msearch(searches=searches)["responses"])
        for r in responses:
            if "error" in r:
                status = int(r.get("status") or 500)
                error = TransientError if transient_http_status(status) else PermanentError
                raise error(f"definition search failed ({status}): {r['error']}")
        return responses


def _first_key(hit: Mapping[str, Any]) -> str:
    keys = hit["_source"].get("definition", {}).get("keys") or [""]
    return str(keys[0])


def _hit(
    hit: Mapping[str, Any], *, exact: bool = False, score: float | None = None
) -> DefinitionHit:
    src = hit["_source"]
    d = src.get("definition", {})
    return DefinitionHit(
        entry_id=str(hit["_id"]),
        doc_id=str(src.get("doc_id", "")),
        version=int(src.get("version", 0)),
        source=str(src.get("source", "")),
        name=str(d.get("name", src.get("title", ""))),
        kind=str(d.get("kind", "")),
        signature=str(d.get("signature", "")),
        summary=str(d.get("summary", "")),
        example=str(d.get("example", "")),
        anchor=str(d.get("anchor", "")),
        score=float(hit.get("_score") or 0.0) if score is None else score,
        exact=exact,
    )
