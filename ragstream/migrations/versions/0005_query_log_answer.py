"""the whole answer view in the query log

Revision ID: 0005_query_log_answer
Revises: 0004
Create Date: 2026-12-02 01:00:00.000000

``query_log.result`` holds the finished answer as ``topics.answers.Answer`` JSON (with its
evidence spans and offsets, truncated flag and token usage, which the older columns had no
place for). Rows written before this revision keep ``result`` NULL and are read from their
columns, without evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_query_log_answer"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("query_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("result", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("query_log", schema=None) as batch_op:
        batch_op.drop_column("result")
