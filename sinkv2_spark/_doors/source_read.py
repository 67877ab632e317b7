"""`from_source`: a FLIP-27 source read by Spark as a DataFrame (Flink's ``fromSource``).

A bounded source reads as a batch DataFrame. Spark's Python data source API plans a
batch read once, on the driver (``partitions()`` in a planner process), and runs one
task per partition with a reader pickled once. So the enumerator runs to "no more
splits" while planning (`plan_bounded_read`), each reader subtask with splits becomes
one partition carrying its framed splits, and each task reads its splits to their end
with a fresh reader (`read_subtask`), as Arrow batches in Spark's Arrow schema of the
source's produced type. A failed task reads its partition again from its start:
splits are read whole or not at all.

A stream (an unbounded source, or ``streaming=True``) reads through
`SourceStreamReader`: each micro-batch is an epoch recorded under the ``source_id``
in the commit state store before Spark logs its offset, so a replay reads the same
rows.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    DEFAULT_BATCH_ROWS,
    SourceStateStore,
    check_streamable,
    plan_bounded_read,
    read_subtask,
)
from sinkv2.source import Boundedness, SourceEvent, inspect_source
from sinkv2.text import describe
from sinkv2_spark._doors.source_native import door_native_option, native_frame
from sinkv2_spark._doors.source_options import (
    SOURCE_DOOR_OPTIONS,
    SOURCE_SHORT_NAMES,
    check_source_shippable,
    door_source,
    positive_option,
    task_options,
    workers_must_import,
)
from sinkv2_spark._doors.source_stream import SourceStreamReader
from sinkv2_spark._rules.options import open_store

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "SOURCE_DOOR_OPTIONS",
    "SOURCE_SHORT_NAMES",
    "BoundedSourceReader",
    "SplitSlice",
    "door_reader",
    "door_source",
    "door_stream_reader",
    "from_source",
    "source_schema",
    "source_store",
]

_NAMES: Final = itertools.count()

logger = logging.getLogger("sinkv2.spark")


class SplitSlice(InputPartition):
    """One reader subtask's share of a bounded read: its framed splits and events."""

    def __init__(
        self, subtask: int, parallelism: int, splits: Sequence[bytes], events: Sequence[SourceEvent]
    ) -> None:
        super().__init__(subtask)
        self.subtask = subtask
        self.parallelism = parallelism
        self.splits = tuple(splits)
        self.events = tuple(events)


class BoundedSourceReader(DataSourceReader):
    """Spark's batch reader over a bounded source: plans on the driver, reads in tasks."""

    def __init__(
        self, source: Any, arrow_schema: pyarrow.Schema, parallelism: int, batch_rows: int
    ) -> None:
        self._source = source
        self._arrow_schema = arrow_schema
        self._parallelism = parallelism
        self._batch_rows = batch_rows

    def partitions(self) -> list[InputPartition]:
        plan = plan_bounded_read(self._source, self._parallelism)
        return [
            SplitSlice(subtask, plan.parallelism, splits, plan.events[subtask])
            for subtask, splits in enumerate(plan.splits)
            if splits or plan.events[subtask]
        ]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        if not isinstance(partition, SplitSlice):  # no splits at all: Spark's one empty task
            return
        yield from read_subtask(
            self._source,
            self._arrow_schema,
            subtask=partition.subtask,
            parallelism=partition.parallelism,
            splits=partition.splits,
            events=partition.events,
            batch_rows=self._batch_rows,
        )


def _spark_schema(source: Any) -> tuple[StructType, pyarrow.Schema]:
    """The source's produced type as Spark's schema, and that schema back in Arrow.

    Spark checks a reader's first batch against ``to_arrow_schema(schema)``, so the
    readers emit the round-tripped schema (a ``large_string`` becomes ``string``).
    """
    import pyarrow as pa  # noqa: PLC0415  # needed only when a source is read
    from pyspark.sql.pandas.types import (  # noqa: PLC0415  # pulls in pandas' checks
        from_arrow_schema,
        to_arrow_schema,
    )

    produced = source.get_produced_type()
    if not isinstance(produced, pa.Schema):
        raise TypeError(
            f"{describe(source)}.get_produced_type() returned {describe(produced)}; "
            "return a pyarrow.Schema"
        )
    try:
        spark_schema = from_arrow_schema(produced)
    except (TypeError, NotImplementedError) as error:
        raise TypeError(
            f"{describe(source)} produces {produced}, which Spark cannot hold ({error}); "
            "produce types Spark supports"
        ) from error
    return spark_schema, to_arrow_schema(spark_schema, timezone="UTC")  # as Spark checks it


