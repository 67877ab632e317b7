"""Tables for the Iceberg sink's tests: a real SqlCatalog on SQLite in a temp dir."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import attrs
import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import ancestors_of
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType, TimestamptzType

from reference_sinks.iceberg import IcebergCommittable, IcebergSink
from reference_sinks.iceberg._model import AggregateWriteResults
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext

SCHEMA = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "key", StringType()),
    NestedField(3, "value", DoubleType()),
    NestedField(4, "ts", TimestamptzType()),
    NestedField(5, "day", DateType()),
)
IDENTITY_AND_DAY = PartitionSpec(
    PartitionField(2, 1000, IdentityTransform(), "key"),
    PartitionField(4, 1001, DayTransform(), "ts_day"),
)
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("key", pa.string()),
        ("value", pa.float64()),
        ("ts", pa.timestamp("us", "UTC")),
        ("day", pa.date32()),
    ]
)
EPOCH = dt.datetime(2024, 3, 30, tzinfo=dt.UTC)


def rows(start: int, count: int) -> pa.RecordBatch:
    """``count`` rows with ids from ``start``: 3 keys, timestamps over 4 days, one null key."""
    ids = list(range(start, start + count))
    return pa.RecordBatch.from_pydict(
        {
            "id": ids,
            "key": [None if i % 17 == 0 else f"k{i % 3}" for i in ids],
            "value": [i / 4 for i in ids],
            "ts": [EPOCH + dt.timedelta(hours=7 * (i % 14)) for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 5) for i in ids],
        },
        schema=ARROW_SCHEMA,
    )


def make_sink(
    warehouse: Path, *, partitioned: bool = False, table: str = "ns.events", **options: object
) -> IcebergSink:
    """A sink on a new (or the existing) table in ``warehouse``."""
    return IcebergSink.local(
        warehouse,
        table,
        schema=SCHEMA,
        partition_spec=IDENTITY_AND_DAY if partitioned else None,
        **options,  # type: ignore[arg-type]
    )


def read_back(sink: IcebergSink) -> list[dict[str, object]]:
    """Every row of the table, sorted by id."""
    return sink.load_table().scan().to_arrow().sort_by("id").to_pylist()


def stage(
    sink: IcebergSink,
    batches: list[pa.RecordBatch],
    *,
    job_id: str = "job",
    subtask: int = 0,
    attempt: int = 0,
    checkpoint_id: int | None = None,
) -> IcebergCommittable:
    """Run one writer over ``batches`` and aggregate its output into a committable."""
    context = BasicWriterInitContext(
        subtask_id=subtask,
        number_of_parallel_subtasks=subtask + 1,
        job_id=job_id,
        attempt_token=f"{job_id}-{subtask:05d}-{attempt}",
    )
    writer = sink.create_writer(context)
    for batch in batches:
        writer.write_arrow_batch(batch, BasicSinkWriterContext())
    writer.flush(True)
    results = [attrs.evolve(r, checkpoint_id=checkpoint_id) for r in writer.prepare_commit()]
    writer.close()
    return AggregateWriteResults(sink.sink_id)(results)


def snapshots_of(sink: IcebergSink) -> list[dict[str, str]]:
    """The summaries of the current snapshot's ancestors, oldest first."""
    table = sink.load_table()
    return [
        dict(snapshot.summary.additional_properties)
        for snapshot in reversed(list(ancestors_of(table.current_snapshot(), table.metadata)))
        if snapshot.summary is not None
    ]
