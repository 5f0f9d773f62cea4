"""document permissions: readers of documents and jobs, principals of API keys and askers

Revision ID: 0007_document_permissions
Revises: 0006_api_key_roles
Create Date: 2026-12-02 05:45:00.000000

Rows before this revision have NULL: documents readable by everyone of their tenant, keys
holding no principal (they read those documents, as before). See docs/permissions.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_document_permissions"
down_revision: str | None = "0006_api_key_roles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("documents", "readers"),
    ("ingest_jobs", "readers"),
    ("api_keys", "principals"),
    ("query_log", "asked_as"),
)


def upgrade() -> None:
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column(column, sa.Text(), nullable=True))


def downgrade() -> None:
    for table, column in reversed(COLUMNS):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column(column)
