r"""Flink's reader framework (``flink-connector-base``) in Python.

Implement a `SplitReader` (what talks to the external system; it may block) and a
`RecordEmitter` (turns what it fetched into records and advances the split's
position), extend `SingleThreadMultiplexSourceReaderBase`, and the reader gets a
fetcher thread, a bounded hand-over queue, wake-ups when splits arrive,
finished-split bookkeeping and `snapshot_state` with every split's current position.

For speed on Spark, fetch whole ``pyarrow.RecordBatch``\\ es and emit them with
``output.collect_batch``: the framework's cost is per fetch handed over (tens of
microseconds), so it is small beside a fetch of tens of thousands of rows; rows one
by one cost several times the Arrow path, framework or not.
"""

from sinkv2._public import publish as _publish
from sinkv2.source.reader._base import SingleThreadMultiplexSourceReaderBase, SourceReaderBase
from sinkv2.source.reader._emitter import RecordEmitter
from sinkv2.source.reader._fetcher import SingleThreadFetcherManager
from sinkv2.source.reader._queue import DEFAULT_ELEMENT_QUEUE_CAPACITY, ElementQueue
from sinkv2.source.reader._records import RecordsBySplits, RecordsWithSplitIds
from sinkv2.source.reader._split_reader import SplitReader
from sinkv2.source.reader._splits_change import SplitsAddition, SplitsChange, SplitsRemoval

__all__ = [
    "DEFAULT_ELEMENT_QUEUE_CAPACITY",
    "ElementQueue",
    "RecordEmitter",
    "RecordsBySplits",
    "RecordsWithSplitIds",
    "SingleThreadFetcherManager",
    "SingleThreadMultiplexSourceReaderBase",
    "SourceReaderBase",
    "SplitReader",
    "SplitsAddition",
    "SplitsChange",
    "SplitsRemoval",
]

_publish(__name__)
