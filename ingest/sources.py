"""Where documents come from: allowed roots, directory walks, file lists and JSONL manifests."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from ingest.types import MetaValue
from ragstream.errors import PermanentError

log = structlog.get_logger(__name__)


class SourceRejectedError(PermanentError):
    """A source path is outside every allowed root, missing, or too large."""

    code = "SOURCE_REJECTED"


class OutsideRootsError(SourceRejectedError):
    """A source path lies under none of ``settings.ingest.allowed_roots``."""


#: The setting that allows more roots, as a refusal may name it to an operator.
ALLOWED_ROOTS_SETTING = "settings.ingest.allowed_roots (RAGSTREAM_INGEST__ALLOWED_ROOTS)"


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
    raise OutsideRootsError(f"{path}: outside the allowed roots ({allowed})")


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


SkipCause = Literal["outside the allowed roots", "unreadable", "unknown type"]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file a directory walk did not take, and why (``detail`` is the full reason)."""

    path: str
    cause: SkipCause
    detail: str


@dataclass(slots=True)
class Discovery:
    """What :func:`scan` found: the files to ingest and every file it left out, with why."""

    files: list[SourceFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def nothing_reason(self) -> str:
        """Why there is nothing to ingest, cause by cause with counts and an example each, e.g.
        ``"2 file(s) outside the allowed roots (e.g. a.md: ...); 1 file(s) of unknown type
        (.png x1)"``; ``"no file found"`` when nothing was left out either."""
        if not self.skipped:
            return "no file found"
        parts = []
        for cause in ("outside the allowed roots", "unreadable", "unknown type"):
            hits = [s for s in self.skipped if s.cause == cause]
            if not hits:
                continue
            if cause == "unknown type":
                exts = Counter(Path(s.path).suffix.lower() or "(none)" for s in hits)
                top = sorted(exts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
                listed = ", ".join(f"{ext} x{n}" for ext, n in top)
                parts.append(f"{len(hits)} file(s) of unknown type ({listed})")
            else:
                parts.append(f"{len(hits)} file(s) {cause} (e.g. {hits[0].detail})")
        return "; ".join(parts)


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
    "_uploads",
)


def discover(
    inputs: Iterable[str | Path],
    roots: Sequence[Path],
    extensions: Sequence[str],
    exclude_dirs: Sequence[str] = EXCLUDED_DIRS,
) -> list[SourceFile]:
    """The files of :func:`scan` (the files it left out are logged, one warning each)."""
    return scan(inputs, roots, extensions, exclude_dirs).files


def scan(
    inputs: Iterable[str | Path],
    roots: Sequence[Path],
    extensions: Sequence[str],
    exclude_dirs: Sequence[str] = EXCLUDED_DIRS,
) -> Discovery:
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
    skipped: list[Skipped] = []
    exts = {e.lower() for e in extensions}
    for raw in inputs:
        path = Path(raw)
        # Checked before anything is read, walked or even looked up: an input outside the
        # roots costs nothing and says nothing of what exists there.
        under_roots(path, roots)
        if not path.exists():
            raise SourceRejectedError(f"{raw}: no such file or directory")
        if path.is_dir():
            files = _walk(path, roots, exts, set(exclude_dirs), skipped)
        elif path.name.endswith(".manifest.jsonl"):
            files = _manifest(path, roots)
        else:
            resolved = resolve_allowed(path, roots)
            files = [SourceFile(str(resolved), str(resolved))]
        for sf in files:
            _add(found, by_path, sf)
    return Discovery(sorted(found.values(), key=lambda s: s.doc_id), skipped)


def under_roots(path: Path, roots: Sequence[Path]) -> Path:
    """``path`` resolved, checked to lie under one of ``roots`` (a file or a folder).

    Raises:
        SourceRejectedError: outside every root.
    """
    resolved = path.resolve()
    if any(resolved.is_relative_to(root.resolve()) for root in roots):
        return resolved
    allowed = ", ".join(str(r) for r in roots)
    raise OutsideRootsError(f"{path}: outside the allowed roots ({allowed})")


def _add(found: dict[str, SourceFile], by_path: dict[str, str], sf: SourceFile) -> None:
    """Add ``sf`` unless its doc_id is there; one path under two doc_ids is refused."""
    other = by_path.setdefault(sf.path, sf.doc_id)
    if other != sf.doc_id:
        raise SourceRejectedError(
            f"{sf.path}: listed twice, as doc_id {other!r} and {sf.doc_id!r}; name each file once"
        )
    found.setdefault(sf.doc_id, sf)


def _walk(
    path: Path, roots: Sequence[Path], exts: set[str], skip: set[str], skipped: list[Skipped]
) -> list[SourceFile]:
    out = []
    for f in sorted(path.rglob("*")):
        if skip.intersection(f.relative_to(path).parts[:-1]) or f.is_dir():
            continue
        if f.suffix.lower() not in exts:
            name = _printable(f)
            skipped.append(Skipped(name, "unknown type", f"{name}: no parser for {f.suffix!r}"))
            continue
        found = _take(f, roots)
        if isinstance(found, Skipped):
            log.warning("ingest.source_skipped", path=repr(f), reason=found.detail)
            skipped.append(found)
        else:
            out.append(SourceFile(str(found), str(found)))
    return out


def _take(f: Path, roots: Sequence[Path]) -> Path | Skipped:
    """``f`` resolved, or why it cannot be ingested."""
    name = _printable(f)
    try:
        resolved = under_roots(f, roots)  # e.g. a symlink leaving the roots
    except SourceRejectedError as exc:
        return Skipped(name, "outside the allowed roots", _printable(exc))
    if not resolved.is_file():  # a dangling link, a FIFO or a socket
        return Skipped(name, "unreadable", f"{name}: not a regular file (a dangling link?)")
    try:
        str(resolved).encode("utf-8")  # the SQL store needs text paths
        with resolved.open("rb"):
            pass
    except UnicodeEncodeError:
        return Skipped(name, "unreadable", f"{name}: file name is not UTF-8")
    except OSError as exc:
        return Skipped(name, "unreadable", f"{name}: cannot read: {exc.strerror or exc}")
    return resolved


def _printable(value: object) -> str:
    """``str(value)`` with undecodable file-name bytes as ``\\udcXX`` escapes."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


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
