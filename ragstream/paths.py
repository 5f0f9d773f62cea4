"""Where the project lives on disk, in a module of its own so that code needing only the path
(the CLI's help, the demo's constants) does not load the settings tree."""

from __future__ import annotations

from pathlib import Path

#: The checkout's root (the folder with ``pyproject.toml``).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
