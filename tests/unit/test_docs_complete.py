"""The front pages stay complete: docs/index.md links every page of the site, and the layout
table of docs/architecture.md names every package folder of the tree (issue 36)."""

from __future__ import annotations

import re

from ragstream.settings import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"
#: The top-level packages of the product (the rows of the layout table).
PACKAGES = (
    "ragstream",
    "topics",
    "index",
    "ingest",
    "workers",
    "api",
    "replay",
    "infra",
    "bench",
    "entry",
)


def _section(text: str, heading: str) -> str:
    """The text of ``## heading`` up to the next ``## ``."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_home_page_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    linked = {m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+\.md(?:#[^)]*)?)\)", index)}
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} - {"index.md"}
    missing = sorted(pages - linked)
    assert not missing, f"docs/index.md does not link {missing}"


def _package_folders() -> list[tuple[str, str]]:
    """``(package, sub-folder)`` for every folder with an ``__init__.py`` one level below a
    top-level package (``("api", "mcp")``); ``(package, "")`` for the package itself."""
    found: list[tuple[str, str]] = []
    for package in PACKAGES:
        root = PROJECT_ROOT / package
        assert (root / "__init__.py").exists(), package
        found.append((package, ""))
        for init in sorted(root.glob("*/__init__.py")):
            found.append((package, init.parent.name))
    return found


def test_the_layout_table_names_every_package_folder() -> None:
    layout = _section((DOCS / "architecture.md").read_text(), "Layout")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z_]+)/` \|(.*)$", layout, re.M)}
    missing = []
    for package, sub in _package_folders():
        if package not in rows:
            missing.append(f"{package}/")
        elif sub and f"`{sub}/`" not in rows[package]:
            missing.append(f"{package}/{sub}/")
    assert not missing, f"docs/architecture.md's layout table does not name {missing}"
