"""Where HTTP uploads live: ``<upload_root>/<tenant>/_uploads/`` under an allowed root.

- ``documents/<sha256>.<ext>``: one uploaded document, named by its content's SHA-256, so the
  same bytes uploaded twice are stored once and a stored file never changes under a reader (the
  ingest pool reads it after the API answered 202);
- ``documents/<sha256>.<ext>.parsed-<options>.json``: what the API's check parsed of it (under
  the parse options' fingerprint, :meth:`~ingest.types.ParseOptions.fingerprint`), so the ingest
  pool does not parse it again (:func:`stored_parse`, called by :func:`ingest.ops.prepare_op`);
- ``jobs/<job_id>/``: one uploaded archive, extracted (:mod:`ingest.archives`), a bulk job's
  files.

The files stay after ingestion: they are the documents' sources (``jobs retry`` re-reads them).
Directory walks skip ``_uploads`` (``ingest.exclude_dirs``), so ingesting a tenant's whole
folder does not index its uploads a second time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import structlog

from ingest.archives import ArchiveLimits, extract_archive
from ingest.types import Definition, ParsedDocument, ParseOptions, Section
from ragstream.settings import IngestSettings

log = structlog.get_logger(__name__)

UPLOADS = "_uploads"


def tenant_uploads(settings: IngestSettings, tenant: str) -> Path:
    """``<upload_root>/<tenant>/_uploads`` (not created here)."""
    return settings.upload_root / tenant / UPLOADS


def store_document(
    settings: IngestSettings,
    tenant: str,
    data: bytes,
    kind: str,
    parsed: Sequence[ParsedDocument] | None = None,
) -> Path:
    """Write ``data`` to ``documents/<sha256>.<kind>`` of the tenant's uploads (atomically:
    a temporary file renamed into place) and, when given, its ``parsed`` documents beside it
    under the settings' parse options; return the document's path.

    ``kind`` is the short name of the format (``pdf``, ``docx``, ...), used as the extension.
    """
    folder = tenant_uploads(settings, tenant) / "documents"
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()
    target = folder / f"{digest}.{kind}"
    if not (target.is_file() and target.stat().st_size == len(data)):
        _write_atomically(folder, target, data)
    if parsed is not None:
        options = ParseOptions.from_settings(settings)
        body = {"sha256": digest, "options": options.fingerprint(), "documents": _dump(parsed)}
        try:  # ASCII JSON: a lone surrogate in a string is escaped, not an encoding error
            raw = json.dumps(body).encode("ascii")
        except (TypeError, ValueError) as exc:  # not storable: the pool parses the file itself
            log.warning("upload.parse_not_stored", path=str(target), error=repr(exc))
        else:
            _write_atomically(folder, _parse_path(target, options), raw)
    return target


def stored_parse(
    settings: IngestSettings, tenant: str, path: str | Path, data: bytes
) -> tuple[ParsedDocument, ...] | None:
    """The parse :func:`store_document` kept for the upload at ``path`` whose bytes are
    ``data``, or ``None``: not a stored upload of ``tenant``, no parse under the settings' parse
    options, or one of other bytes or unreadable (then the caller parses; never raises)."""
    target = Path(path).resolve()
    if target.parent != (tenant_uploads(settings, tenant) / "documents").resolve():
        return None
    options = ParseOptions.from_settings(settings)
    stored = _parse_path(target, options)
    try:
        body = json.loads(stored.read_bytes())
        if body["sha256"] != hashlib.sha256(data).hexdigest():
            return None
        if body["options"] != options.fingerprint():
            return None
        return _load(body["documents"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("upload.stored_parse_unreadable", path=str(stored), error=repr(exc))
        return None


def _parse_path(target: Path, options: ParseOptions) -> Path:
    return target.with_name(f"{target.name}.parsed-{options.fingerprint()}.json")


def _write_atomically(folder: Path, target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _dump(parsed: Sequence[ParsedDocument]) -> list[dict[str, Any]]:
    """Every field of each document (whatever fields :class:`ParsedDocument` has), sections
    as ``[heading_path, text]`` pairs."""
    out = []
    for d in parsed:
        fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(d)}
        fields["sections"] = [[list(s.heading_path), s.text] for s in d.sections]
        fields["definitions"] = [dataclasses.asdict(x) for x in d.definitions]
        out.append(fields)
    return out


def _load(documents: list[dict[str, Any]]) -> tuple[ParsedDocument, ...]:
    """The inverse of :func:`_dump`. Raises ``TypeError`` for a field the class lacks or needs."""
    return tuple(
        ParsedDocument(
            **{
                **d,
                "sections": tuple(Section(tuple(h), str(t)) for h, t in d["sections"]),
                "metadata": dict(d["metadata"]),
                "definitions": tuple(Definition(**x) for x in d.get("definitions", ())),
                "warnings": tuple(str(w) for w in d.get("warnings", ())),
            }
        )
        for d in documents
    )


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


#: The name of an uploaded archive sent without a file name.
DEFAULT_ARCHIVE_NAME = "archive"


def archive_name(filename: str | None) -> str:
    """The name an uploaded archive's documents are filed under: the last part of the file
    name the client sent (``C:\\kb\\docs.zip`` and ``/tmp/docs.zip`` both give ``docs.zip``),
    control characters removed; :data:`DEFAULT_ARCHIVE_NAME` when nothing is left."""
    base = PurePosixPath((filename or "").replace("\\", "/")).name
    clean = "".join(c for c in base if c.isprintable()).strip()
    return clean or DEFAULT_ARCHIVE_NAME


def archive_doc_id(name: str, folder: Path, path: str | Path) -> str:
    """The document id of the archive member extracted to ``path`` under ``folder``:
    ``<name>/<its path inside the archive>`` (POSIX separators), so that the same archive
    uploaded again updates the same documents and no id holds the server's folder.

    Raises:
        ValueError: ``path`` is not under ``folder``.
    """
    member = Path(path).resolve().relative_to(folder.resolve()).as_posix()
    return f"{name}/{member}"
