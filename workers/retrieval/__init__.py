"""Hybrid retrieval: BM25 and kNN searches in one ``_msearch``, fused with reciprocal rank fusion.

- :mod:`workers.retrieval.rrf`: the fusion (pure).
- :mod:`workers.retrieval.query`: Elasticsearch query bodies from structured filters.
- :mod:`workers.retrieval.hybrid`: :class:`HybridRetriever`, one round trip per batch.
"""

from workers.retrieval.hybrid import HybridRetriever
from workers.retrieval.query import bm25_query, es_filters, knn_clause
from workers.retrieval.rrf import reciprocal_rank_fusion

__all__ = ["HybridRetriever", "bm25_query", "es_filters", "knn_clause", "reciprocal_rank_fusion"]
