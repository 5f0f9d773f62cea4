"""Optional dependency groups of ``pyproject.toml`` and the error when one is missing.

The default install runs the ONNX embedder on onnxruntime's CPU build. The ``torch`` extra adds
torch, sentence-transformers and the packaged all-MiniLM-L6-v2: the ``sentence-transformers``
embedder backend, the cross-encoder reranker, GPUs. PyPI's Linux torch wheel is the CUDA build,
so a machine without a GPU is better off without it (docs/getting-started.md).
"""

from __future__ import annotations

from importlib.util import find_spec

from ragstream.errors import ConfigurationError

#: How a checkout gets the torch stack.
TORCH_EXTRA_INSTALL = "pip install -e '.[torch]'"
#: The modules the torch extra provides that the code imports.
TORCH_MODULES = ("torch", "sentence_transformers")


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The names of ``modules`` that cannot be imported (found without importing them)."""
    return [name for name in modules if find_spec(name) is None]


def require_torch(feature: str, instead: str) -> None:
    """Check that the ``torch`` extra is installed before ``feature`` uses it.

    Args:
        feature: what needs it, for the message (``"rerank.backend=cross-encoder"``).
        instead: the choice that needs no torch, for the message (``"rerank.backend=none"``).

    Raises:
        ConfigurationError: torch or sentence-transformers is not installed; the message names
            ``pip install -e '.[torch]'`` (``make install EXTRAS=torch``) and ``instead``.
    """
    missing = missing_modules(TORCH_MODULES)
    if missing:
        raise ConfigurationError(
            f"{feature} needs the torch extra ({', '.join(missing)} not installed): run "
            f"`{TORCH_EXTRA_INSTALL}` (or `make install EXTRAS=torch`), or choose {instead}"
        )
