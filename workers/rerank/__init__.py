"""Rerank: score (question, passage) pairs of the fused candidates and keep the top K.

- :mod:`workers.rerank.backends`: the :class:`Reranker` protocol and its backends (none,
  cross-encoder, LLM yes/no).
- :mod:`workers.rerank.select`: top-K selection with a per-document cap (pure).
- :mod:`workers.rerank.factory`: the backend named by the ``rerank`` settings.
"""

from workers.rerank.backends import CrossEncoderReranker, LlmReranker, NoneReranker, Reranker
from workers.rerank.factory import make_reranker
from workers.rerank.select import select_top_k

__all__ = [
    "CrossEncoderReranker",
    "LlmReranker",
    "NoneReranker",
    "Reranker",
    "make_reranker",
    "select_top_k",
]
