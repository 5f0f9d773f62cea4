"""OpenAI's vector-store surface (files, vector stores, their files and search) on
ragstream's ingest path and retrieval: protocol, filters, the SQL registry and search
(docs/vector-stores.md)."""
