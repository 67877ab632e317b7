"""A FLIP-27 source as Spark's ``DataSourceStreamReader``: epochs recorded, replays exact.

Spark keeps one offset per micro-batch and nothing else for a Python source; it
fixes a micro-batch's end on the driver (``latestOffset``), plans its tasks from the
logged offsets (``partitions``) - again, without asking first, when it replays a
micro-batch after a crash - and runs every task with a reader pickled once per
query run. So this reader only translates: the source coordinator
(`SourceEpochCoordinator`, one per query run, in Spark's long-lived streaming source
runner) decides and records each epoch, the offset points at it, ``partitions``
loads it, and each task reads its `EpochSlice` to the stop positions. The
coordinator is made on first use, in the process that plans: never in the user's
driver, never in a task.

A ``maxRecordsPerTrigger`` that a source's splits will not honour (they are read
whole and not counted: `SupportsUncountedSplits`) is told once at the start of the
query, as a WARNING on the ``sinkv2.spark`` logger: by `from_source` in the user's
process, by the read door in the process that plans (the driver's log).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.streaming.datasource import ReadLimit as SparkReadLimit

from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    EpochSlice,
    ReadLimit,
    SourceEpochCoordinator,
    SourceOffset,
    SourceStateStore,
    read_epoch_slice,
)
from sinkv2.source import SourceContractError, SupportsEndPositions, SupportsUncountedSplits
from sinkv2.text import describe, short_repr

if TYPE_CHECKING:
    import pyarrow

__all__ = ["EpochPartition", "SourceStreamReader", "read_limit", "record_limit_notice"]

logger = logging.getLogger("sinkv2.spark")


class EpochPartition(InputPartition):
    """One subtask's share of one epoch, as Spark ships it to a task."""

    def __init__(self, piece: EpochSlice) -> None:
        super().__init__(piece.subtask)
        self.piece = piece


def read_limit(max_records: int | None, max_splits: int | None) -> SparkReadLimit:
    """Spark's default read limit for the ``maxRecordsPerTrigger``/``maxSplitsPerTrigger`` options.

    Raises:
        SinkConfigurationError: Both are set: Spark passes one limit to a Python source.
    """
    if max_records is not None and max_splits is not None:
        raise SinkConfigurationError(
            f"maxRecordsPerTrigger ({max_records}) and maxSplitsPerTrigger ({max_splits}) were "
            "both set; Spark hands a Python source one read limit, so set one of them"
        )
    if max_records is not None:
        return ReadMaxRows(max_records)
    if max_splits is not None:
        return ReadMaxFiles(max_splits)
    return ReadAllAvailable()


def record_limit_notice(source: Any, max_records: int | None) -> str | None:
    """The warning for a ``maxRecordsPerTrigger`` that ``source``'s splits will not honour.

    ``None`` without a record limit, or when the source does not say its splits are
    uncounted (`SupportsUncountedSplits.uncounted_splits` absent or ``None``).

    Raises:
        SourceContractError: ``uncounted_splits()`` returned neither ``None`` nor a
            non-empty str.
    """
    if max_records is None or not isinstance(source, SupportsUncountedSplits):
        return None
    reason = source.uncounted_splits()
    if reason is None:
        return None
    if not isinstance(reason, str) or not reason.strip():
        raise SourceContractError(
            f"{describe(source)}.uncounted_splits() returned {describe(reason)}; return None "
            "when its splits get end positions, or a str saying why they are read whole",
            method="uncounted_splits",
        )
    return (
        f"maxRecordsPerTrigger (max_records_per_trigger) is {max_records}, but it will not bound "
        f"the micro-batches of {short_repr(source)}: {reason}. A split read whole is not "
        "counted by the limit, so a micro-batch holds every such split available, however "
        "many records they hold. Bound this stream with maxSplitsPerTrigger "
        "(max_splits_per_trigger) instead: at most that many splits per micro-batch"
    )


