"""webhook signing secrets per endpoint and per tenant

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 08:10:00.000000

Endpoints registered before this revision get a fresh secret each (their receivers must fetch
it with ``POST /v1/webhooks/{id}/rotate-secret``: the deployment-wide key is gone).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_tenant_secrets",
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("previous_secret", sa.String(length=128), nullable=True),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant"),
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("endpoint_id", sa.String(length=36), nullable=True))

    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("secret", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("previous_secret", sa.String(length=128), nullable=True))
        batch_op.add_column(
            sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True)
        )
    conn = op.get_bind()
    endpoints = sa.table("webhook_endpoints", sa.column("id"), sa.column("secret"))
    for (endpoint_id,) in conn.execute(sa.select(endpoints.c.id)).all():
        key = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
        conn.execute(endpoints.update().where(endpoints.c.id == endpoint_id).values(secret=key))
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.alter_column("secret", existing_type=sa.String(length=128), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.drop_column("previous_secret_until")
        batch_op.drop_column("previous_secret")
        batch_op.drop_column("secret")

    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_column("endpoint_id")

    op.drop_table("webhook_tenant_secrets")
