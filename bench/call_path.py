"""The call path of one request through ``api/``: which files it runs in, in order.

Runs two requests against the real app with the pools faked (``tests/unit/apikit.py``: the
answer arrives on the reply path as tokens and a response) and records, with
:func:`sys.settrace`, every function entry (a generator's resumption included) in a file under
``api/`` (but ``api/app.py``: the middleware around every request and chunk) while the request
is served:

- ``POST /v1/query`` (sync) with a body;
- ``POST /v1/chat/completions`` with ``stream: true``, read to its end.

Consecutive entries in one file are one *stay*. Per request, for the whole request and for
its longest and its commonest piece (the path is cut where the framework calls into ``api/``:
the route, a dependency, each resumption of a stream's body, so a stream's commonest piece is
the path of one event), it prints the stays, the files,
the *returns* (a stay in a file the path had already left), the *climbs* (a call from a file
of ``api/`` into one on a higher layer of ``api/``'s own import graph, where a file stands
above every ``api/`` file it imports: a lower module calling back into a higher one, e.g. a
generator it pulls) and the distinct climbing edges, then the path itself.

Run from the repository root::

    .venv/bin/python -m bench.call_path

The fake pools stand in for :class:`~api.querying.QueryService`'s Kafka round trip, so the
figures count the edge's own files (routes, models, streams, errors, auth), not the pools.
"""

from __future__ import annotations

import ast
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "api"


def layers() -> dict[str, int]:
    """Each ``api/`` file (relative path) and its layer: 1 + the highest layer of the
    ``api/`` files it imports (0 for a file importing none); a cycle counts once."""
    modules: dict[str, str] = {}
    for file in API.rglob("*.py"):
        parts = list(file.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = file.relative_to(ROOT).as_posix()
    deps = {
        rel: {
            modules[name]
            for name in _imported(ROOT / rel)
            if name in modules and modules[name] != rel and name != "api"
        }
        for rel in modules.values()
    }
    memo: dict[str, int] = {}

    def layer(rel: str, seen: frozenset[str]) -> int:
        if rel in memo:
            return memo[rel]
        below = [layer(d, seen | {rel}) for d in deps[rel] if d not in seen]
        memo[rel] = 1 + max(below, default=-1)
        return memo[rel]

    return {rel: layer(rel, frozenset()) for rel in deps}


def _imported(file: Path) -> Iterator[str]:
    """Every dotted name ``file`` imports (``from X import a``: ``X`` and ``X.a``)."""
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def figures(stays: list[str], climbs: list[tuple[str, str]]) -> dict[str, int]:
    """``stays``, ``files``, ``returns`` of a path (one file per stay), its ``climbs`` and
    their distinct ``climbing edges``."""
    returns = sum(1 for i, f in enumerate(stays) if f in stays[:i])
    return {
        "stays": len(stays),
        "files": len(set(stays)),
        "returns": returns,
        "climbs": len(climbs),
        "climbing edges": len(set(climbs)),
    }


@dataclass
class CallPath:
    """The files a request ran in, in order, cut where the framework (not ``api/``) calls
    in: the route, a dependency, and each resumption of a stream's body (one per event)."""

    segments: list[list[str]] = field(default_factory=list)
    #: Per segment, its calls from a file to one on a higher layer, ``(caller, callee)``.
    climbs: list[list[tuple[str, str]]] = field(default_factory=list)

    def enter(self, rel: str, caller: str | None) -> None:
        if caller is None or not self.segments:
            self.segments.append([])
            self.climbs.append([])
        stays = self.segments[-1]
        if not stays or stays[-1] != rel:
            stays.append(rel)
        if caller is not None and LAYERS.get(rel, 0) > LAYERS.get(caller, 0):
            self.climbs[-1].append((caller, rel))

    @property
    def stays(self) -> list[str]:
        """The whole path, one file per stay."""
        out: list[str] = []
        for rel in (r for seg in self.segments for r in seg):
            if not out or out[-1] != rel:
                out.append(rel)
        return out

    def commonest(self) -> tuple[list[str], list[tuple[str, str]]]:
        """The piece of 3 stays or more that recurs most (the longest of those): for a stream,
        one event's path."""
        shapes = [tuple(seg) for seg in self.segments]
        i = max(
            range(len(shapes)),
            key=lambda i: (len(shapes[i]) >= 3, shapes.count(shapes[i]), len(shapes[i])),
        )
        return self.segments[i], self.climbs[i]

    def longest(self) -> tuple[list[str], list[tuple[str, str]]]:
        """The longest segment and its climbs: for a stream, the path of one event."""
        i = max(range(len(self.segments)), key=lambda i: len(self.segments[i]))
        return self.segments[i], self.climbs[i]


#: Each ``api/`` file's layer (:func:`layers`), set by :func:`main`.
LAYERS: dict[str, int] = {}
#: The path being recorded (``None``: nothing is).
_RECORDING: list[CallPath] = []


def _inside(name: str) -> bool:
    return name.startswith(str(API) + "/") and name != str(API / "app.py")


def _rel(name: str) -> str:
    return Path(name).relative_to(ROOT).as_posix()


def _tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
    if event == "call" and _RECORDING and _inside(name := frame.f_code.co_filename):
        back = frame.f_back
        caller = back.f_code.co_filename if back is not None else ""
        _RECORDING[0].enter(_rel(name), _rel(caller) if _inside(caller) else None)
    return None


@contextmanager
def tracing() -> Iterator[None]:
    """Trace this thread and the threads started meanwhile (the test client's event loop)."""
    sys.settrace(_tracer)
    threading.settrace(_tracer)
    try:
        yield
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type,unused-ignore]


