"""query_feedback: readers' judgements of logged answers, the labels training reads

Revision ID: 0012_query_feedback
Revises: 0011_query_log_question
Create Date: 2026-12-07 04:20:00.000000

One row per ``(request_id, key_id)``: the latest feedback an API key gave on a logged query
(``POST /v1/queries/{id}/feedback`` replaces it; ``updated_at`` says when). Deleting a
``query_log`` row deletes its feedback. ``workers.feedback.feedback_pairs`` reads the table
into ``(question, passage_text, label)`` pairs for ``ragstream rerank train``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_query_feedback"
down_revision: str | None = "0011_query_log_question"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "query_feedback",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("helpful", sa.Boolean(), nullable=False),
        sa.Column("passage", sa.Integer(), nullable=True),
        sa.Column("sentence", sa.Integer(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("chunk_id", sa.String(length=128), nullable=True),
        sa.Column("doc_id", sa.String(length=512), nullable=True),
        sa.Column("passage_text", sa.Text(), nullable=True),
        sa.Column("sentence_text", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["request_id"], ["query_log.request_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("request_id", "key_id"),
    )
    with op.batch_alter_table("query_feedback", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_query_feedback_tenant"), ["tenant"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("query_feedback", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_query_feedback_tenant"))
    op.drop_table("query_feedback")