def _default_parallelism(spark: SparkSession) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001  # Spark Connect has no SparkContext (raises its own)
        configured = spark.conf.get("spark.default.parallelism", None)
        return int(configured) if configured else max(os.cpu_count() or 1, 1)


def from_source(
    spark: SparkSession,
    source: Any,
    *,
    source_id: str | None = None,
    streaming: bool | None = None,
    parallelism: int | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    state_store: SourceStateStore | str | os.PathLike[str] | None = None,
    max_records_per_trigger: int | None = None,
    max_splits_per_trigger: int | None = None,
    native_read: bool | None = None,
) -> DataFrame:
    """A DataFrame of everything ``source`` produces (Flink's ``env.fromSource``).

    Args:
        spark: The session to read with.
        source: A FLIP-27 `Source` (checked with `inspect_source` first).
        source_id: The name of the source's position history: required for a
            stream (the same in every run of the query). A batch read ignores it,
            and ``state_store`` and the limits, with a WARNING on the
            ``sinkv2.spark`` logger (``streaming=True`` streams a bounded source).
        streaming: ``None`` (default): a batch DataFrame for a BOUNDED source, a
            streaming one for an unbounded source; ``True``: a stream either way;
            ``False``: a batch read (BOUNDED sources only).
        parallelism: Reader subtasks to plan for (default: Spark's default
            parallelism); each subtask with splits is one Spark task.
        batch_rows: Rows per Arrow batch when the reader emits rows.
        state_store: A stream's store of epoch records: a `SourceStateStore`, a
            SQLite path (a str or a ``pathlib.Path``) or ``postgresql://`` URL;
            default: ``apply()``'s store.
        max_records_per_trigger: A stream's admission limit: at most this many
            records per micro-batch, cut from splits with end positions
            (`sinkv2.source.SupportsEndPositions`). A source whose splits are read
            whole and not counted (`sinkv2.source.SupportsUncountedSplits`: JSON
            lines or CSV files, a filtered Iceberg scan) gets a WARNING on the
            ``sinkv2.spark`` logger, here: the limit will not bound its micro-batches.
        max_splits_per_trigger: A stream's admission limit: at most this many
            split reads per micro-batch. Set one of the two limits at most.
        native_read: A batch read of a source with
            `sinkv2.source.SupportsNativeRead`: ``None`` (default) lets Spark's own
            reader read the planned files when the source says it gives the same
            rows, and logs why not otherwise; ``True`` requires it (refused with the
            reason otherwise); ``False`` always runs the source's readers. Streams
            always run the source's readers.

    Raises:
        SourceDefinitionError: ``source`` lacks a FLIP-27 method, or cannot be
            pickled (Spark ships it to its planner and tasks).
        SourceContractError: A stream of an unbounded source that does not
            implement `SupportsEndPositions`.
        SinkConfigurationError: A stream without a ``source_id``, or both limits, or
            ``native_read=True`` where the native path is not available, or Spark's
            Python workers cannot import the source's module.
        ValueError: A batch read of an unbounded source, a bad number, or a
            ``streaming`` that is not None, True or False.
    """
    _check_arguments(
        source_id,
        streaming,
        native_read,
        parallelism=parallelism,
        batch_rows=batch_rows,
        max_records_per_trigger=max_records_per_trigger,
        max_splits_per_trigger=max_splits_per_trigger,
    )
    inspect_source(source)
    boundedness = source.get_boundedness()
    stream = streaming if streaming is not None else boundedness is not Boundedness.BOUNDED
    if not stream and boundedness is not Boundedness.BOUNDED:
        raise ValueError(
            f"from_source(): {describe(source)} is {boundedness.name}, and streaming=False asks "
            "for a batch read, which needs a BOUNDED source; read it as a stream "
            "(streaming=True, with a source_id)"
        )
    spark_schema, arrow_schema = _spark_schema(source)
    if not stream:
        # A batch read: the stream-only arguments are ignored (said once), and Spark's
        # own reader reads the files when the source allows it.
        _warn_stream_only(
            source, source_id, state_store, max_records_per_trigger, max_splits_per_trigger
        )
        native = (
            None
            if native_read is False
            else native_frame(
                spark,
                source,
                spark_schema,
                parallelism=parallelism or _default_parallelism(spark),
                require=native_read is True,
            )
        )
        if native is not None:
            return native
    elif native_read is True:
        raise SinkConfigurationError(
            "from_source(native_read=True): a stream always reads through the source's readers "
            "(its positions are recorded per micro-batch); leave native_read out"
        )
    reader: BoundedSourceReader | SourceStreamReader
    if stream:
        if source_id is None:
            raise SinkConfigurationError(
                "from_source(): a streaming read needs source_id=...: the name under which "
                "its split positions are recorded, the same in every run of the query"
            )
        check_streamable(source)
        reader = SourceStreamReader(
            source,
            arrow_schema,
            source_id=source_id,
            store=source_store(state_store),
            parallelism=parallelism or _default_parallelism(spark),
            batch_rows=batch_rows,
            max_records=max_records_per_trigger,
            max_splits=max_splits_per_trigger,
        )
        reader.warn_record_limit()  # here, in the caller's process, not in Spark's planner
    else:
        reader = BoundedSourceReader(
            source, arrow_schema, parallelism or _default_parallelism(spark), batch_rows
        )
    check_source_shippable(source, "from_source()")
    name = f"sinkv2_source_{os.getpid()}_{next(_NAMES)}"

    class _OneSource(DataSource):
        """This one source, registered under a name of its own (pickled by value)."""

        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> StructType:
            return spark_schema

        def reader(self, schema: StructType) -> BoundedSourceReader:
            assert isinstance(reader, BoundedSourceReader)
            return reader

        def streamReader(self, schema: StructType) -> SourceStreamReader:  # Spark's name
            assert isinstance(reader, SourceStreamReader)
            return reader

    spark.dataSource.register(_OneSource)
    with workers_must_import(source, "from_source()"):  # Spark loads the source in a worker
        return (spark.readStream if stream else spark.read).format(name).load()


