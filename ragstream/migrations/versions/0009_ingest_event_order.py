"""ingest order by the write path: a document's sequence, its last event id, applied event ids

Revision ID: 0009_ingest_event_order
Revises: 0008_document_last_event_at
Create Date: 2026-12-07 09:00:00.000000

Which change of a document wins is decided by the order the write path applies them in (the
document's ``rag.ingest`` partition), never by a producer's clock; a copy of an event already
applied is a no-op, found by ``(tenant, event_id)`` in ``ingest_events``. Rows before this
revision have ``sequence`` 0 and no event recorded. See ingest/order.py and docs/write-path.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_ingest_event_order"
down_revision: str | None = "0008_document_last_event_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sequence", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("last_event_id", sa.String(length=128), nullable=True))
    op.create_table(
        "ingest_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("doc_id", sa.String(length=512), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant", "event_id", name="uq_ingest_events_tenant_event"),
    )
    op.create_index("ix_ingest_events_applied_at", "ingest_events", ["applied_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_ingest_events_applied_at", table_name="ingest_events")
    op.drop_table("ingest_events")
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_column("last_event_id")
        batch_op.drop_column("sequence")
