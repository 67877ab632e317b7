"""Every Spark SQL type through IcebergSink reads back as Spark's own writer gives it.

Each DataFrame goes through `SinkTopologyTranslator.apply` into a fresh table created
from its schema, and through ``df.write.parquet`` / ``spark.read.parquet`` (Spark's own
writer: no Iceberg runtime for Spark is available here). The two read-backs must be
equal value for value, NaN, -0.0 and nulls inside nested types included:

- the sink's data files as they are at rest, read by Arrow's Parquet reader (what
  Spark, Trino and Flink read through the table's field ids);
- the table through pyiceberg's scan, which in pyiceberg 0.12 still turns a null
  ``array<struct>`` or ``map<_, struct>`` into an empty one *when reading*
  (apache/iceberg-python#3833); the files hold the null, see `pyiceberg_view`.

byte and short read back as int (Iceberg has no 8- or 16-bit integers); timestamps
as UTC instants (``timestamptz``), timestamp_ntz as ``timestamp``.

Each test runs on both of IcebergSink's paths: its own writers (``native_write=False``)
and Spark's Parquet writer writing the data files (``native_write=True``: files without
field ids, read through the table's name mapping).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from reference_sinks.iceberg import IcebergSink
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.spark_values import (
    ALL_TYPES,
    ALL_TYPES_ROWS,
    comparable,
    rows,
    schemas,
)

pytestmark = pytest.mark.spark

_TABLES = itertools.count()


def pyiceberg_view(value: Any, kind: T.DataType) -> Any:  # noqa: PLR0911 - one return per kind
    """``value`` as pyiceberg 0.12's scan shows it: null lists and maps of structs as empty."""
    if isinstance(kind, T.StructType):
        if value is None:
            return None
        return {f.name: pyiceberg_view(value[f.name], f.dataType) for f in kind.fields}
    if isinstance(kind, T.ArrayType):
        if value is None:
            return [] if isinstance(kind.elementType, T.StructType) else None
        return [pyiceberg_view(item, kind.elementType) for item in value]
    if isinstance(kind, T.MapType):
        if value is None:
            return [] if isinstance(kind.valueType, T.StructType) else None
        return [(key, pyiceberg_view(item, kind.valueType)) for key, item in value]
    return value


@pytest.fixture(params=[False, True], ids=["sink-writers", "native"])
def native(request):  # type: ignore[no-untyped-def]
    """IcebergSink's ``native_write``: its own writers, or Spark's Parquet writer."""
    return request.param


def through_sink(spark, translator, tmp_path: Path, df, *, native: bool = False):  # type: ignore[no-untyped-def]
    """Append ``df`` to a new table; its rows by id, from the data files and from pyiceberg."""
    name = f"ns.t{next(_TABLES)}"
    schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    sink = IcebergSink.local(tmp_path / "warehouse", name, schema=schema, native_write=native)
    result = translator.apply(df, sink, sink_id=name, checkpoint_id=1)
    assert result.native_write is native
    table = sink.load_table()
    paths = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    files = pa.concat_tables(
        [pq.read_table(path) for path in paths], promote_options="permissive"
    ).sort_by("id")
    scanned = table.scan().to_arrow().sort_by("id")
    return files.to_pylist(), scanned.to_pylist()


def through_spark(spark, tmp_path: Path, df) -> list[Any]:  # type: ignore[no-untyped-def]
    """``df`` written and read back by Spark's own Parquet writer and reader, by id."""
    path = str(tmp_path / f"spark-{next(_TABLES)}")
    df.write.parquet(path)
    return spark.read.parquet(path).orderBy("id").toArrow().to_pylist()  # type: ignore[no-any-return]


def check_same(spark, translator, tmp_path: Path, schema, data, *, native: bool = False) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(data, schema).repartition(2)
    expected = through_spark(spark, tmp_path, df)
    files, scanned = through_sink(spark, translator, tmp_path, df, native=native)
    assert len(expected) == len(data)
    assert comparable(files) == comparable(expected)
    seen_by_pyiceberg = [
        {f.name: pyiceberg_view(row[f.name], f.dataType) for f in schema.fields} for row in expected
    ]
    assert comparable(scanned) == comparable(seen_by_pyiceberg)


