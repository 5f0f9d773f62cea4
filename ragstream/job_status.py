"""The statuses of a bulk ingest job (:class:`ragstream.db.models.IngestJob`), in a module of
their own so that the CLI's help can name them without loading SQLAlchemy."""

from __future__ import annotations

#: Statuses after which a bulk ingest job changes no more.
FINAL_JOB_STATUSES = ("succeeded", "completed_with_failures", "failed")
#: Every status a job can have, in the order it passes through them.
JOB_STATUSES = ("pending", "running", *FINAL_JOB_STATUSES)
