"""Follow the embedding model the index alias records, so no process embeds with another one.

``ragstream index rebuild`` can swap the chunk alias to an index built with another model of the
same dimension. A process that kept embedding with the model it started with would then search
or write vectors of two models in one space: no error, garbage ranks. :class:`ModelFollower`
wraps a process's cached embedder and re-reads the alias's recorded model (``GET
<alias>/_mapping``, the ``_meta`` that :func:`index.schema.mapping` writes) at most every
``embedding.model_check_interval_s``:

- the same model: nothing changes (one cheap request per interval);
- another model this deployment can build (an installed ONNX catalog model whose
  ``<name>@<sha prefix>`` is the recorded id, or the sentence-transformers model of the settings
  when torch is installed): it is loaded and used from then on (log ``embedding.model_switched``,
  counter ``ragstream_embedding_model_switches_total``); its vectors are cached under its own
  model id, like every vector of the embedding cache;
- a model it cannot build: every :meth:`ModelFollower.embed` raises
  :class:`~index.schema.EmbeddingModelUnavailableError` (queries get an
  ``EMBEDDING_MODEL_MISMATCH`` response, documents fail with that reason) until the alias
  records a buildable model again.

The follower also names the physical index its model belongs to (:attr:`ModelFollower.index`):
writers write into that index and the retrieval pool searches it, so vectors of a model only
ever meet an index of that model, even in the interval before a process notices a swap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
from elasticsearch import ApiError, Elasticsearch, TransportError
from prometheus_client import Counter

from index.schema import EmbeddingModelMismatchError, EmbeddingModelUnavailableError, recorded_model
from ingest.embedding import CachedEmbedder, Embedder, SentenceTransformerEmbedder, Vectors
from ingest.onnx_embedding import ONNX_MODELS, OnnxEmbedder, Role
from ragstream.errors import ConfigurationError, TransientError
from ragstream.extras import TORCH_MODULES, missing_modules
from ragstream.settings import Settings

log = structlog.get_logger(__name__)

MODEL_SWITCHES = Counter(
    "ragstream_embedding_model_switches_total",
    "Embedding model changes a process followed (switched) or could not follow (unavailable).",
    ["role", "outcome"],
)
for _role in ("query", "passage"):
    for _outcome in ("switched", "unavailable"):
        MODEL_SWITCHES.labels(_role, _outcome)


@dataclass(frozen=True, slots=True)
class AliasModel:
    """What the alias points at: the physical ``index`` and the ``model_id``/``dims`` its
    mapping records (``index`` ``None``: no alias yet; ``model_id`` ``None``: not recorded)."""

    index: str | None
    model_id: str | None
    dims: int | None


def read_alias_model(es: Elasticsearch, alias: str) -> AliasModel:
    """The index behind ``alias`` and its recorded model, in one ``GET <alias>/_mapping``.

    Raises:
        TransientError: Elasticsearch unreachable or failing (a missing alias is not an error).
    """
    try:
        body = es.indices.get_mapping(index=alias).body
    except ApiError as exc:
        if exc.meta.status == 404:
            return AliasModel(None, None, None)
        raise TransientError(f"reading the mapping of {alias!r} failed: {exc}") from exc
    except TransportError as exc:
        raise TransientError(f"reading the mapping of {alias!r} failed: {exc}") from exc
    if not body:
        return AliasModel(None, None, None)
    name = sorted(body)[-1]
    model_id, dims = recorded_model(body[name]["mappings"])
    return AliasModel(name, model_id, dims)


def model_builder(
    settings: Settings, role: Role = "passage", num_threads: int = 0
) -> Callable[[str], Embedder | None]:
    """``build(model_id)``: a not-yet-loaded model of this deployment whose id is ``model_id``,
    or ``None`` when none is.

    Candidates: the ONNX catalog model named by the id's prefix (``<name>@<sha prefix>``) in
    ``embedding.onnx_dir`` (when it is the configured ``onnx_model``) or
    ``<infra.local_dir>/models/<name>/``, and the sentence-transformers model of
    ``embedding.model_path`` when torch and sentence-transformers are installed. A candidate
    counts only if its files hash to the recorded id (same name, other weights: no).
    """
    emb = settings.embedding
    # Candidates by name, kept: each hashes its files once (a model installed later is seen,
    # as a missing file leaves its id uncomputed).
    candidates: dict[str, Embedder] = {}

    def candidate(name: str) -> Embedder | None:
        if name not in candidates:
            spec = ONNX_MODELS.get(name)
            if spec is not None:
                folder = (
                    emb.onnx_dir
                    if emb.onnx_dir is not None and emb.onnx_model == name
                    else settings.infra.local_dir.resolve() / "models" / name
                )
                candidates[name] = OnnxEmbedder(
                    folder, spec, role=role, batch_size=emb.batch_size, num_threads=num_threads
                )
            elif not missing_modules(TORCH_MODULES):
                candidates[name] = SentenceTransformerEmbedder.from_settings(
                    emb, num_threads=num_threads
                )
        return candidates.get(name)

    def build(model_id: str) -> Embedder | None:
        name = model_id.split("@", 1)[0]
        model = candidate(name if name in ONNX_MODELS else "sentence-transformers")
        return model if model is not None and _id_or_none(model) == model_id else None

    return build


def _id_or_none(model: Embedder) -> str | None:
    try:
        return model.model_id
    except ConfigurationError:  # files not installed
        return None


class ModelFollower:
    """An embedder that keeps to the model the index alias records (see the module docstring).

    Args:
        embedder: the process's configured model behind its cache; the cache is kept for the
            models switched to (its keys hold the model id).
        read: reads the alias (:func:`read_alias_model` bound to a client and alias).
        build: builds a model by its id (:func:`model_builder`), ``None`` when it cannot.
        alias: the alias followed (for messages).
        interval_s: the most seconds between two reads of the alias.
        role: ``query`` or ``passage`` (metric label).
        clock: monotonic seconds (a fake in tests).

    Attributes:
        embedder: the current model behind the cache.
        index: the physical index of the current model (``None`` before the alias exists).
        on_switch: callables run with the new embedder after a switch (e.g. refit a router).
    """

    def __init__(
        self,
        embedder: CachedEmbedder,
        *,
        read: Callable[[], AliasModel],
        build: Callable[[str], Embedder | None],
        alias: str,
        interval_s: float,
        role: Role = "passage",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.embedder = embedder
        self.index: str | None = None
        self.on_switch: list[Callable[[CachedEmbedder], None]] = []
        self._read = read
        self._build = build
        self._alias = alias
        self._interval_s = interval_s
        self._role: Role = role
        self._clock = clock
        self._checked_at: float | None = None
        self._error: EmbeddingModelMismatchError | None = None
        self._lock = threading.RLock()

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        embedder: CachedEmbedder,
        es: Elasticsearch,
        *,
        role: Role = "passage",
        num_threads: int = 0,
    ) -> ModelFollower:
        """A follower of ``settings.elasticsearch.index_alias`` every
        ``settings.embedding.model_check_interval_s``, building models as :func:`model_builder`."""
        alias = settings.elasticsearch.index_alias
        return cls(
            embedder,
            read=lambda: read_alias_model(es, alias),
            build=model_builder(settings, role=role, num_threads=num_threads),
            alias=alias,
            interval_s=settings.embedding.model_check_interval_s,
            role=role,
        )

    # -- the Embedder protocol -----------------------------------------------------------------

    @property
    def model_id(self) -> str:
        """The current model's id."""
        return self.embedder.model_id

    @property
    def cache_namespace(self) -> str:
        """The current model's cache namespace."""
        return self.embedder.cache_namespace

    @property
    def dim(self) -> int:
        """The current model's dimension."""
        return self.embedder.dim

    def warm_up(self) -> None:
        """Load the current model."""
        self.embedder.warm_up()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Follow the alias (:meth:`follow`) and embed ``texts`` with the current model.

        Returns:
            ``(len(texts), dim)`` float32, L2-normalised rows in input order.

        Raises:
            EmbeddingModelUnavailableError: the alias records a model this process cannot build.
            EmbeddingModelMismatchError: an unrecorded index of another dimension.
            TransientError: the alias could not be read.
        """
        return self.embed_for_index(texts)[0]

    def embed_for_index(self, texts: Sequence[str]) -> tuple[Vectors, str, str | None]:
        """:meth:`embed`, also returning the model id used and the physical index of that
        model (``None``: no alias yet), read together so a swap in between cannot part them.
        Raises as :meth:`embed`."""
        with self._lock:
            self.follow()
            embedder, index = self.embedder, self.index
        return embedder.embed(texts), embedder.model_id, index

    # -- following -----------------------------------------------------------------------------

    def start(self) -> bool:
        """The first :meth:`follow`, at a process's start: a model that cannot be followed is
        logged (and raised by every :meth:`embed`), not raised here, so the process starts and
        answers each request with the reason. Returns whether it can embed.

        Raises:
            TransientError: the alias could not be read.
        """
        try:
            self.follow(force=True)
        except EmbeddingModelMismatchError:
            return False
        return True

    def follow(self, force: bool = False) -> None:
        """Re-read the alias if ``interval_s`` has passed since the last read (or ``force``),
        switch models if it records another buildable one, and raise if it records one that
        cannot be followed.

        Raises:
            EmbeddingModelMismatchError: (or its subclass ``EmbeddingModelUnavailableError``)
                the alias records a model this process cannot embed with.
            TransientError: the alias could not be read.
        """
        with self._lock:
            now = self._clock()
            if force or self._checked_at is None or now - self._checked_at >= self._interval_s:
                seen = self._read()
                self._checked_at = now
                self._apply(seen)
            if self._error is not None:
                raise self._error

    def write_index(self, model_id: str) -> str | None:
        """Where to write vectors of ``model_id``, re-reading the alias first if the interval
        has passed: the physical index of that model (the alias itself while it does not
        exist yet), or ``None`` when the alias no longer records ``model_id`` (embed again).

        Raises as :meth:`follow`.
        """
        with self._lock:
            self.follow()
            if self.embedder.model_id != model_id:
                return None
            return self.index or self._alias

    def _apply(self, seen: AliasModel) -> None:
        current = self.embedder
        if seen.index is None:  # no index yet: the first write creates it with this model
            self.index, self._error = None, None
            return
        if seen.model_id is None or seen.model_id == current.model_id:
            if seen.dims is not None and seen.dims != current.dim:
                self._fail(
                    EmbeddingModelMismatchError(
                        seen.index, seen.model_id, seen.dims, current.model_id, current.dim
                    )
                )
                return
            self.index, self._error = seen.index, None
            return
        try:
            model = self._build(seen.model_id)
            if model is not None:
                model.warm_up()
        except ConfigurationError as exc:
            log.warning("embedding.model_load_failed", model=seen.model_id, error=str(exc)[:300])
            model = None
        if model is None or (seen.dims is not None and model.dim != seen.dims):
            self._fail(
                EmbeddingModelUnavailableError(
                    seen.index, seen.model_id, seen.dims, current.model_id, current.dim
                )
            )
            return
        self.embedder = CachedEmbedder(model, current.cache)
        self.index, self._error = seen.index, None
        MODEL_SWITCHES.labels(self._role, "switched").inc()
        log.info(
            "embedding.model_switched",
            alias=self._alias,
            index=seen.index,
            role=self._role,
            **{"from": current.model_id, "to": model.model_id},
        )
        for callback in self.on_switch:
            callback(self.embedder)

    def _fail(self, error: EmbeddingModelMismatchError) -> None:
        if self._error is None or str(self._error) != str(error):  # log and count once
            MODEL_SWITCHES.labels(self._role, "unavailable").inc()
            log.error(
                "embedding.model_unavailable", alias=self._alias, role=self._role, error=str(error)
            )
        self._error = error
        self.index = None
