"""Build the rerank backend named by the ``rerank`` settings section."""

from __future__ import annotations

from pathlib import Path

from ragstream.errors import ConfigurationError
from ragstream.extras import require_torch
from ragstream.settings import RerankSettings, Settings
from workers.rerank.backends import (
    CROSS_ENCODER,
    CROSS_ENCODER_INSTEAD,
    CrossEncoderReranker,
    LlmReranker,
    NoneReranker,
    Reranker,
)
from workers.rerank.onnx_cross_encoder import OnnxCrossEncoder


def rerank_models_dir(settings: Settings) -> Path:
    """Where trained rerank models live: ``<infra.local_dir>/models/rerank/``."""
    return settings.infra.local_dir / "models" / "rerank"


def onnx_model_dir(settings: RerankSettings, models_dir: Path | None) -> Path:
    """The ONNX reranker's directory: ``rerank.model`` when set, else
    ``<models_dir>/<rerank.onnx_model>``.

    Raises:
        ConfigurationError: neither ``rerank.model`` nor ``models_dir`` is given.
    """
    if settings.model:
        return Path(settings.model)
    if models_dir is None:
        raise ConfigurationError("rerank.backend=onnx needs rerank.model (a model directory)")
    return models_dir / settings.onnx_model


def make_reranker(
    settings: RerankSettings, llm_base_url: str | None, *, models_dir: Path | None = None
) -> Reranker:
    """The configured reranker, not yet warmed up (call ``warm_up()`` once at start-up).

    Args:
        settings: ``backend`` picks the class; ``model``, ``batch_size``, ``max_length``,
            ``threads`` configure it.
        llm_base_url: base URL of the OpenAI-compatible server (``backend="llm"`` only).
        models_dir: where ``onnx`` looks for ``rerank.onnx_model`` when ``rerank.model`` is
            unset (:func:`rerank_models_dir`).

    Raises:
        ConfigurationError: ``cross-encoder`` without ``model`` or without the ``torch`` extra
            installed (the message names ``pip install -e '.[torch]'``), ``onnx`` without a
            model directory, or ``llm`` without a base URL. A directory that lacks the model's
            files is reported by ``warm_up()``.
    """
    if settings.backend == "none":
        return NoneReranker()
    if settings.backend == "onnx":
        return OnnxCrossEncoder(
            onnx_model_dir(settings, models_dir),
            batch_size=settings.batch_size,
            max_length=settings.max_length,
            num_threads=settings.threads,
        )
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