def _limit(limit: SparkReadLimit) -> ReadLimit:
    if isinstance(limit, ReadMaxRows):
        return ReadLimit(max_records=limit.max_rows)
    if isinstance(limit, ReadMaxFiles):
        return ReadLimit(max_splits=limit.max_files)
    return ReadLimit()


class SourceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream reader over a FLIP-27 source, with positions recorded per epoch.

    A record limit that the source's splits will not honour is warned about once,
    when the query starts (`warn_record_limit`).

    Raises:
        SinkConfigurationError: Both limits, or a record limit for a source whose
            splits cannot be cut (no `SupportsEndPositions`).
        SourceContractError: The source's ``uncounted_splits()`` broke its contract.
    """

    def __init__(
        self,
        source: Any,
        arrow_schema: pyarrow.Schema,
        *,
        source_id: str,
        store: SourceStateStore,
        parallelism: int,
        batch_rows: int,
        max_records: int | None = None,
        max_splits: int | None = None,
    ) -> None:
        self._source = source
        self._arrow_schema = arrow_schema
        self._source_id = source_id
        self._store = store
        self._parallelism = parallelism
        self._batch_rows = batch_rows
        if max_records is not None and not isinstance(source, SupportsEndPositions):
            raise SinkConfigurationError(
                f"maxRecordsPerTrigger ({max_records}) limits the records cut from splits with "
                f"end positions, and {describe(source)} does not implement "
                "sinkv2.source.SupportsEndPositions: its splits are read whole. Limit it with "
                "maxSplitsPerTrigger (max_splits_per_trigger) instead"
            )
        self._default_limit = read_limit(max_records, max_splits)
        self._limit_notice = record_limit_notice(source, max_records)
        self._coordinator: SourceEpochCoordinator | None = None

    def warn_record_limit(self) -> None:
        """Log the `record_limit_notice` as a WARNING, once: not again by this reader's copies.

        `from_source` calls it in the user's process before the reader is shipped;
        otherwise it runs when the coordinator is made (the query's first offset).
        """
        if self._limit_notice is not None:
            notice, self._limit_notice = self._limit_notice, None
            logger.warning("%s", notice)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_coordinator"] = None  # a lease belongs to the process that took it
        return state

    def _coordinate(self) -> SourceEpochCoordinator:
        if self._coordinator is None:
            self.warn_record_limit()
            self._coordinator = SourceEpochCoordinator(
                self._source, self._store, self._source_id, parallelism=self._parallelism
            )
        return self._coordinator

    def _epoch(self, offset: dict[str, Any]) -> int:
        return SourceOffset.from_dict(offset, source_id=self._source_id).epoch

    def _offset(self, epoch: int) -> dict[str, Any]:
        return SourceOffset(self._source_id, epoch).to_dict()

    def initialOffset(self) -> dict[str, Any]:  # Spark's name
        return self._offset(self._coordinate().initial_epoch())

    def getDefaultReadLimit(self) -> SparkReadLimit:  # Spark's name
        return self._default_limit

    def latestOffset(self, start: dict[str, Any], limit: SparkReadLimit) -> dict[str, Any]:
        epoch = self._coordinate().next_epoch(self._epoch(start), _limit(limit))
        return self._offset(epoch)

    def prepareForTriggerAvailableNow(self) -> None:  # Spark's name
        self._coordinate().prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        # the checkpoint's offsets are ours, for this source id; and they are logged now
        slices = self._coordinate().slices(self._epoch(end), start=self._epoch(start))
        return [EpochPartition(piece) for piece in slices]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        if not isinstance(partition, EpochPartition):
            return
        yield from read_epoch_slice(
            self._source, self._arrow_schema, partition.piece, batch_rows=self._batch_rows
        )

    def commit(self, end: dict[str, Any]) -> None:
        self._coordinate().acknowledge(self._epoch(end))

    def stop(self) -> None:
        if self._coordinator is not None:
            coordinator, self._coordinator = self._coordinator, None
            coordinator.close()
