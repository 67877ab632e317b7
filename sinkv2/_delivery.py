"""Delivery guarantees a sink can promise."""

from __future__ import annotations

import enum

__all__ = ["DeliveryGuarantee"]


class DeliveryGuarantee(enum.Enum):
    """What a sink promises about records that reach it, across failures.

    The guarantee follows from the mixins a sink implements: a sink with a
    committer can be exactly-once; a sink without one is at most at-least-once.
    Values are Flink's configuration strings.
    """

    EXACTLY_ONCE = "exactly-once"
    """Every record is visible in the destination exactly once, after its checkpoint commits."""

    AT_LEAST_ONCE = "at-least-once"
    """No record is lost; after a failure some may be written again."""

    NONE = "none"
    """Best effort: records may be lost or duplicated on failure."""

    def __str__(self) -> str:
        return self.value
