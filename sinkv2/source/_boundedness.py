"""Whether a source ends (`Boundedness`), and what a reader's poll found (`InputStatus`)."""

from __future__ import annotations

import enum

__all__ = ["Boundedness", "InputStatus"]


class Boundedness(enum.Enum):
    """Whether a source's data ends (Flink's ``Boundedness``).

    A property of the `Source`, not of its readers: readers read the splits they are
    given and do not know whether more will come.
    """

    BOUNDED = "BOUNDED"
    """The source has a finite number of splits, each finite: a batch job can read it whole."""

    CONTINUOUS_UNBOUNDED = "CONTINUOUS_UNBOUNDED"
    """New splits or new records in splits may appear for ever: only a stream reads it."""


class InputStatus(enum.Enum):
    """What `SourceReader.poll_next` found (Flink's ``InputStatus``)."""

    MORE_AVAILABLE = "MORE_AVAILABLE"
    """Call `poll_next` again right away: there is (probably) more to emit."""

    NOTHING_AVAILABLE = "NOTHING_AVAILABLE"
    """Nothing to emit now; call `poll_next` again once `is_available` completes."""

    END_OF_INPUT = "END_OF_INPUT"
    """The reader is done: no more splits will come and every split it had is finished."""
