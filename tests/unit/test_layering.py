"""Imports point one way (docs/architecture.md, Layout).

Every ``import`` and ``from ... import`` of every module under the packages is read with
:mod:`ast` (function-local and ``TYPE_CHECKING`` imports included, relative imports resolved)
and checked against the direction

    entry -> bench -> api -> workers -> ingest -> index -> topics -> ragstream (the kernel)
    entry -> bench -> replay -> workers
    entry -> infra -> ragstream

where a package may import the packages below it and never one above it. Inside ``workers``
the pools (``workers/pools/``) are the top: no other worker module imports them, and the
consumer runtime (``workers/runtime/``) imports nothing else of ``workers``. A failure names
the file, the line and the import. ``make lint`` runs this file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Each top-level package and the packages it may import (besides itself).
ALLOWED: dict[str, frozenset[str]] = {
    "ragstream": frozenset(),
    "topics": frozenset({"ragstream"}),
    "index": frozenset({"ragstream", "topics"}),
    "ingest": frozenset({"ragstream", "topics", "index"}),
    "workers": frozenset({"ragstream", "topics", "index", "ingest"}),
    "api": frozenset({"ragstream", "topics", "index", "ingest", "workers"}),
    "replay": frozenset({"ragstream", "topics", "index", "ingest", "workers"}),
    "infra": frozenset({"ragstream"}),
    "bench": frozenset({"ragstream", "topics", "index", "ingest", "workers", "api", "replay"}),
    "entry": frozenset(
        {"ragstream", "topics", "index", "ingest", "workers", "api", "replay", "infra", "bench"}
    ),
}


@dataclass(frozen=True, slots=True)
class Import:
    """``module`` (in file ``path``, at ``line``) imports ``target`` (absolute, dotted)."""

    path: str
    line: int
    module: str
    target: str


def module_name(path: Path, root: Path) -> str:
    """``workers/pools/retrieval.py`` -> ``workers.pools.retrieval``; a package's
    ``__init__.py`` is the package itself."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, *, is_package: bool, path: str) -> list[Import]:
    """Every import in ``source`` (the text of ``module``), wherever it stands in the file.

    ``from X import a, b`` yields ``X.a`` and ``X.b`` (a name may be a submodule, and the rules
    below are prefixes, so an attribute is harmless); relative imports are made absolute.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, module, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = base if alias.name == "*" else f"{base}.{alias.name}"
                found.append(Import(path, node.lineno, module, target.strip(".")))
    return found


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violation(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target``; ``None`` when it may."""
    top, other = module.partition(".")[0], target.partition(".")[0]
    if top in ALLOWED and other in ALLOWED and other != top and other not in ALLOWED[top]:
        if not ALLOWED[top]:
            return f"the kernel {top} imports no other package; {other} is above it"
        allowed = ", ".join(sorted(ALLOWED[top]))
        return f"{top} may import only {allowed}; {other} is above it or beside it"
    if (
        _inside(target, "workers.pools")
        and _inside(module, "workers")
        and not _inside(module, "workers.pools")
    ):
        return "the pools are the top of workers: only workers/pools/ imports them"
    if (
        _inside(module, "workers.runtime")
        and _inside(target, "workers")
        and not _inside(target, "workers.runtime")
        and target != "workers"
    ):
        return "the consumer runtime imports nothing else of workers"
    return None


def check(root: Path, packages: list[str]) -> list[str]:
    """``path:line: module imports target (why)`` for every import against the direction."""
    problems: list[str] = []
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            module = module_name(file, root)
            imports = imports_of(
                file.read_text(encoding="utf-8"),
                module,
                is_package=file.name == "__init__.py",
                path=rel,
            )
            for imp in imports:
                why = violation(imp.module, imp.target)
                if why is not None:
                    problems.append(
                        f"{imp.path}:{imp.line}: {imp.module} imports {imp.target} ({why})"
                    )
    return problems


def test_imports_point_one_way() -> None:
    problems = check(ROOT, sorted(ALLOWED))
    assert not problems, "imports against the direction:\n" + "\n".join(problems)


def test_every_top_level_package_has_a_place_in_the_direction() -> None:
    packages = {
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if p.parent.name not in ("tests",) and not p.parent.name.startswith(".")
    }
    assert packages == set(ALLOWED), (
        "add the new package to ALLOWED (and to docs/architecture.md, Layout)"
    )


# -- the checker itself, on small synthetic modules -----------------------------------------


def _problems(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return check(tmp_path, sorted({rel.split("/")[0] for rel in files}))


def test_a_function_local_upward_import_is_named_with_file_and_line(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        {
            "workers/__init__.py": "",
            "workers/caches.py": '"""Doc."""\n\n\ndef f():\n    from api.models import Result\n',
        },
    )
    assert problems == [
        "workers/caches.py:5: workers.caches imports api.models.Result "
        "(workers may import only index, ingest, ragstream, topics; api is above it or beside it)"
    ]


@pytest.mark.parametrize(
    ("rel", "source", "flagged"),
    [
        ("ragstream/settings.py", "import topics.registry\n", True),  # the kernel imports nothing
        ("topics/cli.py", "from workers.runtime import dlq\n", True),
        ("ingest/index.py", "from workers.runtime.policy import BatchPolicy\n", True),
        ("index/schema.py", "from ingest.index import ChunkIndex\n", True),  # below ingest
        ("workers/retrieval/x.py", "from index.schema import chunk_id\n", False),
        ("infra/cli.py", "from ingest import cli\n", True),
        ("api/querying.py", "from workers.caches import AnswerCache\n", False),  # api -> workers
        ("bench/bus.py", "from entry.cli import app\n", True),
        ("entry/cli.py", "from bench.cli import bench_app\n", False),
        ("workers/generation/x.py", "from ..pools import retrieval\n", True),  # relative
        ("workers/pools/rerank.py", "from workers.pools import retrieval\n", False),
        ("workers/runtime/x.py", "from workers.caches import AnswerCache\n", True),
        ("workers/runtime/y.py", "from . import handler\n", False),
        ("bench/query/baseline.py", "from workers.pools import retrieval\n", False),
        ("bench/query/run.py", "from replay.pools import PoolProcesses\n", False),
        ("replay/selection.py", "from workers import query_log\n", False),
        ("replay/report.py", "from bench.stats import percentiles\n", True),  # bench is above
        ("replay/shadow.py", "from api.querying import Asked\n", True),  # beside api
        ("api/x.py", "from replay.pools import PoolProcesses\n", True),
        ("workers/x.py", "import replay\n", True),
        (
            "api/x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bench\n",
            True,
        ),
    ],
)
def test_the_checker_knows_the_direction(
    tmp_path: Path, rel: str, source: str, flagged: bool
) -> None:
    files = {rel: source}
    parent = Path(rel).parent
    while parent != Path("."):
        files.setdefault(f"{parent.as_posix()}/__init__.py", "")
        parent = parent.parent
    problems = _problems(tmp_path, files)
    assert bool(problems) is flagged, problems
    if flagged:
        assert problems[0].startswith(f"{rel}:")
