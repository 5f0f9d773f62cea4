"""The hand-written documentation stays true to the tree.

README.md, CONTRIBUTING.md and every page under docs/ may only name settings variables that the
settings tree has and ``ragstream`` commands and options that the CLI has; the README stays a
front door (at most 220 lines) whose links all lead somewhere. ``mkdocs build --strict`` (make
lint) checks the links and anchors between the pages themselves.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from entry.cli import app
from entry.query import AskByDefault
from ragstream import settings_doc
from ragstream.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
#: The hand-written pages (the configuration reference is generated from the settings).
PAGES = sorted(
    [README, PROJECT_ROOT / "CONTRIBUTING.md", *DOCS.rglob("*.md")],
)
HAND_WRITTEN = [p for p in PAGES if p != DOCS / "configuration.md"]
VARIABLE = re.compile(r"RAGSTREAM_[A-Za-z0-9_<>]+")
COMMAND = re.compile(r"(?:^|[\s/])ragstream ([a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)*)(.*)")


def _code(text: str) -> list[str]:
    """Every line of a fenced code block and every inline code span of ``text``."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            out.append(line)
        else:
            out.extend(line.split("`")[1::2])
    return out


def commands_in(text: str) -> list[list[str]]:
    """The ``ragstream ...`` command lines in ``text``'s code, as argument lists (comments,
    ``[optional parts]``, ``&``, ``...`` and the bracket closing a prose parenthesis removed)."""
    found = []
    for code in _code(text):
        match = COMMAND.search(code)
        if match is None:
            continue
        line = re.sub(r"\[[^\]]*\]", "", (match.group(1) + match.group(2)).split(" #")[0])
        try:
            tokens = shlex.split(line)
        except ValueError:  # an unclosed quote in a prose span
            tokens = line.split()
        tokens = [t.rstrip(")") if t.endswith(")") and "(" not in t else t for t in tokens]
        found.append([t for t in tokens if t not in ("&", "...", "\\")])
    return found


def resolve(args: list[str]) -> Any:
    """Walk the CLI's click tree along ``args``; fail if a command or ``--option`` is unknown.
    An unknown word under ``ragstream query`` is its question (``AskByDefault``)."""
    command: Any = typer.main.get_command(app)
    rest = list(args)
    while hasattr(command, "commands") and rest:
        name = rest[0]
        if name not in command.commands and isinstance(command, AskByDefault):
            name = "ask"
        else:
            rest.pop(0)
        sub = command.commands.get(name)
        assert sub is not None, f"`ragstream {' '.join(args)}`: no command {name!r}"
        command = sub
    known = {
        opt
        for p in command.params
        for opt in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
    }
    for token in rest:
        if token.startswith("--"):
            assert token.split("=")[0] in known, f"`ragstream {' '.join(args)}`: no {token}"
    return command


def cli_envvars() -> set[str]:
    """The environment variables that CLI options read (typer's ``envvar``)."""
    found: set[str] = set()
    stack: list[Any] = [typer.main.get_command(app)]
    while stack:
        command = stack.pop()
        stack.extend(getattr(command, "commands", {}).values())
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            found.update([envvar] if isinstance(envvar, str) else (envvar or []))
    return found


def test_every_settings_variable_named_in_the_docs_exists() -> None:
    fields = set(re.findall(r"^\| `(RAGSTREAM_[A-Z0-9_]+)` \|", settings_doc.render(), re.M))
    fields |= cli_envvars()
    unknown = [
        f"{page.relative_to(PROJECT_ROOT)}: {name}"
        for page in HAND_WRITTEN
        for name in {m.rstrip("_") for m in VARIABLE.findall(page.read_text(encoding="utf-8"))}
        if "<" not in name and name not in fields
    ]
    assert not unknown, "settings the tree does not have:\n" + "\n".join(sorted(unknown))


@pytest.mark.parametrize("page", HAND_WRITTEN, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_command_named_in_the_docs_exists(page: Path) -> None:
    for args in commands_in(page.read_text(encoding="utf-8")):
        resolve(args)


def test_command_check_catches_unknown_commands_and_options() -> None:
    [args] = commands_in("Run `ragstream index rebuild --no-swap --source a` (prose).")
    assert args == ["index", "rebuild", "--no-swap", "--source", "a"]
    resolve(args)  # a flag's --no- form is an option too
    resolve(commands_in('`ragstream query "What is VACUUM?" --stream`')[0])  # ask by default
    with pytest.raises(AssertionError, match="no command 'no-such'"):
        resolve(commands_in("```bash\nragstream index no-such  # comment\n```")[0])
    with pytest.raises(AssertionError, match="no --bogus"):
        resolve(commands_in("`ragstream jobs list [--limit 20] --bogus 1`")[0])


def test_readme_is_a_front_door_whose_links_lead_somewhere() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if "://" not in t and not (PROJECT_ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
