"""One fetch's records, grouped by split (Flink's ``RecordsWithSplitIds``, ``RecordsBySplits``)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, final

from sinkv2._text import describe

__all__ = ["RecordsBySplits", "RecordsWithSplitIds"]

E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)


class RecordsWithSplitIds(Protocol[E_co]):
    """What one `SplitReader.fetch` returned: records of one or more splits, split by split.

    Required: every method. The reader walks it as ``next_split()`` then
    ``next_record_from_split()`` until ``None``, for each split until
    ``next_split()`` is ``None``; then it reads `finished_splits` and calls
    `recycle`. Records are never ``None`` (``None`` ends a split's records).
    """

    def next_split(self) -> str | None:
        """Move to the next split that has records in this fetch; its id, or ``None`` at the end."""
        ...

    def next_record_from_split(self) -> E_co | None:
        """The current split's next record, or ``None`` when its records in this fetch are done."""
        ...

    def finished_splits(self) -> Collection[str]:
        """The splits that ended with this fetch: the reader drops them after their records."""
        ...

    def recycle(self) -> None:
        """The reader is done with this fetch; buffers may be reused."""
        ...


_NO_RECORDS: Iterator[Any] = iter(())
_NO_SPLITS: frozenset[str] = frozenset()


@final
class RecordsBySplits(Generic[E]):
    """A ready `RecordsWithSplitIds` from records grouped by split id.

    ``RecordsBySplits({"s0": [r1, r2]}, finished_splits=["s1"])`` has two records of
    ``s0`` and says ``s1`` ended (a finished split needs no records).
    """

    __slots__ = ("_finished", "_records", "_splits")

    def __init__(
        self,
        records_by_split: Mapping[str, Sequence[E]],
        finished_splits: Collection[str] = (),
    ) -> None:
        if not isinstance(records_by_split, Mapping):
            raise TypeError(
                "RecordsBySplits takes a mapping of split id to that split's records (got "
                f"{describe(records_by_split)}); e.g. RecordsBySplits({{split_id: records}})"
            )
        if isinstance(finished_splits, str):
            raise TypeError(
                f"RecordsBySplits' finished_splits is a collection of split ids (got the str "
                f"{finished_splits!r}, which would be its characters); pass [{finished_splits!r}]"
            )
        self._splits: Iterator[tuple[str, Sequence[E]]] = iter(list(records_by_split.items()))
        self._records: Iterator[E] = _NO_RECORDS
        self._finished = frozenset(finished_splits) if finished_splits else _NO_SPLITS

    @classmethod
    def finished(cls, *split_ids: str) -> RecordsBySplits[E]:
        """A fetch with no records that only reports ``split_ids`` as finished."""
        return cls({}, split_ids)

    def next_split(self) -> str | None:
        """See `RecordsWithSplitIds.next_split`."""
        found = next(self._splits, None)
        if found is None:
            self._records = _NO_RECORDS
            return None
        self._records = iter(found[1])
        return found[0]

    def next_record_from_split(self) -> E | None:
        """See `RecordsWithSplitIds.next_record_from_split`."""
        return next(self._records, None)

    def current_split_records(self) -> Iterator[E]:
        """The current split's records not read yet, as one iterator (ends at a ``None``).

        What the reader iterates instead of calling `next_record_from_split` once per
        record; reading from either advances both.
        """
        return iter(self._records.__next__, None)

    def finished_splits(self) -> Collection[str]:
        """See `RecordsWithSplitIds.finished_splits`."""
        return self._finished

    def recycle(self) -> None:
        """Nothing to reuse."""
