"""SQL rows of the OpenAI vector-store surface (``docs/vector-stores.md``).

- :class:`StoredFile`: an uploaded file (``POST /v1/files``), ``file-<32 hex>``: its name and
  size and where its bytes lie (the tenant's uploads, :func:`ingest.uploads.store_document`).
- :class:`VectorStore`: a named collection of a tenant's documents, ``vs_<32 hex>``.
- :class:`VectorStoreFile`: a file attached to a store: the document it was ingested as
  (``doc_id`` ``<store id>/<file id>``) and the ``rag.ingest`` event that carried it, whose
  outcome in the document registry is the attachment's status.

Deletes of files and stores keep their row with ``deleted`` set (an id is never reused); a
file detached from a store loses its row (its document is deleted).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Boolean, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ragstream.db.models import Base, utcnow


class StoredFile(Base):
    """An uploaded file of a tenant (``POST /v1/files``).

    ``path``: the stored bytes (shared by every upload of the same bytes, so never removed
    with the row); ``content_type``: the parser's short format name (``pdf``, ``markdown``...).
    """

    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    filename: Mapped[str] = mapped_column(Text)
    bytes: Mapped[int] = mapped_column(Integer)
    purpose: Mapped[str] = mapped_column(String(32))
    content_type: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class VectorStore(Base):
    """A named collection of a tenant's documents (``POST /v1/vector_stores``)."""

    __tablename__ = "vector_stores"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(Text, default="")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class VectorStoreFile(Base):
    """A file of a store: ingested as the document ``doc_id`` by the ``rag.ingest`` event
    ``event_id`` (its outcome in the registry is the status), with the file's ``attributes``
    (the document's metadata besides the store's own keys)."""

    __tablename__ = "vector_store_files"
    __table_args__ = (
        UniqueConstraint("store_id", "file_id", name="uq_vector_store_files_store_file"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    store_id: Mapped[str] = mapped_column(String(64), index=True)
    file_id: Mapped[str] = mapped_column(String(64))
    doc_id: Mapped[str] = mapped_column(String(512))
    event_id: Mapped[str] = mapped_column(String(128))
    attributes: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
