"""The call path of ``POST /v1/query`` goes down ``api/`` once (issue 36): traced on the real
app with the pools faked (``python -m bench.call_path``), the sync request climbs into no file
above the one calling, and comes back to a file it had left at most twice (the route and the
seam, resumed when the answer's wait ends, to build the response); one event of the OpenAI
stream comes back to none."""

from __future__ import annotations

import pytest

from bench.call_path import CallPath, figures, trace_requests


@pytest.fixture(scope="module")
def paths() -> dict[str, CallPath]:
    return trace_requests()


def test_the_sync_query_goes_down_once(paths: dict[str, CallPath]) -> None:
    path = paths["POST /v1/query (sync)"]
    got = figures(path.stays, [c for seg in path.climbs for c in seg])
    assert got["climbs"] == 0, path.stays
    assert got["returns"] <= 2, path.stays
    # the route asks the seam once, and the response is built after the wait, in one place
    assert path.stays[-3:] == ["api/routes/query.py", "api/asking.py", "api/models.py"]


def test_one_event_of_the_openai_stream_returns_to_no_file(paths: dict[str, CallPath]) -> None:
    stays, climbs = paths["OpenAI stream"].commonest()
    got = figures(stays, climbs)
    assert got["returns"] == 0 and got["climbs"] == 0, stays


def test_figures_count_returns_and_climbs() -> None:
    got = figures(["a", "b", "a", "c", "b"], [("b", "a")])
    assert got == {"stays": 5, "files": 3, "returns": 2, "climbs": 1, "climbing edges": 1}
