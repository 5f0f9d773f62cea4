"""Shared fixtures: the settings tree and per-test unique names for topics, groups and indices."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest

from ragstream.settings import Settings


@pytest.fixture
def settings() -> Settings:
    """Settings built from the environment, as every process builds them."""
    return Settings()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Return ``f(prefix)`` giving a name unique to this test, valid as topic and index name."""
    test = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40]
    token = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        return f"t-{prefix}-{test}-{token}"

    return make
