"""The chunk index's schema, below the write path and the read path: what both must agree on.

The mapping of the chunk index (fields, analyzers, the typed metadata companions, the
definition entries' fields, the HNSW options), the deterministic ids of chunks and definition
entries, the filter clauses that keep chunks or definition entries, the lookup keys of a
documented name, and the embedding model an index records in its ``_meta`` (checked by every
reader and writer: :func:`check_index_model`). The write path (:mod:`ingest.index`: the alias,
bulk writes) builds indices from it; the read path (:mod:`workers.retrieval`) searches by it.
Beside it: :mod:`index.stemming` (the client-side stemming both sides apply) and
:mod:`index.versions` (the per-tenant index version in Redis that answer caches are keyed by).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import structlog
from elasticsearch import Elasticsearch

from ragstream.errors import ConfigurationError
from ragstream.settings import ElasticsearchSettings
from topics.metadata import BOOL_FIELD, DATE_FIELD, NUM_FIELD

log = structlog.get_logger(__name__)


#: The client-stemmed BM25 fields (``index/stemming.py``): stems joined by spaces, split by the
#: built-in ``whitespace`` analyzer (the integ-test distribution has no stemmer of its own).
STEMMED_FIELDS: dict[str, dict[str, Any]] = {
    "text_stemmed": {"type": "text", "analyzer": "whitespace"},
    "title_stemmed": {"type": "text", "analyzer": "whitespace"},
}


class EmbeddingModelMismatchError(ConfigurationError):
    """The index was built with another embedding model (id or dimension) than the configured
    one: its vectors and the query vectors are not comparable.

    Attributes:
        index: the index or alias checked.
        index_model, index_dims: what the index records (``None``: not recorded).
        model_id, dims: the configured embedder's.
    """

    code = "EMBEDDING_MODEL_MISMATCH"

    def __init__(
        self,
        index: str,
        index_model: str | None,
        index_dims: int | None,
        model_id: str,
        dims: int,
    ) -> None:
        super().__init__(
            f"index {index!r} was built with embedding model {index_model or 'unrecorded'} "
            f"({index_dims}-d), but the configured embedder is {model_id} ({dims}-d); set "
            "RAGSTREAM_EMBEDDING__* to the index's model, or re-embed into a new index with "
            "`ragstream index rebuild`"
        )
        self.index = index
        self.index_model = index_model
        self.index_dims = index_dims
        self.model_id = model_id
        self.dims = dims


class EmbeddingModelUnavailableError(EmbeddingModelMismatchError):
    """The index records a model that this deployment cannot build (not installed, or torch
    missing): a running pool or writer cannot follow it (``ingest/model_follow.py``)."""

    def __init__(
        self, index: str, index_model: str, index_dims: int | None, model_id: str, dims: int
    ) -> None:
        super().__init__(index, index_model, index_dims, model_id, dims)
        name = index_model.split("@", 1)[0]
        self.args = (
            f"index {index!r} was built with embedding model {index_model} ({index_dims}-d), "
            f"which this deployment cannot build (still embedding with {model_id}); install it "
            f"(`ragstream infra models install {name}` for an ONNX model) or rebuild the index "
            "with an installed model (`ragstream index rebuild`)",
        )


#: The document's readers on each chunk (``docs/permissions.md``): missing or empty means
#: everyone of the tenant; the searches filter on it with a ``terms`` clause.
ACL_FIELDS: dict[str, Any] = {"principals": {"type": "keyword"}}

#: The typed companions of ``metadata`` (``topics/metadata.py``): one object per type, each
#: key mapped on first use by :data:`TYPED_METADATA_TEMPLATES` (the mapping is otherwise
#: strict). Only values of that type are ever written into each, so a key whose values differ
#: in type across documents cannot make a mapping conflict.
TYPED_METADATA_FIELDS: dict[str, Any] = {
    NUM_FIELD: {"type": "object", "dynamic": True},
    BOOL_FIELD: {"type": "object", "dynamic": True},
    DATE_FIELD: {"type": "object", "dynamic": True},
}
#: Dynamic templates mapping each key of a typed companion: ``double``, ``boolean``, ``date``.
TYPED_METADATA_TEMPLATES: list[dict[str, Any]] = [
    {NUM_FIELD: {"path_match": f"{NUM_FIELD}.*", "mapping": {"type": "double"}}},
    {BOOL_FIELD: {"path_match": f"{BOOL_FIELD}.*", "mapping": {"type": "boolean"}}},
    {
        DATE_FIELD: {
            "path_match": f"{DATE_FIELD}.*",
            "mapping": {"type": "date", "format": "strict_date_optional_time"},
        }
    },
]
#: A typed key past ``index.mapping.total_fields.limit`` (1000 fields by default) is left out
#: of the mapping (listed in the chunk's ``_ignored``) instead of failing the chunk's write:
#: range filters do not see it, term filters on its text still do.
IGNORE_DYNAMIC_BEYOND_LIMIT = "index.mapping.total_fields.ignore_dynamic_beyond_limit"

#: ``entry`` of a definition entry (a chunk has none): what chunk searches leave out
#: (:data:`CHUNKS_ONLY`) and definition searches keep.
DEFINITION_ENTRY = "definition"
#: The fields of a definition entry (:mod:`ingest.parsers.definitions`) beside the chunk
#: fields it shares (``title`` = its name, ``text`` = signature, summary and example):
#: ``definition.keys`` are its lookup keys (:func:`definition_keys`).
DEFINITION_FIELDS: dict[str, Any] = {
    "entry": {"type": "keyword"},
    "definition": {
        "properties": {
            "name": {"type": "keyword", "ignore_above": 256},
            "keys": {"type": "keyword", "ignore_above": 256},
            "kind": {"type": "keyword"},
            "signature": {"type": "keyword", "index": False, "doc_values": False},
            "summary": {"type": "keyword", "index": False, "doc_values": False},
            "example": {"type": "keyword", "index": False, "doc_values": False},
            "anchor": {"type": "keyword", "index": False, "doc_values": False},
        }
    },
}
#: A filter clause keeping chunks only (no definition entry): every passage search adds it.
CHUNKS_ONLY: dict[str, Any] = {"bool": {"must_not": {"term": {"entry": DEFINITION_ENTRY}}}}
#: A filter clause keeping definition entries only.
DEFINITIONS_ONLY: dict[str, Any] = {"term": {"entry": DEFINITION_ENTRY}}
_CALL_PARENS = re.compile(r"\s*\(\s*\)\s*$")


def definition_keys(name: str) -> list[str]:
    """The lookup keys of a documented or proposed name: lower-cased, a trailing ``()`` and
    surrounding backquotes removed, whitespace collapsed; for a dotted name also each shorter
    tail (``datetime.datetime.now`` → ``datetime.datetime.now``, ``datetime.now``, ``now``), so
    ``makedirs()`` finds ``os.makedirs``; for a command or option written with its arguments
    (``\\dt[S+] [ pattern ]``, ``-p port``) also its first word (``\\dt``, ``-p``).

    Returns:
        The keys, most specific first; empty for an empty name.
    """
    key = " ".join(_CALL_PARENS.sub("", name.strip().strip("`")).lower().split())
    if not key:
        return []
    keys = [key]
    parts = key.split(".")
    if len(parts) > 1 and all(parts):
        keys += [".".join(parts[i:]) for i in range(1, len(parts))]
    if key[0] in "\\-":
        first = re.split(r"[\s\[]", key, maxsplit=1)[0]
        if first and first != key:
            keys.append(first)
    return keys


def definition_text(signature: str, summary: str, example: str) -> str:
    """The searchable text of a definition entry: its signature, its summary and its example,
    one per line, the empty ones left out (the entry's BM25 ``text``; with its name, what is
    embedded; also the text of the entry read back as a passage)."""
    return "\n".join(x for x in (signature, summary, example) if x)


def definition_id(tenant: str, doc_id: str, version: int, n: int) -> str:
    """Deterministic ``_id`` of the ``n``-th definition entry of a document version (its own
    id space beside :func:`chunk_id`)."""
    key = f"{tenant}\0{doc_id}\0{version}\0definition\0{n}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def chunk_id(tenant: str, doc_id: str, version: int, chunk_no: int) -> str:
    """Deterministic chunk ``_id``: 32 hex digits of SHA-256 over its coordinates."""
    key = f"{tenant}\0{doc_id}\0{version}\0{chunk_no}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def mapping(
    dims: int, settings: ElasticsearchSettings, model_id: str | None = None
) -> dict[str, Any]:
    """The chunk index body: settings and a strict mapping.

    Fields: ``text`` and ``title`` (BM25, standard analyzer), ``text_stemmed`` and
    ``title_stemmed`` (client-stemmed, :data:`STEMMED_FIELDS`), ``embedding``
    (``dense_vector``, ``dims`` floats, cosine, HNSW), ids (``tenant``, ``doc_id``,
    ``chunk_id``), ``chunk_no``, ``version``, ``content_hash``, ``source``, ``content_type``,
    ``metadata`` (flattened, so ``metadata.<key>`` term filters work without mapping every key),
    its typed companions ``metadata_num``/``metadata_bool``/``metadata_date``
    (:data:`TYPED_METADATA_FIELDS`, for range and typed term filters),
    ``principals`` (the document's readers, :data:`ACL_FIELDS`), the definition entries' fields
    (:data:`DEFINITION_FIELDS`) and ``indexed_at``. The
    mapping's ``_meta`` records the embedding model (``{"embedding": {"model_id": ...,
    "dims": ...}}``) that :func:`check_index_model` reads.
    """
    return {
        "settings": {
            "number_of_shards": settings.shards,
            "number_of_replicas": settings.replicas,
            IGNORE_DYNAMIC_BEYOND_LIMIT: True,
        },
        "mappings": {
            "dynamic": "strict",
            "dynamic_templates": TYPED_METADATA_TEMPLATES,
            "_meta": {"embedding": {"model_id": model_id, "dims": dims}},
            "properties": {
                **STEMMED_FIELDS,
                "tenant": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "chunk_id": {"type": "keyword"},
                "chunk_no": {"type": "integer"},
                "version": {"type": "integer"},
                "content_hash": {"type": "keyword"},
                "title": {
                    "type": "text",
                    "fields": {"raw": {"type": "keyword", "ignore_above": 512}},
                },
                "text": {"type": "text"},
                "embed_title": {"type": "keyword", "index": False, "doc_values": False},
                "source": {"type": "keyword"},
                "content_type": {"type": "keyword"},
                "lang": {"type": "keyword"},
                "metadata": {"type": "flattened"},
                **TYPED_METADATA_FIELDS,
                **ACL_FIELDS,
                **DEFINITION_FIELDS,
                "indexed_at": {"type": "date"},
                "embedding": {
                    "type": "dense_vector",
                    "dims": dims,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {
                        "type": "hnsw",
                        "m": settings.hnsw_m,
                        "ef_construction": settings.hnsw_ef_construction,
                    },
                },
            },
        },
    }


def index_model(es: Elasticsearch, index: str) -> tuple[str | None, int | None]:
    """``(model_id, dims)`` an index (or the index behind an alias) records: the mapping's
    ``_meta.embedding``, else ``(None, dims of its dense_vector field)`` for an index made
    before the model was recorded.

    Raises:
        elasticsearch.NotFoundError: no such index or alias.
    """
    body = es.indices.get_mapping(index=index).body
    return recorded_model(next(iter(body.values()))["mappings"])


def recorded_model(mappings: dict[str, Any]) -> tuple[str | None, int | None]:
    """``(model_id, dims)`` of one index's ``mappings`` (see :func:`index_model`)."""
    meta = (mappings.get("_meta") or {}).get("embedding") or {}
    dims = meta.get("dims")
    if dims is None:
        dims = mappings.get("properties", {}).get("embedding", {}).get("dims")
    model = meta.get("model_id")
    return (str(model) if model else None), (int(dims) if dims is not None else None)


def check_index_model(es: Elasticsearch, index: str, model_id: str, dims: int) -> None:
    """Refuse an index built with another embedding model than ``model_id``/``dims``.

    An index that records no model (made before models were recorded) is checked on its
    dimension only, with a warning.

    Raises:
        EmbeddingModelMismatchError: the recorded model id or the dimension differs.
        elasticsearch.NotFoundError: no such index or alias.
    """
    recorded, recorded_dims = index_model(es, index)
    if recorded_dims is not None and recorded_dims != dims:
        raise EmbeddingModelMismatchError(index, recorded, recorded_dims, model_id, dims)
    if recorded is None:
        log.warning("index_model_unrecorded", index=index, dims=recorded_dims, model_id=model_id)
    elif recorded != model_id:
        raise EmbeddingModelMismatchError(index, recorded, recorded_dims, model_id, dims)
