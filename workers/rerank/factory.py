"""Build the rerank backend named by the ``rerank`` settings section."""

from __future__ import annotations

from ragstream.errors import ConfigurationError
from ragstream.extras import require_torch
from ragstream.settings import RerankSettings
from workers.rerank.backends import (
    CROSS_ENCODER,
    CROSS_ENCODER_INSTEAD,
    CrossEncoderReranker,
    LlmReranker,
    NoneReranker,
    Reranker,
)


def make_reranker(settings: RerankSettings, llm_base_url: str | None) -> Reranker:
    """The configured reranker, not yet warmed up (call ``warm_up()`` once at start-up).

    Args:
        settings: ``backend`` picks the class; ``model``, ``batch_size``, ``max_length``
            configure it.
        llm_base_url: base URL of the OpenAI-compatible server (``backend="llm"`` only).

    Raises:
        ConfigurationError: ``cross-encoder`` without ``model`` or without the ``torch`` extra
            installed (the message names ``pip install -e '.[torch]'``), or ``llm`` without a
            base URL.
    """
    if settings.backend == "none":
        return NoneReranker()
    if settings.backend == "cross-encoder":
        if not settings.model:
            raise ConfigurationError("rerank.backend=cross-encoder needs rerank.model")
        require_torch(CROSS_ENCODER, CROSS_ENCODER_INSTEAD)
        return CrossEncoderReranker(
            settings.model, batch_size=settings.batch_size, max_length=settings.max_length
        )
    if not llm_base_url:
        raise ConfigurationError("rerank.backend=llm needs the LLM server's base URL")
    return LlmReranker(llm_base_url, model=settings.model)
