"""Shadow replay (``ragstream replay``): logged queries answered again by a candidate
configuration on shadow topics, and a report of what changed (docs/replay.md).

- :mod:`bench.replay.selection`: which logged queries (tenant, time window, sample);
- :mod:`bench.replay.candidate`: the candidate (index alias, tier, model, settings) and the
  settings its shadow pools run with;
- :mod:`bench.replay.pacing`: the submit-rate bound;
- :mod:`bench.replay.shadow`: the shadow pools, submissions and answers;
- :mod:`bench.replay.report`: the comparison, as JSON and Markdown.
"""

from __future__ import annotations

from ragstream.errors import ConfigurationError


class ReplayError(ConfigurationError):
    """A replay that cannot run as asked: a missing index alias, an unknown tier, model or
    setting, an empty selection. Raised before any shadow process starts; the message says
    what to change."""
