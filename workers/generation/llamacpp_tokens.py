"""Token counts and slot size from a llama.cpp server (its ``/tokenize`` and ``/props``).

Counting with the server's own tokenizer is exact for the model it serves, whatever GGUF is
loaded, at the cost of one local HTTP round trip per uncached text (~1 ms on loopback).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
import structlog

from workers.errors import BackendUnavailableError, MalformedGenerationError

log = structlog.get_logger(__name__)


class ServerTokenCounter:
    """A :class:`~workers.generation.prompt.TokenCounter` backed by ``POST /tokenize``.

    Counts include the BOS token the server adds to a prompt (``add_special: true``).
    The request carries the text under both servers' field names, llama.cpp's ``content`` and
    vLLM's ``prompt`` (each ignores the other's); both answer ``{"tokens": [...]}``, so
    generation-large behind ``vllm serve`` is counted with the served model's tokenizer too.
    Results are kept in an LRU keyed by the text's BLAKE2b digest. Thread-safe; it blocks,
    so async callers run :meth:`PromptBuilder.build` in a thread (``asyncio.to_thread``).

    Args:
        base_url: ``http://host:port`` of the llama.cpp server.
        timeout_s: Timeout of one request, in seconds.
        cache_size: Texts kept in the LRU.
        max_concurrency: Uncached texts of one :meth:`count` call tokenized in parallel.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        cache_size: int = 8192,
        max_concurrency: int = 8,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(
            timeout=timeout_s, limits=httpx.Limits(max_connections=max_concurrency)
        )
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="tokenize")
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _tokenize(self, text: str) -> int:
        try:
            body = {"content": text, "prompt": text, "add_special": True}
            response = self._client.post(f"{self.base_url}/tokenize", json=body)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise BackendUnavailableError(f"POST {self.base_url}/tokenize failed: {exc}") from exc
        try:
            return len(response.json()["tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedGenerationError(
                f"POST {self.base_url}/tokenize: no token list in {response.text[:200]!r}"
            ) from exc

    def count(self, texts: Sequence[str]) -> list[int]:
        """Return the token count of each text (server tokenizer, BOS included).

        Args:
            texts: Texts to count.

        Returns:
            One count per text, in order.

        Raises:
            BackendUnavailableError: The server cannot be reached or answers an error.
            MalformedGenerationError: Its answer holds no ``tokens`` list.
        """
        keys = [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts]
        with self._lock:
            known = {k: self._cache[k] for k in keys if k in self._cache}
            for key in known:
                self._cache.move_to_end(key)
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in known}
        if len(missing) == 1:
            ((key, text),) = missing.items()
            known[key] = self._tokenize(text)
        elif missing:
            counts = self._pool.map(self._tokenize, missing.values())
            known.update(zip(missing.keys(), counts, strict=True))
        with self._lock:
            for key in missing:
                self._cache[key] = known[key]
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return [known[k] for k in keys]

    def close(self) -> None:
        """Close the HTTP client and the thread pool."""
        self._pool.shutdown(wait=False)
        self._client.close()


def n_ctx_per_slot(
    base_url: str, fallback_n_ctx: int, fallback_n_parallel: int, timeout_s: float = 5.0
) -> int:
    """Context window of one server slot, in tokens.

    Reads ``default_generation_settings.n_ctx`` from llama.cpp's ``GET /props``; when the
    server does not answer (or is not llama.cpp) falls back to ``n_ctx // n_parallel``,
    which is how llama.cpp splits its context across slots.

    Args:
        base_url: ``http://host:port`` of the server.
        fallback_n_ctx: Configured total context (``settings.llm.n_ctx``).
        fallback_n_parallel: Configured slots (``settings.llm.n_parallel``).
        timeout_s: Timeout of the request, in seconds.

    Returns:
        Tokens per slot.
    """
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/props", timeout=timeout_s)
        response.raise_for_status()
        return int(response.json()["default_generation_settings"]["n_ctx"])
    except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
        fallback = fallback_n_ctx // fallback_n_parallel
        log.warning("n_ctx per slot not readable, using settings", error=str(exc), n_ctx=fallback)
        return fallback
