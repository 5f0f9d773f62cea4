"""The write path: parse, chunk, embed, index incrementally; Celery bulk jobs."""
