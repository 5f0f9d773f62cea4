"""Where documents come from: allowed roots, directory walks, file lists and JSONL manifests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from ingest.types import MetaValue
from ragstream.errors import PermanentError

log = structlog.get_logger(__name__)


class SourceRejectedError(PermanentError):
    """A source path is outside every allowed root, missing, or too large."""

    code = "SOURCE_REJECTED"


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file to ingest; ``doc_id`` defaults to its resolved absolute path."""

    path: str
    doc_id: str
    title: str | None = None
    metadata: dict[str, MetaValue] = field(default_factory=dict)


def resolve_allowed(path: str | Path, roots: Sequence[Path]) -> Path:
    """Resolve ``path`` (symlinks included) and check it lies under one of ``roots``.

    Raises:
        SourceRejectedError: outside every root, or not a regular file.
    """
    resolved = Path(path).resolve()
    for root in roots:
        if resolved.is_relative_to(root.resolve()):
            if not resolved.is_file():
                raise SourceRejectedError(f"{path}: not a file")
            return resolved
    allowed = ", ".join(str(r) for r in roots)
    raise SourceRejectedError(f"{path}: outside the allowed roots ({allowed})")


def read_source(path: str | Path, roots: Sequence[Path], max_bytes: int) -> bytes:
    """Read an allowed file of at most ``max_bytes`` bytes.

    Raises:
        SourceRejectedError: not allowed, missing, unreadable or too large.
    """
    resolved = resolve_allowed(path, roots)
    try:
        size = resolved.stat().st_size
        if size > max_bytes:
            raise SourceRejectedError(f"{path}: {size} bytes exceeds the {max_bytes}-byte limit")
        return resolved.read_bytes()
    except OSError as exc:
        raise SourceRejectedError(f"{path}: cannot read: {exc}") from exc


#: Folders a directory walk never enters: build artefacts that duplicate the pages (Sphinx's
#: ``_sources`` holds the reST of every HTML page, ``_static`` its JSON/JS), and tool folders.
EXCLUDED_DIRS = (
    "_sources",
    "_static",
    "_images",
    "_downloads",
    ".git",
    "__pycache__",
    "node_modules",
)


def discover(
    inputs: Iterable[str | Path],
    roots: Sequence[Path],
    extensions: Sequence[str],
    exclude_dirs: Sequence[str] = EXCLUDED_DIRS,
) -> list[SourceFile]:
    """Expand directories (recursively, by extension), files and ``*.manifest.jsonl`` manifests.

    A directory walk skips every folder named in ``exclude_dirs``. A manifest has one JSON
    object per line: ``{"path": ..., "doc_id"?: ..., "title"?: ...,
    "metadata"?: {...}}``; relative paths are relative to the manifest. Results are sorted,
    de-duplicated by ``doc_id``; every path is checked against ``roots``.

    Raises:
        SourceRejectedError: an input is missing or outside the allowed roots, or a manifest
            line is malformed (naming the line).
    """
    found: dict[str, SourceFile] = {}
    by_path: dict[str, str] = {}
    exts = {e.lower() for e in extensions}
    for raw in inputs:
        path = Path(raw)
        # Checked before anything is read, walked or even looked up: an input outside the
        # roots costs nothing and says nothing of what exists there.
        under_roots(path, roots)
        if not path.exists():
            raise SourceRejectedError(f"{raw}: no such file or directory")
        if path.is_dir():
            files = _walk(path, roots, exts, set(exclude_dirs))
        elif path.name.endswith(".manifest.jsonl"):
            files = _manifest(path, roots)
        else:
            resolved = resolve_allowed(path, roots)
            files = [SourceFile(str(resolved), str(resolved))]
        for sf in files:
            _add(found, by_path, sf)
    return sorted(found.values(), key=lambda s: s.doc_id)


def under_roots(path: Path, roots: Sequence[Path]) -> Path:
    """``path`` resolved, checked to lie under one of ``roots`` (a file or a folder).

    Raises:
        SourceRejectedError: outside every root.
    """
    resolved = path.resolve()
    if any(resolved.is_relative_to(root.resolve()) for root in roots):
        return resolved
    allowed = ", ".join(str(r) for r in roots)
    raise SourceRejectedError(f"{path}: outside the allowed roots ({allowed})")


def _add(found: dict[str, SourceFile], by_path: dict[str, str], sf: SourceFile) -> None:
    """Add ``sf`` unless its doc_id is there; one path under two doc_ids is refused."""
    other = by_path.setdefault(sf.path, sf.doc_id)
    if other != sf.doc_id:
        raise SourceRejectedError(
            f"{sf.path}: listed twice, as doc_id {other!r} and {sf.doc_id!r}; name each file once"
        )
    found.setdefault(sf.doc_id, sf)


def _walk(path: Path, roots: Sequence[Path], exts: set[str], skip: set[str]) -> list[SourceFile]:
    out = []
    for f in sorted(path.rglob("*")):
        if skip.intersection(f.relative_to(path).parts[:-1]):
            continue
        if f.is_file() and f.suffix.lower() in exts:
            try:
                resolved = resolve_allowed(f, roots)
                str(resolved).encode("utf-8")  # the SQL store needs text paths
            except (SourceRejectedError, UnicodeEncodeError) as exc:
                # e.g. a symlink leaving the roots, or a non-UTF-8 file name
                log.warning("ingest.source_skipped", path=repr(f), reason=str(exc))
                continue
            out.append(SourceFile(str(resolved), str(resolved)))
    return out


def _manifest(path: Path, roots: Sequence[Path]) -> list[SourceFile]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceRejectedError(f"{path}: cannot read manifest: {exc}") from exc
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            target = Path(row["path"])
            if not isinstance(row.get("metadata") or {}, dict):
                raise TypeError("metadata must be an object")
            if not isinstance(row.get("doc_id") or "", str):
                raise TypeError("doc_id must be a string")
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise SourceRejectedError(f"{path}:{n}: bad manifest line: {exc}") from exc
        if not target.is_absolute():
            target = path.parent / target
        resolved = resolve_allowed(target, roots)
        meta = row.get("metadata") or {}
        out.append(
            SourceFile(
                str(resolved),
                str(row.get("doc_id") or resolved),
                row.get("title"),
                {str(k): v for k, v in meta.items() if isinstance(v, str | int | float | bool)},
            )
        )
    return out
