"""The OpenAI vector-store surface's request and response bodies, in OpenAI's shapes
(https://platform.openai.com/docs/api-reference/vector-stores): ``file``, ``vector_store``,
``vector_store.file``, ``list`` (``data``, ``first_id``, ``last_id``, ``has_more``) and
``vector_store.search_results.page``. Times are Unix seconds, as OpenAI's are.

Bodies are strict (:class:`api.bodies.Body`): an unknown field is a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from api.bodies import Body

#: An attribute key a filter can name: 1-64 letters, digits and ``_`` (a document's metadata
#: key, :data:`topics.metadata.KEY`).
ATTRIBUTE_KEY = r"^[A-Za-z0-9_]{1,64}$"
#: An attribute value: text (at most 512 characters), a number or a boolean, as OpenAI's.
AttributeValue = Annotated[str, Field(max_length=512)] | bool | int | float
#: Attributes: at most 16 keys of :data:`ATTRIBUTE_KEY`, stated so (no other key is valid).
Attributes = Annotated[
    dict[Annotated[str, Field(pattern=ATTRIBUTE_KEY)], AttributeValue],
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 16,
            "patternProperties": {
                ATTRIBUTE_KEY: {
                    "anyOf": [
                        {"type": "string", "maxLength": 512},
                        {"type": "boolean"},
                        {"type": "number"},
                    ]
                }
            },
            "additionalProperties": False,
        }
    ),
]
#: A store's metadata: at most 16 pairs of text, as OpenAI's.
StoreMetadata = dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]]
#: The purposes a file may be uploaded for: files to search.
Purpose = Literal["assistants", "user_data"]
#: An id in a path: ``file-<hex>`` or ``vs_<hex>`` (another id is a 404).
ID_MAX = 64


class AutoChunking(Body):
    """``chunking_strategy``: only ``auto`` (the ingest pipeline's own chunking)."""

    type: Literal["auto"] = "auto"


class VectorStoreCreate(Body):
    """``POST /v1/vector_stores``."""

    name: str | None = Field(default=None, max_length=256, pattern=r"^[^\x00]*$")
    metadata: StoreMetadata | None = Field(default=None, max_length=16)
    file_ids: list[Annotated[str, Field(max_length=ID_MAX)]] = Field(
        default_factory=list, max_length=100, description="Files to attach at once."
    )
    chunking_strategy: AutoChunking | None = None


class VectorStoreUpdate(Body):
    """``POST /v1/vector_stores/{id}``: a new name and/or metadata (absent or null: kept)."""

    name: str | None = Field(default=None, max_length=256, pattern=r"^[^\x00]*$")
    metadata: StoreMetadata | None = Field(default=None, max_length=16)


class VectorStoreFileUpdate(Body):
    """``POST /v1/vector_stores/{id}/files/{file_id}``: the file's new attributes (its
    document is ingested again with them as its metadata)."""

    attributes: Attributes | None = Field(default=None, max_length=16)


class VectorStoreFileCreate(Body):
    """``POST /v1/vector_stores/{id}/files``: attach an uploaded file."""

    file_id: str = Field(min_length=1, max_length=ID_MAX)
    attributes: Attributes | None = Field(
        default=None,
        max_length=16,
        description="The file's attributes: the document's metadata, which filters compare "
        "(numbers as numbers, ISO 8601 dates as dates).",
    )
    chunking_strategy: AutoChunking | None = None


class ComparisonFilter(Body):
    """``{key, type, value}``: compare the attribute ``key`` with ``value``."""

    type: Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
    key: str = Field(pattern=ATTRIBUTE_KEY)
    value: (
        Annotated[str, Field(max_length=512)]
        | bool
        | int
        | float
        | Annotated[
            list[Annotated[str, Field(max_length=512)] | int | float],
            Field(min_length=1, max_length=100),
        ]
    )


class CompoundFilter(Body):
    """``{type: and|or, filters}``: every filter, or any of them."""

    type: Literal["and", "or"]
    filters: list[ComparisonFilter | CompoundFilter] = Field(min_length=1, max_length=20)


#: A search's filter (the ``type`` tells which; a union, not a discriminated one, because
#: :class:`~api.bodies.Body` reads every field before validation).
SearchFilter = ComparisonFilter | CompoundFilter


class RankingOptions(Body):
    """``ranking_options``: ``ranker`` (every one of OpenAI's names is the hybrid ranker) and
    ``score_threshold`` (results scoring below it are left out)."""

    ranker: Literal["none", "auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(default=0.0, ge=0.0)


class SearchBody(Body):
    """``POST /v1/vector_stores/{id}/search``."""

    query: (
        Annotated[str, Field(min_length=1, max_length=4000, pattern=r"^[^\x00]*$")]
        | Annotated[
            list[Annotated[str, Field(min_length=1, max_length=4000, pattern=r"^[^\x00]*$")]],
            Field(min_length=1, max_length=10),
        ]
    )
    max_num_results: int = Field(default=10, ge=1, le=50)
    filters: SearchFilter | None = None
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False
    search_mode: Literal["hybrid", "keyword", "vector"] | None = Field(
        default=None,
        description="OGX's ranker choice: hybrid (the default), keyword (BM25) or vector (kNN).",
    )
    next_page: str | None = Field(
        default=None, max_length=512, description="The `next_page` of the previous page."
    )


class FileObject(BaseModel):
    """A ``file``."""

    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileCounts(BaseModel):
    """How many of a store's files are in each status."""

    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    total: int = 0


class VectorStoreObject(BaseModel):
    """A ``vector_store``: ``completed`` once none of its files is ``in_progress``."""

    id: str
    object: Literal["vector_store"] = "vector_store"
    created_at: int
    name: str
    usage_bytes: int
    file_counts: FileCounts
    status: Literal["in_progress", "completed", "expired"]
    metadata: dict[str, str] = Field(default_factory=dict)
    last_active_at: int | None = None
    expires_after: Any | None = None
    expires_at: int | None = None


class LastError(BaseModel):
    """Why a file failed: OpenAI's code and the ingest path's reason."""

    code: Literal["server_error", "unsupported_file", "invalid_file"]
    message: str


class VectorStoreFileObject(BaseModel):
    """A ``vector_store.file``: ``in_progress`` until the ingest pool applied its event."""

    id: str
    object: Literal["vector_store.file"] = "vector_store.file"
    created_at: int
    vector_store_id: str
    status: Literal["in_progress", "completed", "cancelled", "failed"]
    usage_bytes: int
    last_error: LastError | None = None
    attributes: dict[str, str | bool | int | float] = Field(default_factory=dict)
    chunking_strategy: dict[str, Any] = Field(default_factory=lambda: {"type": "auto"})


class Deleted(BaseModel):
    """``{id, object, deleted: true}`` (``file``, ``vector_store.deleted``,
    ``vector_store.file.deleted``)."""

    id: str
    object: str
    deleted: bool = True


class FileList(BaseModel):
    """A ``list`` of files."""

    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class VectorStoreList(BaseModel):
    """A ``list`` of vector stores."""

    object: Literal["list"] = "list"
    data: list[VectorStoreObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class VectorStoreFileList(BaseModel):
    """A ``list`` of a store's files."""

    object: Literal["list"] = "list"
    data: list[VectorStoreFileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class TextContent(BaseModel):
    """A passage's text."""

    type: Literal["text"] = "text"
    text: str


class SearchResult(BaseModel):
    """One passage: its file, score (docs/vector-stores.md#scores), attributes and text."""

    file_id: str
    filename: str
    score: float
    attributes: dict[str, str | bool | int | float] = Field(default_factory=dict)
    content: list[TextContent]


class SearchPage(BaseModel):
    """A ``vector_store.search_results.page``: ``next_page`` is the cursor of the next page
    (``null`` on the last)."""

    object: Literal["vector_store.search_results.page"] = "vector_store.search_results.page"
    search_query: str | list[str]
    data: list[SearchResult]
    has_more: bool = False
    next_page: str | None = None


class FileUpload(Body):
    """``POST /v1/files``: the form's fields beside ``file``."""

    purpose: Purpose = Field(description="What the file is for: searched in vector stores.")
