"""Uploaded archives (zip, tar, tar.gz): safe extraction into a fresh folder.

What is refused, and why (the archive as a whole, naming the member):

- names that are absolute, contain ``..``, a drive, a backslash or a control character, or
  repeat an earlier member (path traversal, "zip slip": https://snyk.io/research/zip-slip-vulnerability);
- symbolic and hard links, devices and FIFOs (a link extracted first lets a later member write
  through it); tar members also pass :func:`tarfile.data_filter` (PEP 706);
- encrypted zip members;
- more than ``max_entries`` members, a member over ``max_file_bytes`` or more than
  ``max_total_bytes`` written in all (zip bombs: https://www.bamsoftware.com/hacks/zipbomb/).
  Sizes are checked against the headers first and against the bytes actually written, so a
  header that lies about a size gains nothing.

macOS metadata (``__MACOSX/``, ``._*`` AppleDouble files) is skipped. Extraction writes only
regular files and folders under ``dest``, which must not exist beforehand; on any refusal
``dest`` is removed again, so a refused archive leaves nothing behind.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from ragstream.errors import PermanentError

ArchiveFormat = Literal["zip", "tar"]
_COPY_CHUNK = 1 << 16
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header; an empty archive
_GZIP_MAGIC = b"\x1f\x8b"
_S_IFMT, _S_IFLNK = 0o170000, 0o120000


class ArchiveRejectedError(PermanentError):
    """An uploaded archive is not a zip/tar(.gz), or is unsafe or too large to extract."""

    code = "ARCHIVE_REJECTED"


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """Extraction limits: member count, bytes of one member, bytes written in all."""

    max_entries: int = 10_000
    max_file_bytes: int = 20 * 1024 * 1024
    max_total_bytes: int = 512 * 1024 * 1024


def archive_format(data: bytes) -> ArchiveFormat | None:
    """``"zip"`` or ``"tar"`` (plain or gzip-compressed) from the magic bytes; else None."""
    if data[:4] in _ZIP_MAGIC:
        return "zip"
    if data[:2] == _GZIP_MAGIC or data[257:262] == b"ustar":
        return "tar"
    return None


def extract_archive(data: bytes, dest: Path, limits: ArchiveLimits) -> list[Path]:
    """Extract the zip or tar(.gz) archive ``data`` into the new folder ``dest``.

    Args:
        data: the archive's bytes.
        dest: the folder to create and fill (its parent must exist).
        limits: member count and size limits.

    Returns:
        The extracted regular files, resolved, in archive order.

    Raises:
        ArchiveRejectedError: unknown format, corrupt, or refused (see the module docstring);
            ``dest`` is removed again.
        FileExistsError: ``dest`` exists.
    """
    kind = archive_format(data)
    if kind is None:
        raise ArchiveRejectedError("not a zip, tar or tar.gz archive (by its first bytes)")
    dest.mkdir()
    try:
        writer = _Writer(dest.resolve(), limits)
        if kind == "zip":
            _extract_zip(data, writer)
        else:
            _extract_tar(data, writer)
        return writer.files
    except ArchiveRejectedError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveRejectedError(f"corrupt {kind} archive: {type(exc).__name__}: {exc}") from exc


class _Writer:
    """Writes members under ``root`` within ``limits``; remembers what it wrote."""

    def __init__(self, root: Path, limits: ArchiveLimits) -> None:
        self.root = root
        self.limits = limits
        self.entries = 0
        self.written = 0
        self.files: list[Path] = []
        self._names: set[str] = set()

    def count(self, name: str) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise ArchiveRejectedError(f"more than {self.limits.max_entries} members")
        if name in self._names:
            raise ArchiveRejectedError(f"{name!r}: listed twice")
        self._names.add(name)

    def target(self, name: str) -> Path | None:
        """Where member ``name`` goes; None for macOS metadata.

        Raises:
            ArchiveRejectedError: an unsafe name.
        """
        parts = safe_parts(name)
        if parts[0] == "__MACOSX" or parts[-1].startswith("._"):
            return None
        path = self.root.joinpath(*parts)
        if not path.resolve().is_relative_to(self.root):  # belt and braces: no link exists
            raise ArchiveRejectedError(f"{name!r}: leaves the extraction folder")
        return path

    def folder(self, name: str) -> None:
        path = self.target(name)
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)

    def file(self, name: str, declared: int, source: IO[bytes]) -> None:
        path = self.target(name)
        if path is None:
            return
        self._check_size(name, declared)
        path.parent.mkdir(parents=True, exist_ok=True)
        size = 0
        with path.open("xb") as out:
            while chunk := source.read(_COPY_CHUNK):
                size += len(chunk)
                self._check_size(name, size)
                out.write(chunk)
        self.written += size
        self.files.append(path)

    def _check_size(self, name: str, size: int) -> None:
        if size > self.limits.max_file_bytes:
            raise ArchiveRejectedError(
                f"{name!r}: over the {self.limits.max_file_bytes}-byte limit of one member"
            )
        if self.written + size > self.limits.max_total_bytes:
            raise ArchiveRejectedError(
                f"unpacks to over {self.limits.max_total_bytes} bytes (at {name!r})"
            )


def safe_parts(name: str) -> tuple[str, ...]:
    """The path components of member ``name``, refusing every unsafe form.

    Raises:
        ArchiveRejectedError: empty, absolute, a drive (``C:``), ``..``, a backslash, or a
            control character.
    """
    if not name or any(ord(c) < 0x20 or c == "\x7f" for c in name) or "\\" in name:
        raise ArchiveRejectedError(f"{name!r}: unsafe member name")
    path = PurePosixPath(name)
    parts = tuple(p for p in path.parts if p not in ("", "."))
    if path.is_absolute() or ".." in parts or not parts or ":" in parts[0]:
        raise ArchiveRejectedError(f"{name!r}: unsafe member name (absolute or leaves the folder)")
    return parts


def _extract_zip(data: bytes, writer: _Writer) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        if len(members) > writer.limits.max_entries:
            raise ArchiveRejectedError(f"more than {writer.limits.max_entries} members")
        declared = sum(m.file_size for m in members)
        if declared > writer.limits.max_total_bytes:
            raise ArchiveRejectedError(
                f"unpacks to {declared} bytes, over the {writer.limits.max_total_bytes}-byte limit"
            )
        for member in members:
            writer.count(member.filename)
            if (member.external_attr >> 16) & _S_IFMT == _S_IFLNK:
                raise ArchiveRejectedError(f"{member.filename!r}: symbolic links are refused")
            if member.flag_bits & 0x1:
                raise ArchiveRejectedError(f"{member.filename!r}: encrypted members are refused")
            if member.is_dir():
                writer.folder(member.filename)
                continue
            with archive.open(member) as source:
                writer.file(member.filename, member.file_size, source)


def _extract_tar(data: bytes, writer: _Writer) -> None:
    # "r|*": one pass over the (decompressed) stream, never seeking back.
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as archive:
        for member in _members(archive):
            writer.count(member.name)
            if member.issym() or member.islnk():
                raise ArchiveRejectedError(f"{member.name!r}: links are refused")
            if not (member.isfile() or member.isdir()):
                raise ArchiveRejectedError(f"{member.name!r}: devices and FIFOs are refused")
            try:
                tarfile.data_filter(member, str(writer.root))
            except tarfile.FilterError as exc:
                raise ArchiveRejectedError(f"{member.name!r}: {exc}") from exc
            if member.isdir():
                writer.folder(member.name)
                continue
            source = archive.extractfile(member)
            assert source is not None  # a regular file always has a reader
            writer.file(member.name, member.size, source)


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Members one at a time (a stream: ``getmembers`` would read everything first)."""
    while (member := archive.next()) is not None:
        yield member
