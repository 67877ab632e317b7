"""The part of a reader that talks to the external system (Flink's ``SplitReader``)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from sinkv2.source.reader._records import RecordsWithSplitIds
from sinkv2.source.reader._splits_change import SplitsChange

__all__ = ["SplitReader"]

E_co = TypeVar("E_co", covariant=True)
SplitT = TypeVar("SplitT")


class SplitReader(Protocol[E_co, SplitT]):
    """Fetches records of its splits; runs in the reader's fetcher thread only.

    Required: every method. One fetcher thread calls `fetch`,
    `handle_splits_changes` and `close`; `wake_up` is called from the reader's
    thread while `fetch` may be running.
    """

    def fetch(self) -> RecordsWithSplitIds[E_co]:
        """The next records of any of its splits; may block, but returns soon after `wake_up`.

        A split that ended (or was removed, or is invalid) is reported in
        ``finished_splits()``, after its last records: the reader then drops it.
        Returning no records (an empty `RecordsBySplits`) is fine.

        Raises:
            Exception: Any error fails the reader (`SourceReaderError` in its thread).
        """
        ...

    def handle_splits_changes(self, splits_changes: SplitsChange[SplitT]) -> None:
        """Take a `SplitsAddition` or `SplitsRemoval` into account; must not block."""
        ...

    def wake_up(self) -> None:
        """Make a blocking `fetch` return soon (with what it has, possibly nothing).

        Also called when no fetch is running; it must then do no harm.
        """
        ...

    def close(self) -> None:
        """Release the connection; called once, by the fetcher thread, when it shuts down."""
        ...
