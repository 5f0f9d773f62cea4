"""Which question sets a learned model may train on: the committed registry
``bench/evaluation/judged.json`` (issue 50).

A set is a **dev** set (tuned on, always usable) or a **blind** set (written by someone who read
only the documents, run once to judge a change). A blind set may be trained on only after it has
been judged: its ``judged`` date is set and is not after the day of training. A set missing from
the registry is treated as an unjudged blind set, so a new file is never trained on by accident.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from ragstream.errors import ConfigurationError
from ragstream.settings import PROJECT_ROOT

__all__ = ["REGISTRY", "SetEntry", "check_trainable", "load_registry", "set_key", "trainable"]

#: The committed registry.
REGISTRY = PROJECT_ROOT / "bench" / "evaluation" / "judged.json"


@dataclass(frozen=True, slots=True)
class SetEntry:
    """One question set: ``role`` ``dev`` or ``blind``, ``judged`` the day it was judged blind."""

    key: str
    role: str
    judged: dt.date | None


def set_key(path: Path) -> str:
    """A question file's registry key: its path relative to the directory above the checkout
    for ``shared/...``, else relative to the checkout (``bench/evaluation/questions.dev.jsonl``)."""
    resolved = path.resolve()
    for base in (PROJECT_ROOT, PROJECT_ROOT.parent):
        if resolved.is_relative_to(base):
            return resolved.relative_to(base).as_posix()
    return resolved.as_posix()


def load_registry(path: Path = REGISTRY) -> dict[str, SetEntry]:
    """The registry's entries by key.

    Raises:
        ConfigurationError: the file is missing or an entry is malformed (names it).
    """
    try:
        raw = json.loads(path.read_text())["sets"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigurationError(f"judged-set registry {path} unreadable: {exc}") from exc
    out: dict[str, SetEntry] = {}
    for key, entry in raw.items():
        role = entry.get("role")
        if role not in ("dev", "blind"):
            raise ConfigurationError(f"{path}: set {key}: role {role!r}, expected dev or blind")
        day = entry.get("judged")
        try:
            judged = dt.date.fromisoformat(day) if day else None
        except ValueError as exc:
            raise ConfigurationError(f"{path}: set {key}: judged {day!r} is no date") from exc
        out[key] = SetEntry(key, role, judged)
    return out


def trainable(key: str, registry: dict[str, SetEntry], *, on: dt.date | None = None) -> bool:
    """Whether the set ``key`` may be trained on on day ``on`` (today, UTC, by default)."""
    entry = registry.get(key)
    if entry is None:
        return False
    if entry.role == "dev":
        return True
    day = on or dt.datetime.now(dt.UTC).date()
    return entry.judged is not None and entry.judged <= day


def check_trainable(
    keys: list[str], registry: dict[str, SetEntry], *, on: dt.date | None = None
) -> None:
    """Refuse to train on any set that is not judged.

    Raises:
        ConfigurationError: names every set that is blind and not yet judged, or unregistered.
    """
    bad = [k for k in keys if not trainable(k, registry, on=on)]
    if bad:
        raise ConfigurationError(
            f"not judged blind yet (or not in {REGISTRY.name}), never trained on: {', '.join(bad)}"
        )
