"""How many examples the kit runs: argument, environment, or the pytest option."""

from __future__ import annotations

import contextlib
import os
from typing import Final

__all__ = ["ENV_EXAMPLES", "resolve_examples", "set_examples_override"]

ENV_EXAMPLES: Final = "SINKV2_KIT_EXAMPLES"
"""The environment variable that sets the number of examples for every check."""

_override: list[int] = []


def set_examples_override(examples: int | None) -> None:
    """Make every check run ``examples`` examples (the pytest option); ``None`` undoes it."""
    _override.clear()
    if examples is not None:
        _override.append(_positive(examples, "--sinkv2-examples"))


def _positive(value: object, where: str) -> int:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"{where} must be a positive int (got {value!r} of type {type(value).__name__}); "
            "set it to the number of hypothesis examples to run, e.g. 200"
        )
    return value


def resolve_examples(requested: int) -> int:
    """The number of examples to run.

    The pytest option ``--sinkv2-examples`` wins, then the environment variable
    ``SINKV2_KIT_EXAMPLES``, then ``requested`` (the caller's ``max_examples``).

    Raises:
        ValueError: The winning value is not a positive int.
    """
    if _override:
        return _override[0]
    from_env = os.environ.get(ENV_EXAMPLES)
    if from_env:
        return _positive(from_env, f"${ENV_EXAMPLES}")
    return _positive(requested, "max_examples")
