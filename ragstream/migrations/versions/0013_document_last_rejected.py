"""documents.last_rejected_*: the last rag.ingest event the write path did not apply

Revision ID: 0013_document_last_rejected
Revises: 0012_query_feedback
Create Date: 2026-12-08 12:00:00.000000

An event of a document that the write path screens out (a copy of an applied event:
``duplicate``; a ``created_at`` too far ahead: ``refused``) leaves the document as it was; its
row keeps the last such event: its ``event_id``, its outcome, the reason and when (the write
path's clock). All four NULL: none recorded (and rows before this revision). An applied change
after it keeps the record. ``GET /v1/documents/{id}`` shows it as ``last_rejected``. See
ingest/order.py and docs/write-path.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_document_last_rejected"
down_revision: str | None = "0012_query_feedback"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("last_rejected_event_id", sa.String(length=128), nullable=True)
        )
        batch_op.add_column(sa.Column("last_rejected_status", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("last_rejected_reason", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("last_rejected_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_column("last_rejected_at")
        batch_op.drop_column("last_rejected_reason")
        batch_op.drop_column("last_rejected_status")
        batch_op.drop_column("last_rejected_event_id")