def _check_arguments(
    source_id: object, streaming: object, native_read: object, **numbers: object
) -> None:
    """`from_source`'s arguments of the wrong type or range, named before anything runs.

    The ``numbers`` may be ``None`` (not given), except ``batch_rows``.
    """
    if source_id is not None and (not isinstance(source_id, str) or not source_id.strip()):
        raise ValueError(
            f"from_source(): source_id must be a non-empty str or None (got {source_id!r})"
        )
    for flag, given in (("streaming", streaming), ("native_read", native_read)):
        if given is not None and not isinstance(given, bool):
            raise ValueError(f"from_source(): {flag} must be None, True or False (got {given!r})")
    for name, value in numbers.items():
        bad = isinstance(value, bool) or not isinstance(value, int) or value < 1
        if (value is not None or name == "batch_rows") and bad:
            raise ValueError(f"from_source(): {name} must be a positive int (got {value!r})")


def _warn_stream_only(source: Any, *values: object) -> None:
    """A batch read given a stream's arguments says once that it ignores them."""
    names = ("source_id", "state_store", "max_records_per_trigger", "max_splits_per_trigger")
    given = [name for name, value in zip(names, values, strict=True) if value is not None]
    if given:
        logger.warning(
            "from_source(%s): %s %s for streams; the source is BOUNDED, so this is a batch "
            "read and ignores them. Pass streaming=True to read it as a stream, one recorded "
            "epoch per micro-batch, or leave them out",
            describe(source),
            ", ".join(given),
            "is" if len(given) == 1 else "are",
        )


