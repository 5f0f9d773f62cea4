"""The routes are leaves: no module under ``api/routes/`` imports another one.

What two routes share (the asking seam, the document id of a path, reading a passage, the OpenAI
protocol and rendering) lives below them (``api/asking.py``, ``api/ingesting.py``,
``api/passages.py``, ``api/openai/``), so a route can change without moving another. Every
import of every route module is read with :mod:`ast` (function-local ones included), as
``test_layering.py`` reads them.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_layering import ROOT, imports_of, module_name

ROUTES = "api.routes"


def route_imports(root: Path) -> list[str]:
    """``path:line: module imports target`` for every import of a route module by a route
    module under ``root``."""
    found: list[str] = []
    for file in sorted((root / "api" / "routes").glob("*.py")):
        if file.name == "__init__.py":
            continue
        rel = file.relative_to(root).as_posix()
        module = module_name(file, root)
        for imp in imports_of(file.read_text(encoding="utf-8"), module, is_package=False, path=rel):
            target = imp.target
            if target == ROUTES or not target.startswith(ROUTES + "."):
                continue
            other = ".".join(target.split(".")[:3])  # api.routes.<module>
            if other != module:
                found.append(f"{imp.path}:{imp.line}: {module} imports {target}")
    return found


def test_no_route_module_imports_another() -> None:
    found = route_imports(ROOT)
    assert not found, (
        "route modules import each other; move what they share below api/routes/:\n"
        + "\n".join(found)
    )


def test_the_check_names_a_route_importing_a_route(tmp_path: Path) -> None:
    routes = tmp_path / "api" / "routes"
    routes.mkdir(parents=True)
    (tmp_path / "api" / "__init__.py").write_text("")
    (routes / "__init__.py").write_text("")
    (routes / "a.py").write_text("from api.asking import build_request\n")
    (routes / "b.py").write_text("def f():\n    from api.routes.a import x\n")
    (routes / "c.py").write_text("from . import a\n")
    assert route_imports(tmp_path) == [
        "api/routes/b.py:2: api.routes.b imports api.routes.a.x",
        "api/routes/c.py:1: api.routes.c imports api.routes.a",
    ]