def test_every_type_with_its_edge_values(spark, translator, tmp_path, native):  # type: ignore[no-untyped-def]
    check_same(spark, translator, tmp_path, ALL_TYPES, ALL_TYPES_ROWS, native=native)


def test_a_null_array_of_structs_stays_null_in_the_data_files(spark, translator, tmp_path, native):  # type: ignore[no-untyped-def]
    """The defect of issue 14: pyiceberg's projection wrote a null array<struct> as []."""
    struct = T.StructType([T.StructField("x", T.IntegerType())])
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("a", T.ArrayType(struct)),
            T.StructField("m", T.MapType(T.StringType(), struct)),
            T.StructField("n", T.ArrayType(T.ArrayType(struct))),
        ]
    )
    data = [(0, None, None, [None, []]), (1, [None, (None,)], {"k": None}, None)]
    df = spark.createDataFrame(data, schema).coalesce(1)
    files, _ = through_sink(spark, translator, tmp_path, df, native=native)
    assert files == [
        {"id": 0, "a": None, "m": None, "n": [None, []]},
        {"id": 1, "a": [None, {"x": None}], "m": [("k", None)], "n": None},
    ]


def test_byte_and_short_columns_widen_to_int(spark, translator, tmp_path, native):  # type: ignore[no-untyped-def]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("b", T.ByteType()),
            T.StructField("s", T.ShortType()),
        ]
    )
    df = spark.createDataFrame([(0, -128, 32767), (1, None, None)], schema)
    files, scanned = through_sink(spark, translator, tmp_path, df, native=native)
    assert scanned == files == [{"id": 0, "b": -128, "s": 32767}, {"id": 1, "b": None, "s": None}]
    table = IcebergSink.local(tmp_path / "warehouse", "ns.t" + str(next(_TABLES) - 1)).load_table()
    assert [str(field.field_type) for field in table.schema().fields] == ["long", "int", "int"]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=schemas().flatmap(lambda schema: rows(schema).map(lambda found: (schema, found))))
def test_random_schemas_and_values(spark, translator, tmp_path_factory, native, data):  # type: ignore[no-untyped-def]
    schema, found = data
    check_same(spark, translator, tmp_path_factory.mktemp("matrix"), schema, found, native=native)


def test_schema_changes_between_runs(spark, translator, tmp_path, native):  # type: ignore[no-untyped-def]
    """An added optional column works after the table evolves; a narrower type is refused."""
    from pyiceberg.types import StringType

    first = spark.createDataFrame([(0, 1.5)], "id long, v double")
    sink = IcebergSink.local(
        tmp_path / "wh", "ns.evolving", schema=first.toArrow().schema, native_write=native
    )
    translator.apply(first, sink, sink_id="evolving", checkpoint_id=1)

    second = spark.createDataFrame([(1, 2.5, "new")], "id long, v double, tag string")
    with pytest.raises(SinkConfigurationError, match=r"unexpected \['tag'\]"):
        translator.apply(second, sink, sink_id="evolving", checkpoint_id=2)
    with sink.load_table().update_schema() as update:
        update.add_column("tag", StringType())
    translator.apply(second, sink, sink_id="evolving", checkpoint_id=2)
    widened = spark.createDataFrame([(2, 3.5, None)], "id int, v float, tag string")
    translator.apply(widened, sink, sink_id="evolving", checkpoint_id=3)
    assert sink.load_table().scan().to_arrow().sort_by("id").to_pylist() == [
        {"id": 0, "v": 1.5, "tag": None},
        {"id": 1, "v": 2.5, "tag": "new"},
        {"id": 2, "v": 3.5, "tag": None},
    ]

    incompatible = spark.createDataFrame([(3, "x", "y")], "id long, v string, tag string")
    with pytest.raises(SinkConfigurationError, match=r"expected columns \[id: long, v: double"):
        translator.apply(incompatible, sink, sink_id="evolving", checkpoint_id=4)
    assert len(sink.load_table().scan().to_arrow()) == 3