def source_store(
    location: SourceStateStore | str | os.PathLike[str] | None,
) -> SourceStateStore:
    """The store of a stream's epoch records: given, or named like the sinks' ``state_store``.

    A path may be a str or an ``os.PathLike`` (a ``pathlib.Path``).

    Raises:
        SinkConfigurationError: The location is empty, or keeps no source epochs.
    """
    if isinstance(location, os.PathLike):  # a SQLite path as a pathlib.Path
        location = os.fspath(location)
    store: object = (
        open_store(location) if location is None or isinstance(location, str) else location
    )
    if not callable(getattr(store, "acquire_source", None)):
        raise SinkConfigurationError(
            f"state_store {describe(store)} keeps no source epochs (it has no acquire_source); "
            "pass a SQLite path, a postgresql:// URL, or a SqliteCommitStateStore / "
            "PostgresCommitStateStore"
        )
    return cast("SourceStateStore", store)


def source_schema(source: Any) -> StructType:
    """The Spark schema of ``source``'s produced type."""
    return _spark_schema(source)[0]


def door_reader(
    options: Mapping[str, str], schema: StructType, source: Any | None = None
) -> BoundedSourceReader:
    """Spark's batch reader for ``spark.read.format("sinkv2").option("source", ...)``.

    ``source`` is the one `door_source` already made for the same options (when
    Spark asked for the schema first), so the factory runs once per read.

    Raises:
        SinkConfigurationError: A bad option, or a ``.schema(...)`` the user gave
            that is not the source's.
        SourceDefinitionError: The source does not pickle (`check_source_shippable`).
    """
    if source is None:
        source = door_source(options)
    if source.get_boundedness() is not Boundedness.BOUNDED:
        raise SinkConfigurationError(
            f"spark.read.format('sinkv2') reads BOUNDED sources; {options.get('source')!r} "
            f"made {describe(source)}, which is {source.get_boundedness().name}. Read it as a "
            "stream: spark.readStream.format('sinkv2') with .option('source_id', ...)"
        )
    door_native_option(options, "read")
    arrow_schema = _checked_schema(source, schema, "read")
    check_source_shippable(source, "spark.read.format('sinkv2')")
    return BoundedSourceReader(source, arrow_schema, *task_options(options))


def _checked_schema(source: Any, schema: StructType, door: str) -> pyarrow.Schema:
    spark_schema, arrow_schema = _spark_schema(source)
    if schema != spark_schema:
        raise SinkConfigurationError(
            f"the schema given to spark.{door}.format('sinkv2').schema(...) is "
            f"{_columns(schema)}; the source produces {_columns(spark_schema)}. "
            "Leave .schema(...) out: the source's get_produced_type() is the schema"
        )
    return arrow_schema


def _columns(schema: StructType) -> str:
    """``schema``'s columns with their types and nullability (which ``simpleString`` leaves out)."""
    fields = (
        f"{field.name} {field.dataType.simpleString()}{'' if field.nullable else ' NOT NULL'}"
        for field in schema.fields
    )
    return f"<{', '.join(fields)}>"


def door_stream_reader(
    options: Mapping[str, str], schema: StructType, source: Any | None = None
) -> SourceStreamReader:
    """Spark's stream reader for ``spark.readStream.format("sinkv2").option("source", ...)``.

    Raises:
        SinkConfigurationError: No ``source_id``, a bad option, both limits, or a
            ``.schema(...)`` that is not the source's.
        SourceContractError: An unbounded source without `SupportsEndPositions`.
        SourceDefinitionError: The source does not pickle (`check_source_shippable`).
    """
    if source is None:
        source = door_source(options)
    source_id = (options.get("source_id") or "").strip()
    if not source_id:
        raise SinkConfigurationError(
            "spark.readStream.format('sinkv2') needs .option('source_id', ...): the name under "
            "which the source's split positions are recorded, the same in every run of the "
            "query (as a checkpoint location is)"
        )
    check_streamable(source)
    door_native_option(options, "readStream")
    arrow_schema = _checked_schema(source, schema, "readStream")
    check_source_shippable(source, "spark.readStream.format('sinkv2')")
    parallelism, batch_rows = task_options(options)
    return SourceStreamReader(
        source,
        arrow_schema,
        source_id=source_id,
        store=source_store(options.get("state_store")),
        parallelism=parallelism,
        batch_rows=batch_rows,
        max_records=positive_option(options, "maxRecordsPerTrigger"),
        max_splits=positive_option(options, "maxSplitsPerTrigger"),
    )
