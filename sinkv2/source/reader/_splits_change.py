"""What changed in a split reader's set of splits (Flink's ``SplitsChange``)."""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs

__all__ = ["SplitsAddition", "SplitsChange", "SplitsRemoval"]

SplitT = TypeVar("SplitT")


@attrs.frozen
class SplitsChange(Generic[SplitT]):
    """A change to the splits a `SplitReader` reads; see the subclasses.

    Attributes:
        splits: The splits concerned, in the order they were given.
    """

    splits: tuple[SplitT, ...]


@attrs.frozen
class SplitsAddition(SplitsChange[SplitT]):
    """Start reading these splits (from the positions they carry)."""


@attrs.frozen
class SplitsRemoval(SplitsChange[SplitT]):
    """Stop reading these splits; report them as finished."""
