"""Source discovery: allowed roots, symlinks leaving them, manifests with bad lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.sources import SourceRejectedError, discover, read_source


def test_walk_skips_a_symlink_out_of_the_roots_but_keeps_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.md").write_text("# A")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "link.txt").symlink_to(outside)
    found = discover([root], [root], [".md", ".txt"])
    assert [Path(f.path).name for f in found] == ["a.md"]
    with pytest.raises(SourceRejectedError, match="outside the allowed roots"):
        read_source(root / "link.txt", [root], 1000)
    with pytest.raises(SourceRejectedError, match="outside the allowed roots"):
        discover([outside], [root], [".txt"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "bad manifest line"),
        (json.dumps({"doc_id": "x"}), "bad manifest line"),
        (json.dumps({"path": "a.md", "metadata": [1, 2]}), "metadata must be an object"),
        (json.dumps({"path": "a.md", "doc_id": ["x"]}), "doc_id must be a string"),
    ],
)
def test_bad_manifest_lines_are_rejected_with_the_line_number(
    tmp_path: Path, line: str, message: str
) -> None:
    (tmp_path / "a.md").write_text("# A")
    manifest = tmp_path / "docs.manifest.jsonl"
    manifest.write_text(json.dumps({"path": "a.md"}) + "\n" + line + "\n")
    with pytest.raises(SourceRejectedError, match=f":2: .*{message}"):
        discover([manifest], [tmp_path], [".md"])


def test_unreadable_manifest_is_a_rejection(tmp_path: Path) -> None:
    manifest = tmp_path / "x.manifest.jsonl"
    manifest.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(SourceRejectedError, match="cannot read manifest"):
        discover([manifest], [tmp_path], [".md"])


def test_directory_walk_skips_build_artefact_folders(tmp_path: Path) -> None:
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "os.html").write_text("<p>os</p>")
    (tmp_path / "_sources" / "library").mkdir(parents=True)
    (tmp_path / "_sources" / "library" / "os.rst.txt").write_text("os")
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "glossary.json").write_text("{}")
    found = discover([tmp_path], [tmp_path], [".html", ".txt", ".json"])
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in found] == ["library/os.html"]
    everything = discover([tmp_path], [tmp_path], [".html", ".txt", ".json"], exclude_dirs=())
    assert len(everything) == 3


def test_a_folder_outside_the_roots_is_refused_before_it_is_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.md").write_text("# A")
    walked: list[Path] = []
    real = Path.rglob

    def spy(self: Path, pattern: str):  # type: ignore[no-untyped-def]
        walked.append(self)
        return real(self, pattern)

    monkeypatch.setattr(Path, "rglob", spy)
    with pytest.raises(SourceRejectedError, match="outside the allowed roots"):
        discover([elsewhere], [root], [".md"])
    assert walked == []
    manifest = elsewhere / "x.manifest.jsonl"
    manifest.write_text(json.dumps({"path": str(root / "b.md")}) + "\n")
    with pytest.raises(SourceRejectedError, match="outside the allowed roots"):
        discover([manifest], [root], [".md"])


def test_one_path_under_two_doc_ids_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A")
    manifest = tmp_path / "m.manifest.jsonl"
    rows = [{"path": "a.md", "doc_id": "one"}, {"path": "a.md", "doc_id": "two"}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SourceRejectedError, match="listed twice"):
        discover([manifest], [tmp_path], [".md"])
    single = tmp_path / "s.manifest.jsonl"
    single.write_text(json.dumps({"path": "a.md", "doc_id": "one"}) + "\n")
    with pytest.raises(SourceRejectedError, match="listed twice"):
        discover([tmp_path / "a.md", single], [tmp_path], [".md"])
    same = discover([single, single], [tmp_path], [".md"])
    assert [s.doc_id for s in same] == ["one"]
