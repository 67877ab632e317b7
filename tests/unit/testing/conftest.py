"""The kit's own tests: a hypothesis profile for the tests of sinks with a planted bug.

Those tests check that the kit finds the bug and what its message names. Shrinking
the failing example to a short one re-runs hundreds of lifecycles and only makes the
history shorter, so they run under ``unshrunk``: the loaded profile without
``Phase.shrink`` (the kit takes its phases from the profile). Correct sinks keep every
phase, and so do two failures: the how-to's (``test_docs_example``: the default, shrinking
path end to end) and the half-done commit (``test_crash_points``), whose message must
still show the crash, which only a shrunk history keeps within the lines it shows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import Phase, settings

_UNSHRUNK = "sinkv2-kit-unshrunk"


@pytest.fixture
def unshrunk() -> Iterator[None]:
    """Load the current hypothesis profile without ``Phase.shrink`` for one test."""
    previous = settings.get_current_profile_name()
    parent = settings.get_profile(previous)
    settings.register_profile(
        _UNSHRUNK,
        parent=parent,
        phases=[p for p in parent.phases if p not in (Phase.shrink, Phase.explain)],
    )
    settings.load_profile(_UNSHRUNK)
    try:
        yield
    finally:
        settings.load_profile(previous)
