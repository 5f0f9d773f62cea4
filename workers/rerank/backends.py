"""Rerank backends behind one protocol: no-op, cross-encoder, LLM yes/no.

Every backend scores all (question, passage) pairs of all requests of a batch in one call, so
a pool batches model work across requests. Model stages follow the Haystack pattern: a cheap
``__init__``, ``warm_up()`` loads the model once, nothing heavy at import time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import structlog

from ragstream.errors import ConfigurationError
from ragstream.extras import require_torch
from workers.rerank.llm import LlmReranker

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

__all__ = [
    "CROSS_ENCODER",
    "CROSS_ENCODER_INSTEAD",
    "CrossEncoderReranker",
    "LlmReranker",
    "NoneReranker",
    "Pair",
    "Reranker",
]

log = structlog.get_logger(__name__)

#: ``(question, passage)``.
Pair = tuple[str, str]
#: The cross-encoder and the choices without torch, in :func:`ragstream.extras.require_torch`'s
#: message.
CROSS_ENCODER = "rerank.backend=cross-encoder"
CROSS_ENCODER_INSTEAD = "rerank.backend=none or llm"


@runtime_checkable
class Reranker(Protocol):
    """Scores (question, passage) pairs; higher is more relevant."""

    def warm_up(self) -> None:
        """Load the model or open clients; idempotent."""
        ...

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        """One relevance score per pair, input order, in one batched model call."""
        ...


class NoneReranker:
    """Keeps the fused order: pair ``i`` of ``n`` scores ``n - i`` (strictly descending)."""

    def warm_up(self) -> None:
        """Nothing to load."""

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        """``[n, n-1, ..., 1]`` for ``n`` pairs.

        Caveat: pairs of several requests in one call get one descending sequence; per
        request the order is still the input order, which is all :func:`select_top_k` needs.
        """
        n = len(pairs)
        return [float(n - i) for i in range(n)]


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` scoring each pair jointly (one logit); needs the
    ``torch`` extra (``pip install -e '.[torch]'``).

    Cross-encoder reranking of BM25/dense candidates: Nogueira & Cho 2019 ("Passage
    Re-ranking with BERT"). The score is the model's single output passed through its
    default activation (sigmoid for one label), in ``[0, 1]``.

    Args:
        model: a local CrossEncoder (or sentence-transformers/transformers BERT) directory, or
            a hub id already in the local cache; loaded offline.
        batch_size: pairs per forward pass.
        max_length: tokens per pair (question + passage + special tokens); longer pairs are
            truncated by the tokenizer.
        device: torch device.
        num_labels: forwarded to ``CrossEncoder``; ``1`` turns a plain encoder into a scorer
            with a freshly initialised head (tests), ``None`` keeps the checkpoint's.

    Attributes:
        model_calls: ``predict`` calls made (one per :meth:`score` with pairs).
        pairs_scored: pairs scored so far.
    """

    def __init__(
        self,
        model: str,
        batch_size: int = 32,
        max_length: int = 256,
        device: str = "cpu",
        num_labels: int | None = None,
    ) -> None:
        self.model_name = model
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.num_labels = num_labels
        self.model_calls = 0
        self.pairs_scored = 0
        self._model: CrossEncoder | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> CrossEncoder:
        """The loaded ``CrossEncoder`` (loads it on first use)."""
        self.warm_up()
        assert self._model is not None
        return self._model

    def warm_up(self) -> None:
        """Load the model once (thread-safe, idempotent), offline.

        Raises:
            ConfigurationError: the ``torch`` extra is not installed, or the model cannot be
                loaded or has more than one output.
        """
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            require_torch(CROSS_ENCODER, CROSS_ENCODER_INSTEAD)
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub
            from sentence_transformers import CrossEncoder

            started = time.perf_counter()
            try:
                model = CrossEncoder(
                    self.model_name,
                    device=self.device,
                    max_length=self.max_length,
                    num_labels=self.num_labels,
                    local_files_only=True,
                )
            except (OSError, ValueError) as exc:
                raise ConfigurationError(
                    f"cannot load cross-encoder {self.model_name}: {exc}"
                ) from exc
            if model.num_labels != 1:
                raise ConfigurationError(
                    f"cross-encoder {self.model_name} has {model.num_labels} outputs, need 1"
                )
            model.eval()
            self._model = model
            log.info(
                "cross_encoder_loaded",
                model=self.model_name,
                device=self.device,
                load_s=round(time.perf_counter() - started, 2),
            )

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        """Score all pairs in one ``predict`` call (``batch_size`` pairs per forward pass).

        Returns:
            One float per pair, input order.
        """
        if not pairs:
            return []
        model = self.model
        with self._lock:
            self.model_calls += 1
            scores = model.predict(
                list(pairs),
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
            self.pairs_scored += len(pairs)
        return [float(s) for s in np.asarray(scores, dtype=np.float64).reshape(len(pairs))]
