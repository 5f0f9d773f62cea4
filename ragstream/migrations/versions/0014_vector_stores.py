"""files, vector_stores, vector_store_files: the OpenAI vector-store surface

Revision ID: 0014_vector_stores
Revises: 0013_document_last_rejected
Create Date: 2026-12-07 08:00:00.000000

``files``: uploads of ``POST /v1/files`` (``file-<hex>``: name, size, purpose, the stored
bytes' path and format). ``vector_stores``: named collections of a tenant's documents
(``vs_<hex>``). ``vector_store_files``: a file attached to a store, one row per
``(store_id, file_id)``: the document it was ingested as and the ``rag.ingest`` event that
carried it (its outcome in ``documents``/``ingest_events`` is the attachment's status), with
the file's attributes. Deleted files and stores keep their rows (``deleted``). See
api/vector_stores/ and docs/vector-stores.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_vector_stores"
down_revision: str | None = "0013_document_last_rejected"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("content_type", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_files_tenant"), ["tenant"], unique=False)
    op.create_table(
        "vector_stores",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("vector_stores", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_vector_stores_tenant"), ["tenant"], unique=False)
    op.create_table(
        "vector_store_files",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("store_id", sa.String(length=64), nullable=False),
        sa.Column("file_id", sa.String(length=64), nullable=False),
        sa.Column("doc_id", sa.String(length=512), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("store_id", "file_id", name="uq_vector_store_files_store_file"),
    )
    with op.batch_alter_table("vector_store_files", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_vector_store_files_store_id"), ["store_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_vector_store_files_tenant"), ["tenant"], unique=False)


def downgrade() -> None:
    op.drop_table("vector_store_files")
    op.drop_table("vector_stores")
    op.drop_table("files")
