"""Uploaded archives are extracted safely: no traversal, no links, bounded size and count."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from ingest.archives import ArchiveLimits, ArchiveRejectedError, archive_format, extract_archive

LIMITS = ArchiveLimits(max_entries=20, max_file_bytes=10_000, max_total_bytes=30_000)


def _zip(members: dict[str, bytes], *, symlink: str | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16) | 0  # S_IFLNK
            z.writestr(info, "/etc/passwd")
    return buf.getvalue()


def _tar(add: list[tarfile.TarInfo], payloads: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for info in add:
            data = (payloads or {}).get(info.name)
            if data is not None:
                info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def test_zip_and_tar_gz_extract_their_regular_files(tmp_path: Path) -> None:
    z = _zip({"docs/a.md": b"# A\n\ntext", "docs/sub/b.html": b"<p>b</p>", "empty/": b""})
    files = extract_archive(z, tmp_path / "z", LIMITS)
    assert sorted(f.relative_to((tmp_path / "z").resolve()).as_posix() for f in files) == [
        "docs/a.md",
        "docs/sub/b.html",
    ]
    assert (tmp_path / "z/docs/a.md").read_bytes() == b"# A\n\ntext"
    t = _tar([_file("x/c.txt")], {"x/c.txt": b"c"})
    assert [f.name for f in extract_archive(t, tmp_path / "t", LIMITS)] == ["c.txt"]
    assert archive_format(z) == "zip" and archive_format(t) == "tar"
    assert archive_format(b"%PDF-1.7") is None


@pytest.mark.parametrize(
    "name", ["../evil.md", "docs/../../evil.md", "/etc/cron.d/evil", "C:/evil.md", "a\\..\\b.md"]
)
def test_traversal_names_are_refused_and_nothing_is_left(tmp_path: Path, name: str) -> None:
    data = _zip({"ok.md": b"fine", name: b"evil"})
    with pytest.raises(ArchiveRejectedError, match="unsafe member name"):
        extract_archive(data, tmp_path / "dest", LIMITS)
    assert not (tmp_path / "dest").exists()
    assert not (tmp_path / "evil.md").exists()


def test_zip_symlinks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRejectedError, match="symbolic links are refused"):
        extract_archive(_zip({"a.md": b"a"}, symlink="link.md"), tmp_path / "d", LIMITS)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_tar_links_are_refused(tmp_path: Path, kind: bytes) -> None:
    link = _file("docs/passwd.md")
    link.type, link.linkname = kind, "/etc/passwd"
    with pytest.raises(ArchiveRejectedError, match="links are refused"):
        extract_archive(_tar([link]), tmp_path / "d", LIMITS)
    assert not (tmp_path / "d").exists()


def test_tar_devices_are_refused(tmp_path: Path) -> None:
    dev = _file("null")
    dev.type = tarfile.CHRTYPE
    with pytest.raises(ArchiveRejectedError, match="devices"):
        extract_archive(_tar([dev]), tmp_path / "d", LIMITS)


def test_a_zip_bomb_is_refused_by_its_headers(tmp_path: Path) -> None:
    bomb = _zip({f"{i}.txt": b"\0" * 9_000 for i in range(5)})  # 45 kB from ~1 kB
    assert len(bomb) < 2_000
    with pytest.raises(ArchiveRejectedError, match="over the 30000-byte limit"):
        extract_archive(bomb, tmp_path / "d", LIMITS)
    assert not (tmp_path / "d").exists()


def test_tar_sizes_are_counted_as_written(tmp_path: Path) -> None:
    # tar.gz is one stream: sizes are counted as bytes are written, member by member
    members = [_file(f"{i}.txt") for i in range(5)]
    data = _tar(members, {m.name: b"x" * 9_000 for m in members})
    with pytest.raises(ArchiveRejectedError, match="unpacks to over 30000 bytes"):
        extract_archive(data, tmp_path / "d", LIMITS)


def test_one_member_over_its_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRejectedError, match="limit of one member"):
        extract_archive(_zip({"big.txt": b"x" * 10_001}), tmp_path / "d", LIMITS)


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    data = _zip({f"{i}.md": b"x" for i in range(21)})
    with pytest.raises(ArchiveRejectedError, match="more than 20 members"):
        extract_archive(data, tmp_path / "d", LIMITS)


def test_duplicate_members_are_refused(tmp_path: Path) -> None:
    data = _tar([_file("a.md"), _file("a.md")], {"a.md": b"x"})
    with pytest.raises(ArchiveRejectedError, match="listed twice"):
        extract_archive(data, tmp_path / "d", LIMITS)


def test_macos_metadata_is_skipped(tmp_path: Path) -> None:
    data = _zip({"a.md": b"a", "__MACOSX/._a.md": b"\0\5", "._b.md": b"\0"})
    assert [f.name for f in extract_archive(data, tmp_path / "d", LIMITS)] == ["a.md"]


def test_not_an_archive_and_corrupt_archives_are_named(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRejectedError, match=r"not a zip, tar or tar\.gz"):
        extract_archive(b"hello", tmp_path / "a", LIMITS)
    with pytest.raises(ArchiveRejectedError, match="corrupt zip archive"):
        extract_archive(b"PK\x03\x04garbage", tmp_path / "b", LIMITS)
    with pytest.raises(ArchiveRejectedError, match="corrupt tar archive"):
        extract_archive(b"\x1f\x8bgarbage", tmp_path / "c", LIMITS)
    assert not any(tmp_path.iterdir())
