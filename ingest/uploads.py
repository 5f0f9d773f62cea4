"""Where HTTP uploads live: ``<upload_root>/<tenant>/_uploads/`` under an allowed root.

- ``documents/<sha256>.<ext>``: one uploaded document, named by its content's SHA-256, so the
  same bytes uploaded twice are stored once and a stored file never changes under a reader (the
  ingest pool reads it after the API answered 202);
- ``jobs/<job_id>/``: one uploaded archive, extracted (:mod:`ingest.archives`), a bulk job's
  files.

The files stay after ingestion: they are the documents' sources (``jobs retry`` re-reads them).
Directory walks skip ``_uploads`` (``ingest.exclude_dirs``), so ingesting a tenant's whole
folder does not index its uploads a second time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ingest.archives import ArchiveLimits, extract_archive
from ragstream.settings import IngestSettings

UPLOADS = "_uploads"


def tenant_uploads(settings: IngestSettings, tenant: str) -> Path:
    """``<upload_root>/<tenant>/_uploads`` (not created here)."""
    return settings.upload_root / tenant / UPLOADS


def store_document(settings: IngestSettings, tenant: str, data: bytes, kind: str) -> Path:
    """Write ``data`` to ``documents/<sha256>.<kind>`` of the tenant's uploads (atomically:
    a temporary file renamed into place); return its path.

    ``kind`` is the short name of the format (``pdf``, ``docx``, ...), used as the extension.
    """
    folder = tenant_uploads(settings, tenant) / "documents"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{hashlib.sha256(data).hexdigest()}.{kind}"
    if target.is_file() and target.stat().st_size == len(data):
        return target
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def extract_job_archive(settings: IngestSettings, tenant: str, job_id: str, data: bytes) -> Path:
    """Extract the archive ``data`` into ``jobs/<job_id>/`` of the tenant's uploads; return
    that folder.

    Raises:
        ArchiveRejectedError: not an archive, unsafe or over the limits (nothing is left).
    """
    parent = tenant_uploads(settings, tenant) / "jobs"
    parent.mkdir(parents=True, exist_ok=True)
    dest = parent / job_id
    limits = ArchiveLimits(
        max_entries=settings.archive_max_entries,
        max_file_bytes=settings.max_document_bytes,
        max_total_bytes=settings.archive_max_bytes,
    )
    extract_archive(data, dest, limits)
    return dest
