"""The MCP server (Model Context Protocol): tools and resources over the knowledge base, served
over streamable HTTP at ``/mcp`` of the API and over stdio by ``ragstream mcp``."""
