"""Answer generation: a budgeted, citation-numbered prompt and the model backends.

- :mod:`workers.generation.prompt`: :class:`PromptBuilder`, :class:`Prompt`, :class:`TokenCounter`.
- :mod:`workers.generation.llamacpp_tokens`: :class:`ServerTokenCounter`, :func:`n_ctx_per_slot`.
- :mod:`workers.generation.backend`: the :class:`GenerationBackend` protocol and its data.
- :mod:`workers.generation.openai_compat`: llama.cpp, ``vllm serve`` or any OpenAI-compatible
  server (the one backend).
- :mod:`workers.generation.generator`: the :class:`Generator` of the generation pools (one
  batch: budget, generate concurrently with retries, answer) and its :class:`TokenSink`.
"""

from topics.answers import NOT_IN_DOCUMENTS
from workers.generation.backend import (
    GenerationBackend,
    GenerationRequest,
    GenerationResult,
    OnToken,
    OnTokenFor,
)
from workers.generation.llamacpp_tokens import ServerTokenCounter, n_ctx_per_slot
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import (
    INSTRUCTION,
    Prompt,
    PromptBuilder,
    PromptStyle,
    TokenCounter,
)

__all__ = [
    "INSTRUCTION",
    "NOT_IN_DOCUMENTS",
    "GenerationBackend",
    "GenerationRequest",
    "GenerationResult",
    "OnToken",
    "OnTokenFor",
    "OpenAICompatibleBackend",
    "Prompt",
    "PromptBuilder",
    "PromptStyle",
    "ServerTokenCounter",
    "TokenCounter",
    "n_ctx_per_slot",
]
