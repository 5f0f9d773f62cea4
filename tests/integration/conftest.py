"""Integration tests run against the real services that ``make up`` starts (never mocks)."""

from __future__ import annotations

import pytest

from tests.integration.ingestkit import chunker, kit, model

__all__ = ["chunker", "kit", "model"]  # shared fixtures


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)
