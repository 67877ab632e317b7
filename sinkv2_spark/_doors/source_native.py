"""The native read path: a bounded plan's files read by Spark's own reader (`SupportsNativeRead`).

`from_source` asks a BOUNDED source with `sinkv2.source.SupportsNativeRead` before
it builds the Python data source: the enumerator plans on the driver, as the
Python path's planner does, and the source says what its splits are - files in a
format Spark reads - or why not. A `NativeRead` becomes ``spark.read.format(...)
.schema(<the produced type>).load(paths)``, kept only if the result's schema is
exactly the produced type (Spark's file readers make every column nullable, so a
produced type with a non-nullable column or element stays on the Python path,
which checks nulls); a reason not to is logged on ``sinkv2.spark`` (INFO) and the
Python path reads, or, with ``native_read=True``, the read is refused.

A `NativeRead` with ``field_ids`` is read by Parquet field id: the schema Spark is
given carries each field's ``parquet.field.id`` (nested fields included; Spark 4
matches them at every level), and ``spark.sql.parquet.fieldId.read.enabled`` is
set in the session - Spark reads it when the query runs, so it stays set; a schema
without field ids is read by name as before, so other reads are not changed.

The file index Spark builds in ``load`` is listed on the driver, never by a Spark job,
when every path is a local file (the native path's case: `IcebergSource` plans only
local ``file:`` paths): above ``spark.sql.sources.parallelPartitionDiscovery.threshold``
(32) root paths Spark would list them with a job of one task per path - 0.3-0.7 s per
read on two cores for a table of 33-64 data files, against 20-50 ms for the stat
calls on the driver. The threshold is raised for the ``load`` call only and put back
as it was (a query another thread starts on the same session in those milliseconds
lists its own files on the driver too; no result changes).

Spark's own options that would skip data silently (``ignoreCorruptFiles``,
``ignoreMissingFiles``) are turned off for the read, whatever the session says:
a file that does not parse fails the query, naming the file, as on the Python path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from sinkv2 import SimpleVersionedSerialization
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import plan_bounded_read
from sinkv2.source import NativeRead, NativeReadUnavailable, SupportsNativeRead
from sinkv2.text import describe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "FIELD_ID_CONF",
    "LISTING_THRESHOLD_CONF",
    "NATIVE_READ_OPTIONS",
    "door_native_option",
    "native_frame",
    "non_nullable_parts",
    "with_field_ids",
]

logger = logging.getLogger("sinkv2.spark")

FIELD_ID_CONF: Final = "spark.sql.parquet.fieldId.read.enabled"
"""Spark reads Parquet columns by field id for a schema that carries them (a session conf)."""

LISTING_THRESHOLD_CONF: Final = "spark.sql.sources.parallelPartitionDiscovery.threshold"
"""Above this many paths Spark lists files with a Spark job instead of on the driver."""

_LISTING_LOCK: Final = threading.Lock()

NATIVE_READ_OPTIONS: Final = {"ignoreCorruptFiles": "false", "ignoreMissingFiles": "false"}
"""Set on every native read: a corrupt or vanished file fails the read, never skipped."""


def non_nullable_parts(schema: StructType) -> list[str]:
    """The columns, fields, array elements and map values of ``schema`` declared non-null."""
    from pyspark.sql.types import ArrayType, MapType, StructType  # noqa: PLC0415  # lazy

    found: list[str] = []

    def walk(kind: DataType, where: str) -> None:
        if isinstance(kind, StructType):
            for field in kind.fields:
                name = f"{where}.{field.name}" if where else field.name
                if not field.nullable:
                    found.append(name)
                walk(field.dataType, name)
        elif isinstance(kind, ArrayType):
            if not kind.containsNull:
                found.append(f"{where}[]")
            walk(kind.elementType, f"{where}[]")
        elif isinstance(kind, MapType):
            if not kind.valueContainsNull:
                found.append(f"{where}{{}}")
            walk(kind.valueType, f"{where}{{}}")

    walk(schema, "")
    return found


def native_frame(
    spark: SparkSession,
    source: Any,
    spark_schema: StructType,
    *,
    parallelism: int,
    require: bool,
) -> DataFrame | None:
    """``source``'s bounded read by Spark's own reader, or ``None`` for the Python path.

    Args:
        spark: The session.
        source: A BOUNDED source; without `SupportsNativeRead` the answer is ``None``
            (or, with ``require``, an error).
        spark_schema: The produced type as Spark's schema.
        parallelism: The reader subtasks to plan for, as the Python path would.
        require: Refuse the read rather than fall back (``native_read=True``).

    Raises:
        SinkConfigurationError: ``require`` and the native path is not available
            (the reason says why).
        SourceContractError: The enumerator broke a rule while planning.
    """
    reason = _unavailable_before_planning(source, spark_schema)
    frame = None
    if reason is None:
        answer = _ask(source, parallelism)
        if isinstance(answer, NativeReadUnavailable):
            reason = answer.reason
        else:
            frame, reason = _load(spark, answer, spark_schema)
            if frame is not None:
                logger.info(
                    "from_source(%s): read by Spark's %s reader (%d file(s)); "
                    "native_read=False reads through the source's readers",
                    source,
                    answer.format,
                    len(answer.paths),
                )
                return frame
    if require:
        raise SinkConfigurationError(
            f"from_source(native_read=True): {describe(source)} cannot be read by Spark's own "
            f"reader: {reason}. Leave native_read at None to read through the source's readers"
        )
    logger.info(
        "from_source(%s): read through the source's readers (the Python path), not Spark's "
        "own reader: %s",
        source,
        reason,
    )
    return None


def _unavailable_before_planning(source: Any, spark_schema: StructType) -> str | None:
    if not isinstance(source, SupportsNativeRead):
        return (
            f"{type(source).__name__} does not implement sinkv2.source.SupportsNativeRead "
            "(its splits are not files Spark could read)"
        )
    required = non_nullable_parts(spark_schema)
    if required:
        return (
            f"the produced type declares {required} not nullable, and Spark's file readers "
            "read every column as nullable; the source's readers check those nulls"
        )
    return None


def _ask(source: Any, parallelism: int) -> NativeRead | NativeReadUnavailable:
    plan = plan_bounded_read(source, parallelism)
    if any(plan.events):
        return NativeReadUnavailable(
            "the enumerator sent events to the readers while planning, and only the source's "
            "readers can handle them"
        )
    serializer = source.get_split_serializer()
    splits = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
        for part in plan.splits
        for framed in part
    ]
    answer = source.native_read(splits)
    if not isinstance(answer, NativeRead | NativeReadUnavailable):
        raise TypeError(
            f"{describe(source)}.native_read() returned {describe(answer)}; return a "
            "sinkv2.source.NativeRead or NativeReadUnavailable"
        )
    return answer


def _load(
    spark: SparkSession, answer: NativeRead, spark_schema: StructType
) -> tuple[DataFrame | None, str | None]:
    names = spark_schema.fieldNames()
    partitions = list(answer.partition_columns)
    if partitions and names[len(names) - len(partitions) :] != partitions:
        return None, (
            f"the partition columns {partitions} do not end the produced type {names}, and "
            "Spark appends partition columns after the data columns"
        )
    if not answer.paths:
        return spark.createDataFrame([], spark_schema), None
    wanted = spark_schema
    if answer.field_ids is not None:
        try:
            wanted = with_field_ids(spark_schema, answer.field_ids)
        except ValueError as error:
            return None, f"the field ids given do not fit the produced type: {error}"
        spark.conf.set(FIELD_ID_CONF, "true")  # read when the query runs, so it stays set
    reader = spark.read.format(answer.format).schema(wanted).options(**answer.options)
    if answer.base_path is not None:
        reader = reader.option("basePath", answer.base_path)
    reader = reader.options(**NATIVE_READ_OPTIONS)
    with _listed_on_driver(spark, answer.paths):
        frame = reader.load(list(answer.paths))
    if frame.schema != wanted:
        return None, (
            f"Spark's {answer.format} reader gives {frame.schema.simpleString()}, not the "
            f"produced type {spark_schema.simpleString()}"
        )
    return frame, None


@contextmanager
def _listed_on_driver(spark: SparkSession, paths: Sequence[str]) -> Iterator[None]:
    """While it lasts, Spark lists ``paths`` on the driver if every one is a local file."""
    if not all(path.startswith(("file:/", "/")) for path in paths):
        yield
        return
    with _LISTING_LOCK:  # two reads in threads of this process must not restore each other's
        before = spark.conf.get(LISTING_THRESHOLD_CONF, None)  # None: not set in the session
        if int(spark.conf.get(LISTING_THRESHOLD_CONF) or 0) >= len(paths):
            yield
            return
        spark.conf.set(LISTING_THRESHOLD_CONF, str(len(paths)))
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(LISTING_THRESHOLD_CONF)
            else:
                spark.conf.set(LISTING_THRESHOLD_CONF, before)


def with_field_ids(schema: StructType, ids: pa.Schema) -> StructType:
    """``schema`` with each struct field's ``parquet.field.id`` from the same field of ``ids``.

    Raises:
        ValueError: ``ids`` has another shape, or a field without a ``PARQUET:field_id``.
    """
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType  # noqa: PLC0415

    def walk(kind: DataType, arrow: pa.DataType, where: str) -> DataType:
        if isinstance(kind, StructType):
            fields = list(arrow) if isinstance(arrow, pa.StructType) else None
            if fields is None or len(fields) != len(kind.fields):
                raise ValueError(f"{where or 'the schema'} is {arrow}, not a struct like {kind}")
            return StructType(
                [field(f, a, where) for f, a in zip(kind.fields, fields, strict=True)]
            )
        if isinstance(kind, ArrayType) and isinstance(arrow, pa.ListType):
            return ArrayType(
                walk(kind.elementType, arrow.value_type, f"{where}[]"), kind.containsNull
            )
        if isinstance(kind, MapType) and isinstance(arrow, pa.MapType):
            return MapType(
                walk(kind.keyType, arrow.key_type, f"{where}{{}}"),
                walk(kind.valueType, arrow.item_type, f"{where}{{}}"),
                kind.valueContainsNull,
            )
        return kind

    def field(spark_field: StructField, arrow: pa.Field, where: str) -> StructField:
        name = f"{where}.{spark_field.name}" if where else spark_field.name
        raw = (arrow.metadata or {}).get(b"PARQUET:field_id")
        if raw is None or arrow.name != spark_field.name:
            raise ValueError(f"{name} has no PARQUET:field_id (or another name: {arrow.name!r})")
        return StructField(
            spark_field.name,
            walk(spark_field.dataType, arrow.type, name),
            spark_field.nullable,
            {**spark_field.metadata, "parquet.field.id": int(raw)},
        )

    return StructType([field(f, a, "") for f, a in zip(schema.fields, ids, strict=True)])


def door_native_option(options: Mapping[str, str], door: str) -> None:
    """The ``nativeRead`` option of the data source doors: only ``"false"`` can be honoured.

    Spark runs a Python data source's reads in Python workers, with no way to hand
    the query Spark's own file reader instead: the native path is `from_source`'s.
    """
    raw = options.get("nativeRead")
    if raw is None or raw.strip().lower() == "false":
        return
    if raw.strip().lower() == "true":
        raise SinkConfigurationError(
            f"spark.{door}.format('sinkv2') cannot read natively (.option('nativeRead', "
            "'true')): Spark reads a Python data source in Python workers, and cannot swap in "
            "its own file reader. Use sinkv2_spark.from_source(spark, source) for a batch read "
            "that Spark's reader can read, or leave the option out"
        )
    raise SinkConfigurationError(f"the 'nativeRead' option must be 'true' or 'false' (got {raw!r})")
