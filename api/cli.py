"""``ragstream keys ...``: API keys (``ragstream query`` is :mod:`entry.query`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from ragstream.console import USAGE, fail, print_rows

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ragstream.settings import Settings

console = Console()
keys_app = typer.Typer(
    help="API keys: each maps to one tenant; stored hashed.", no_args_is_help=True
)
TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _sessions(settings: Settings) -> sessionmaker[Session]:
    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head

    upgrade_head(settings.database_url)
    return make_session_factory(make_engine(settings.database_url))


@keys_app.command("create")
def keys_create(
    *,
    tenant: str = typer.Option("default", help="Tenant the key acts for."),
    name: str = typer.Option("", help="A label shown in listings."),
    rate: int | None = typer.Option(None, help="Requests per minute (default: api setting)."),
    role: str = typer.Option(
        "user",
        help="user (the tenant's data), operator (also the tenant's operations: its dead "
        "letters and lag) or cluster-operator (every tenant's operations).",
    ),
    principal: list[str] = typer.Option(
        [],
        "--principal",
        "-p",
        help="A principal the key reads as: user:<id> or group:<id> (repeat it), or * for "
        "every document of the tenant; none: only documents without readers.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the key."),
) -> None:
    """Create an API key and print it (once: only its SHA-256 is stored)."""
    from api.auth import ROLES, create_key, key_principals
    from ragstream.settings import get_settings
    from topics.acl import PrincipalError

    if not TENANT.fullmatch(tenant):
        fail(f"tenant {tenant!r} must match {TENANT.pattern}", USAGE)
    if role not in ROLES:
        fail(f"role {role!r} must be one of {', '.join(ROLES)}", USAGE)
    try:
        key_principals(principal)
    except PrincipalError as exc:
        fail(str(exc), USAGE)
    key, key_id = create_key(
        _sessions(get_settings()),
        tenant,
        name=name,
        rate_per_minute=rate,
        role=role,
        principals=principal,
    )
    if quiet:
        print(key)
        return
    console.print(f"{role} key [bold]{key_id}[/bold] for tenant [bold]{tenant}[/bold]:")
    print(key)
    console.print("[dim]store it now: it cannot be shown again[/dim]")


@keys_app.command("list")
def keys_list(tenant: str | None = typer.Option(None, help="Only this tenant's keys.")) -> None:
    """List keys (prefixes only). Never cut: a table when it fits the terminal, else one block
    per key."""
    from rich.markup import escape

    from api.auth import list_keys
    from ragstream.settings import get_settings

    headers = ["id", "prefix", "tenant", "role", "principals", "name", "rate/min", "created",
               "revoked"]  # fmt: skip
    rows = [
        [
            str(k.id), k.prefix + "…", k.tenant, k.role, (k.principals or "").strip(","), k.name,
            str(k.rate_per_minute or "default"),
            k.created_at.isoformat(timespec="seconds"),
            k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "",
        ]
        for k in list_keys(_sessions(get_settings()), tenant)
    ]  # fmt: skip
    print_rows(console, headers, [[escape(c) for c in row] for row in rows])


@keys_app.command("revoke")
def keys_revoke(key_id: int = typer.Argument(..., help="The key's id (see `keys list`).")) -> None:
    """Revoke a key: every API process refuses it as soon as the revocation reaches it."""
    import redis

    from api.auth import revoke_key
    from ragstream.settings import get_settings

    settings = get_settings()
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    try:
        revoked = revoke_key(_sessions(settings), key_id, client)
    finally:
        client.close()
    if not revoked:
        fail(f"no live key {key_id}")
    console.print(f"revoked key {key_id}")
