"""The kit's pytest plugin (entry point ``sinkv2`` under ``pytest11``).

Adds ``--sinkv2-examples N``: every `sinkv2.testing.check_sink` and
`sinkv2.testing.SinkContractTests` test in the session runs N examples per stage
(beats ``$SINKV2_KIT_EXAMPLES`` and the ``max_examples`` in the code). Loading the
plugin imports neither pyspark nor hypothesis.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: Any) -> None:
    """Register ``--sinkv2-examples``."""
    group = parser.getgroup("sinkv2", "sinkv2 contract-test kit")
    group.addoption(
        "--sinkv2-examples",
        action="store",
        type=int,
        default=None,
        metavar="N",
        help="examples per stage for every sinkv2.testing check "
        "(default: the test's max_examples, or $SINKV2_KIT_EXAMPLES)",
    )


def pytest_configure(config: Any) -> None:
    """Apply ``--sinkv2-examples`` for this session."""
    from sinkv2.testing._settings import set_examples_override  # noqa: PLC0415  # keep loading cheap

    set_examples_override(config.getoption("sinkv2_examples"))


def pytest_unconfigure(config: Any) -> None:
    """Undo the override at the end of the session."""
    from sinkv2.testing._settings import set_examples_override  # noqa: PLC0415  # keep loading cheap

    set_examples_override(None)
