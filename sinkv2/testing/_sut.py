"""`SinkUnderTest`: one sink pointed at one fresh destination, and how to look into it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import final

import attrs

__all__ = ["SinkUnderTest"]


def _nothing_to_close() -> None:
    return


@final
@attrs.frozen
class SinkUnderTest:
    """A sink pointed at a fresh destination, for one run of the contract tests.

    The kit calls your factory once per generated example (hypothesis runs many),
    so each example starts from an empty destination.

    Attributes:
        sink: The sink instance, configured to write into the fresh destination.
        read_back: Returns the elements visible in the destination now, the way a
            reader would see them (committed output only). Compared as a multiset:
            order is ignored, duplicates count. Elements must compare equal to what
            the kit wrote, so return them in the shape the ``elements`` strategy
            generates (e.g. dicts for rows).
        close: Drops the destination (removes the directory, the table...). Called
            once at the end of each example, also after a failure.
    """

    sink: object
    read_back: Callable[[], Iterable[object]]
    close: Callable[[], None] = _nothing_to_close
