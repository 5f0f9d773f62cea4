"""a role on each API key (user, operator)

Revision ID: 0006_api_key_roles
Revises: 0005_query_log_answer
Create Date: 2026-12-02 00:45:00.000000

Keys created before this revision are ``user`` keys; ``ragstream keys create --role operator``
creates keys that may read the console's operations pages (``/v1/ops/...``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_api_key_roles"
down_revision: str | None = "0005_query_log_answer"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("role", sa.String(length=16), nullable=False, server_default="user")
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("role")