@contextmanager
def traced(path: CallPath) -> Iterator[None]:
    """Record function entries under ``api/`` into ``path`` (inside :func:`tracing`)."""
    _RECORDING.append(path)
    try:
        yield
    finally:
        _RECORDING.clear()


def trace_requests() -> dict[str, CallPath]:
    """The call paths of the two requests, ``{"POST /v1/query (sync)": ..., "OpenAI stream":
    ...}`` (each served once untraced first, so imports and first-call paths are not in it).

    Raises:
        AssertionError: a request did not answer as expected.
    """
    sys.path.insert(0, str(ROOT))
    from fastapi.testclient import TestClient

    from tests.unit.apikit import answered, make_app

    LAYERS.update(layers())
    with tempfile.TemporaryDirectory() as tmp:
        app, _ = make_app(Path(tmp), answered)
        with tracing(), TestClient(app) as client:
            client.post("/v1/query", json={"query": "warm up"})  # imports, first-call paths
            sync = CallPath()
            with traced(sync):
                r = client.post("/v1/query", json={"query": "What does VACUUM do?"})
            assert r.status_code == 200, r.text
            chat = {"messages": [{"role": "user", "content": "What does VACUUM do?"}]}
            client.post("/v1/chat/completions", json={**chat, "stream": True})
            stream = CallPath()
            with traced(stream):
                r = client.post("/v1/chat/completions", json={**chat, "stream": True})
            assert "[DONE]" in r.text, r.text
    return {"POST /v1/query (sync)": sync, "OpenAI stream": stream}


def main() -> None:
    """Print both requests' figures and paths."""
    for name, path in trace_requests().items():
        whole = (path.stays, [c for seg in path.climbs for c in seg])
        pieces = (
            ("whole request", whole),
            ("longest piece", path.longest()),
            ("commonest piece", path.commonest()),
        )
        for what, (stays, climbs) in pieces:
            counts = ", ".join(f"{k} {v}" for k, v in figures(stays, climbs).items())
            print(f"{name}, {what}: {counts}")
            print("  " + " -> ".join(f"{s}[{LAYERS.get(s, 0)}]" for s in stays))
            for a, b in sorted(set(climbs)):
                print(f"  climbs: {a} -> {b}")


if __name__ == "__main__":
    main()
