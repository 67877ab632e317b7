"""Where a reader puts its records: `SourceOutput` and `ReaderOutput`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import pyarrow

__all__ = ["ReaderOutput", "SourceOutput"]

T_contra = TypeVar("T_contra", contravariant=True)


class SourceOutput(Protocol[T_contra]):
    """Takes a reader's records (Flink's ``SourceOutput``).

    A record is a `dict` keyed by the source's column names (or a tuple in column
    order) matching `Source.get_produced_type`. `collect_batch` is the Arrow path
    (a sinkv2 extension): a whole `pyarrow.RecordBatch` of rows at once, about 4-5
    times cheaper on Spark than the same rows one by one.
    """

    def collect(self, record: T_contra, timestamp: int | None = None) -> None:
        """Emit one record, with its event time in ms if it has one."""
        ...

    def collect_batch(self, batch: pyarrow.RecordBatch) -> None:
        """Emit every row of ``batch`` at once (extension: the Arrow path).

        The batch's columns must be those of `Source.get_produced_type`, by name.
        """
        ...


class ReaderOutput(SourceOutput[T_contra], Protocol[T_contra]):
    """The output `SourceReader.poll_next` writes to (Flink's ``ReaderOutput``).

    A reader that reads several splits at once may emit each split's records through
    an output of its own (`create_output_for_split`): Flink keeps event time per split
    there; engines here also use it to attribute records to splits (the contract kit
    checks the order of each split's records).
    """

    def create_output_for_split(self, split_id: str) -> SourceOutput[T_contra]:
        """The output for one split's records; the same object for the same id until released."""
        ...

    def release_output_for_split(self, split_id: str) -> None:
        """Forget the split's output: the split is finished or was handed away."""
        ...
