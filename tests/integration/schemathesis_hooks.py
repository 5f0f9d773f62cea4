"""Schemathesis checks of ragstream's own, loaded by ``test_api_schemathesis.py`` (through
``SCHEMATHESIS_HOOKS``) and run with ``--checks all`` beside the built-in ones."""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.check
def a_504_is_a_typed_timeout(ctx: Any, response: Any, case: Any) -> bool | None:
    """The one 5xx the configuration allows (a valid question nobody answers, no pools run)
    must be the typed ``TIMEOUT`` error, in the route's error shape (OpenAI's: ``code``)."""
    if response.status_code != 504:
        return None
    body = response.json()
    assert body["error"]["code"] == "TIMEOUT", body
    return True
