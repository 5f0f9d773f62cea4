"""document version guard: when the newest ingest event applied to a document was sent

Revision ID: 0008_document_last_event_at
Revises: 0007_document_permissions
Create Date: 2026-12-05 09:00:00.000000

Rows before this revision have NULL: the next event of the document is applied whatever its
time, and records it. See ingest/order.py and docs/write-path.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_document_last_event_at"
down_revision: str | None = "0007_document_permissions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents", schema=None) as batch_op:
        batch_op.drop_column("last_event_at")
