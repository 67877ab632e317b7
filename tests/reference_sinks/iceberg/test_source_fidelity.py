"""Data fidelity: what IcebergSink wrote, read by IcebergSource as Spark's reader reads it.

Hypothesis chooses a schema (every Spark type IcebergSink accepts - see
`tests.reference_sinks.spark_values` - in arrays, maps and structs, nulls at every
level) and rows. Spark writes them into a new table through `IcebergSink` in two
appends, one by the sink's own writers (files with Parquet field ids) and one by
Spark's Parquet writer (``native_write=True``: files without field ids, read through
the table's name mapping), so every table has several data files of both kinds.
The `ALL_TYPES` matrix (every type with its edge values, a null ``array<struct>``,
the case of apache/iceberg-python#3833) is an explicit example.

Spark cannot read an Iceberg table here (no iceberg-spark-runtime jar), so Spark's
own reader of *the same files* is its Parquet reader: ``spark.read.parquet`` over
the data files of the table's current snapshot. Read back by ``from_source`` (the
source's readers, ``native_read=False``, and - when every column is nullable - Spark's
reader through `SupportsNativeRead`, ``native_read=True``), the rows must equal
Spark's Parquet read of those files value for value (NaN, -0.0, nulls inside nested
types), and the types too. The rows must also equal the input DataFrame's.

Where Iceberg's types differ from the input's, the source is compared with Spark's
Parquet read, not the input:

- ``byte`` and ``short`` read back as ``int``: Iceberg has no 8- or 16-bit integers,
  so both of IcebergSink's writers widen them (as Spark's Iceberg writer does); the
  values are unchanged.
- ``timestamp`` is stored as Iceberg ``timestamptz`` (UTC instants) and
  ``timestamp_ntz`` as ``timestamp``: each reads back as the Spark type it was.
- Nullability: Spark's Parquet reader makes every column nullable; the source keeps
  the table's ``required`` (the input's ``NOT NULL``, an array's ``containsNull``
  and a map's ``valueContainsNull``). The types are compared without nullability
  against the Parquet read and with it against the input.

Map entries are compared in the files' order between the source and Spark's read,
and as maps with the input (Spark's ``createDataFrame`` does not keep a dict's order).

The source reads each file in batches of a drawn size (one row, a few, all), so
nested values are rebuilt across batch boundaries too. One Spark session, few
examples, wide schemas: each example is a few Spark jobs (two appends, four reads).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from reference_sinks.iceberg import IcebergSink, IcebergSource
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStatus
from sinkv2_spark import from_source
from tests.reference_sinks.spark_values import ALL_TYPES, ALL_TYPES_ROWS, comparable, rows, schemas

pytestmark = pytest.mark.spark

_TABLES = itertools.count()


def widened(kind: T.DataType, *, relaxed: bool) -> T.DataType:
    """``kind`` as Iceberg gives it back: byte and short as int; all nullable if ``relaxed``."""
    if isinstance(kind, T.ByteType | T.ShortType):
        return T.IntegerType()
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(widened(kind.elementType, relaxed=relaxed), relaxed or kind.containsNull)
    if isinstance(kind, T.MapType):
        return T.MapType(
            widened(kind.keyType, relaxed=relaxed),
            widened(kind.valueType, relaxed=relaxed),
            relaxed or kind.valueContainsNull,
        )
    if isinstance(kind, T.StructType):
        return T.StructType(
            [
                T.StructField(f.name, widened(f.dataType, relaxed=relaxed), relaxed or f.nullable)
                for f in kind.fields
            ]
        )
    return kind


def nullable(kind: T.DataType) -> T.DataType:
    """``kind`` with every level nullable (a map's keys stay not null)."""
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(nullable(kind.elementType), True)
    if isinstance(kind, T.MapType):
        return T.MapType(kind.keyType, nullable(kind.valueType), True)
    if isinstance(kind, T.StructType):
        return T.StructType([T.StructField(f.name, nullable(f.dataType)) for f in kind.fields])
    return kind


@st.composite
def tables(draw: st.DrawFn) -> tuple[T.StructType, list[tuple[Any, ...]], int, bool, int]:
    """A schema, its rows, where the first append ends, whether the table is all nullable,
    and the rows the source reads from a file at a time (a file's rows in several batches)."""
    schema = draw(schemas(max_columns=10))
    found = draw(rows(schema, max_rows=8))
    cut = draw(st.integers(1, max(len(found) - 1, 1)))
    return schema, found, cut, draw(st.booleans()), draw(st.sampled_from([1, 2, 3, 65_536]))


def plain(value: Any, kind: T.DataType, *, arrow: bool) -> Any:
    """A value as a plain Python value: structs as dicts, maps as dicts (unordered).

    ``arrow``: ``value`` is from ``toArrow().to_pylist()`` (structs already dicts, maps
    lists of pairs in the data files' order); otherwise it is an input value (structs
    tuples, maps dicts, whose order Spark's ``createDataFrame`` does not keep).
    """
    if value is None:
        return None
    if isinstance(kind, T.StructType):
        items = (value[f.name] for f in kind.fields) if arrow else value
        return {
            f.name: plain(item, f.dataType, arrow=arrow)
            for f, item in zip(kind.fields, items, strict=True)
        }
    if isinstance(kind, T.ArrayType):
        return [plain(item, kind.elementType, arrow=arrow) for item in value]
    if isinstance(kind, T.MapType):
        pairs = value if arrow else value.items()
        return {key: plain(item, kind.valueType, arrow=arrow) for key, item in pairs}
    return value


def by_id(rows: list[dict[str, Any]]) -> list[Any]:
    """``rows`` sorted by id, comparable with ``==`` (NaN, -0.0)."""
    return comparable(sorted(rows, key=lambda row: row["id"]))  # type: ignore[no-any-return]


def collect(df: Any) -> list[dict[str, Any]]:
    return df.toArrow().to_pylist()  # type: ignore[no-any-return]


def types(df: Any) -> list[tuple[str, str]]:
    """Column names and types, without nullability (Spark's Parquet reader drops it)."""
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


@settings(
    max_examples=3,  # each costs two appends and four reads; wide schemas, not many examples
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=tables())
@example(
    table=(ALL_TYPES, ALL_TYPES_ROWS, 2, True, 2)
)  # every type, edge values, null list<struct>
def test_what_iceberg_sink_wrote_reads_back_as_spark_reads_its_files(
    spark: Any, translator: Any, tmp_path_factory: pytest.TempPathFactory, table: Any
) -> None:
    schema, data, cut, relaxed, batch_rows = table
    warehouse: Path = tmp_path_factory.mktemp("iceberg-fidelity")
    name = f"db.t{next(_TABLES)}"
    declared = (
        T.StructType([T.StructField(f.name, nullable(f.dataType)) for f in schema])
        if relaxed
        else schema
    )
    arrow = to_arrow_schema(declared, timezone="UTC", prefers_large_types=False)
    for checkpoint, (part, native_write) in enumerate(
        ((data[:cut], False), (data[cut:], True)), start=1
    ):
        if not part:
            continue
        sink = IcebergSink.local(warehouse, name, schema=arrow, native_write=native_write)
        result = translator.apply(
            spark.createDataFrame(part, schema),  # two partitions (local[2]): two files
            sink,
            sink_id=name,
            checkpoint_id=checkpoint,
        )
        assert result.status is CommitStatus.COMMITTED
        assert result.native_write is native_write

    data_files = [row["file_path"] for row in sink.load_table().inspect.files().to_pylist()]
    assert len(data_files) >= 2 if len(data) > 1 else len(data_files) == 1
    spark_read = spark.read.parquet(*data_files)
    expected = by_id(collect(spark_read))
    assert len(expected) == len(data)

    source = IcebergSource.local(warehouse, name, batch_rows=batch_rows)
    python = from_source(spark, source, parallelism=2, native_read=False)
    assert types(python) == types(spark_read)
    read = collect(python)
    assert by_id(read) == expected
    assert python.schema == widened(schema, relaxed=relaxed)  # the input's, widened
    # the input, maps compared as maps (Spark's createDataFrame does not keep their order)
    written = [plain(row, schema, arrow=False) for row in data]
    assert by_id([plain(row, schema, arrow=True) for row in read]) == comparable(written)

    if relaxed:
        native = from_source(spark, source, parallelism=2, native_read=True)
        assert native.inputFiles()  # Spark's Parquet reader, not the source's readers
        assert types(native) == types(spark_read)
        assert native.schema == python.schema
        assert by_id(collect(native)) == expected
    else:  # the input's NOT NULL parts are kept, so Spark's reader may not stand in
        with pytest.raises(SinkConfigurationError, match="not nullable"):
            from_source(spark, source, parallelism=2, native_read=True)
