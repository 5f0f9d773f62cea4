"""The chunk index's schema, in a room of its own below the write path (``ingest``) and the
read path (``workers``): the mapping, chunk ids, stemming and index versions both agree on."""
