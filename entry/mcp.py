"""``ragstream mcp``: the MCP server over stdio, for assistants and IDE agents that start it.

The process is an API process without HTTP: its own services (SQL, Redis, the Kafka producer
and reply router of :class:`~api.querying.QueryService`) and the MCP server of
:mod:`api.mcp.server`, acting with one API key (``--key`` or ``RAGSTREAM_MCP__API_KEY``) whose
tenant's knowledge base it serves; every call authenticates that key again, so a revoked key
stops working. Logs go to stderr (stdout carries the protocol).
"""

from __future__ import annotations

import typer


def mcp_command(
    key: str | None = typer.Option(
        None, "--key", help="The API key to act with; default: RAGSTREAM_MCP__API_KEY."
    ),
) -> None:
    """Serve the knowledge base over MCP on stdin/stdout (tools search, ask, get_document;
    documents as resources ragstream://documents/{doc_id})."""
    from api.app import build_services
    from api.mcp.knowledge import KnowledgeBase
    from api.mcp.server import build_server
    from ragstream.logging import configure_logging
    from ragstream.settings import get_settings

    settings = get_settings()
    configure_logging(settings.logging)
    api_key = key or settings.mcp.api_key
    if not api_key:
        typer.echo(
            "ragstream mcp: an API key is required (--key or RAGSTREAM_MCP__API_KEY)", err=True
        )
        raise typer.Exit(2)
    services = build_services(settings)
    server = build_server(KnowledgeBase(services), lambda _ctx: api_key)
    try:
        server.run("stdio")
    finally:
        services.extras["queries"].close()
