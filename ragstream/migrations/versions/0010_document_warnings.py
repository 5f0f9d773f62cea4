"""documents.warnings: what ingest repaired in a document's input

Revision ID: 0010_document_warnings
Revises: 0009_ingest_event_order
Create Date: 2026-12-08 09:00:00.000000

A lone surrogate in a record's text, title or metadata is replaced by U+FFFD; the document's
row keeps one warning line per repair (JSON list, NULL: none), and ``GET /v1/documents/{id}``
shows them as ``warnings``. See ingest/pipeline.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_document_warnings"
down_revision: str | None = "0009_ingest_event_order"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warnings", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_column("warnings")
