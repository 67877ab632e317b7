"""The contract-test kit's pytest plugin (entry point ``sinkv2`` under ``pytest11``).

Adds ``--sinkv2-examples N``: every `sinkv2.testing.check_sink` and
`sinkv2.testing.SinkContractTests` test in the session runs N examples per stage
(beats ``$SINKV2_KIT_EXAMPLES`` and the ``max_examples`` in the code).

pytest loads this module in every session of every project installed next to
sinkv2, so it is a top-level module that imports nothing of sinkv2 (hypothesis'
``_hypothesis_pytestplugin`` is the model): only a session that passes the option
imports the kit's settings module, and only to set it.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["pytest_addoption", "pytest_configure", "pytest_unconfigure"]

_SETTINGS = "sinkv2.testing._settings"


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
    """Apply ``--sinkv2-examples`` for this session, if it was given.

    Raises:
        ValueError: N is not a positive int.
    """
    examples = config.getoption("sinkv2_examples")
    if examples is None:
        return
    from sinkv2.testing._settings import set_examples_override  # noqa: PLC0415  # loads sinkv2

    set_examples_override(examples)


def pytest_unconfigure(config: Any) -> None:
    """Undo the override at the end of the session (nothing to undo if the kit never loaded)."""
    settings = sys.modules.get(_SETTINGS)
    if settings is not None:
        settings.set_examples_override(None)
