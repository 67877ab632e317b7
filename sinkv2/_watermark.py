"""Event-time watermarks passed to writers."""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["NO_WATERMARK", "Watermark"]

NO_WATERMARK: Final[int] = -(2**63)
"""The watermark before the first one arrives (Java's ``Long.MIN_VALUE``)."""


@attrs.frozen
class Watermark:
    """A promise that no element with an event time at or before `timestamp` follows.

    Attributes:
        timestamp: Event time in milliseconds since the epoch.
    """

    timestamp: int

    def get_timestamp(self) -> int:
        """The watermark's event time in milliseconds."""
        return self.timestamp
