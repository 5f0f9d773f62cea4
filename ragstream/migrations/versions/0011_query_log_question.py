"""query_log.question: the question as the user typed it

Revision ID: 0011_query_log_question
Revises: 0010_document_warnings
Create Date: 2026-12-08 10:00:00.000000

``query_log.query`` is the question answered (a follow-up made standalone with its context,
what a replay asks); ``question`` keeps what was typed, which ``GET /v1/queries`` and the
console's past questions show. NULL: the same as ``query`` (and rows before this revision).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_query_log_question"
down_revision: str | None = "0010_document_warnings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("query_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("question", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("query_log", schema=None) as batch_op:
        batch_op.drop_column("question")
