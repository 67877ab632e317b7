"""Data fidelity: what Spark's own writer wrote, read by FileSource as Spark's own reader reads it.

Hypothesis chooses a schema (every Spark type, arrays, maps and structs with nulls
inside) and rows; Spark writes them with ``df.write.parquet``, ``.json`` and ``.csv``
(each with the types it can write, and FileSource can read from it: JSON has no map
type in pyarrow, nested JSON dates, timestamps and binaries are read as pyarrow parses
them, CSV is flat and read as strings); FileSource reads the files through
``from_source``, Spark through ``spark.read``, and the rows (and Parquet's types) must
be equal. One Spark session, few examples (each about nine Spark jobs), wide schemas.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from reference_sinks.files import FileSource
from sinkv2_spark import from_source

pytestmark = pytest.mark.spark

TEXT = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters='"\\'), max_size=6
)  # Spark's CSV writer escapes quotes with a backslash, which FileSource's CSV does not read
PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "tinyint": st.integers(-(2**7), 2**7 - 1),
    "smallint": st.integers(-(2**15), 2**15 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False, allow_infinity=False),
    "double": st.floats(allow_nan=False, allow_infinity=False),
    "decimal(12,3)": st.decimals(
        min_value=-(10**8), max_value=10**8, places=3, allow_nan=False, allow_infinity=False
    ),
    "string": TEXT,
    "binary": st.binary(max_size=5),
    "date": st.dates(dt.date(1900, 1, 1), dt.date(2100, 12, 31)),
    "timestamp": st.datetimes(
        dt.datetime(1970, 1, 2), dt.datetime(2100, 1, 1), timezones=st.just(dt.UTC)
    ),
    "timestamp_ntz": st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2100, 1, 1)),
}
NOT_NESTED_IN_JSON = {"binary", "date", "timestamp", "timestamp_ntz"}


def nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


@st.composite
def column_type(draw: st.DrawFn, *, depth: int = 0) -> tuple[str, st.SearchStrategy[Any]]:
    """A Spark type (DDL) and a strategy of its values (nulls inside nested ones)."""
    kind = draw(st.sampled_from(["primitive"] * 3 + (["array", "map", "struct"] if depth else [])))
    if kind == "primitive" or depth > 1:
        name = draw(st.sampled_from(sorted(PRIMITIVES)))
        return name, PRIMITIVES[name]
    inner, values = draw(column_type(depth=depth + 1))
    if kind == "array":
        return f"array<{inner}>", st.lists(nullable(values), max_size=3)
    if kind == "map":
        return f"map<string,{inner}>", st.dictionaries(TEXT, nullable(values), max_size=2)
    other, more = draw(column_type(depth=depth + 1))
    return f"struct<a:{inner},b:{other}>", st.tuples(nullable(values), nullable(more))


@st.composite
def frames(draw: st.DrawFn) -> tuple[list[str], list[tuple[Any, ...]]]:
    columns = draw(
        st.lists(column_type(depth=draw(st.sampled_from([0, 1]))), min_size=4, max_size=12)
    )
    rows = draw(
        st.lists(st.tuples(*(nullable(values) for _, values in columns)), min_size=1, max_size=8)
    )
    return [kind for kind, _ in columns], rows


def canonical(value: Any) -> Any:
    """A value collected from Spark, comparable: rows as tuples, maps as sorted items."""
    if hasattr(value, "asDict"):
        return tuple(canonical(v) for v in value)
    if isinstance(value, dict):
        return sorted((repr(canonical(k)), canonical(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def rows_of(df: Any) -> list[str]:
    return sorted(repr(canonical(row)) for row in df.collect())


def types(df: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def nested(kind: str) -> bool:
    return "<" in kind


def json_can(kind: str) -> bool:
    return "map<" not in kind and not (
        nested(kind) and any(leaf in kind for leaf in NOT_NESTED_IN_JSON)
    )


def csv_can(kind: str) -> bool:
    return not nested(kind) and kind != "binary"


@settings(
    max_examples=4,  # each costs nine Spark jobs; wide schemas instead of many examples
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frame=frames())
def test_what_spark_wrote_reads_back_as_spark_reads_it(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, frame: Any
):
    kinds, rows = frame
    schema = ", ".join(f"c{i} {kind}" for i, kind in enumerate(kinds))
    df = spark.createDataFrame(rows, schema)
    base: Path = tmp_path_factory.mktemp("fidelity")

    df.write.parquet(str(base / "parquet"))
    native = spark.read.parquet(str(base / "parquet"))
    ours = from_source(spark, FileSource(base / "parquet"), parallelism=2)
    assert types(ours) == types(native)
    assert rows_of(ours) == rows_of(native)

    json_columns = [f"c{i}" for i, kind in enumerate(kinds) if json_can(kind)]
    if json_columns:
        data = df.select(*json_columns)
        data.write.json(str(base / "json"))
        native = spark.read.schema(data.schema).json(str(base / "json"))
        arrow = pa.schema(
            [f.with_nullable(True) for f in to_arrow_schema(data.schema, timezone="UTC")]
        )
        ours = from_source(spark, FileSource(base / "json", "jsonl", schema=arrow), parallelism=2)
        assert rows_of(ours.select(*native.columns)) == rows_of(native)

    csv_columns = [f"c{i}" for i, kind in enumerate(kinds) if csv_can(kind)]
    if csv_columns:
        df.select(*csv_columns).write.option("header", True).csv(str(base / "csv"))
        native = spark.read.option("header", True).option("multiLine", True).csv(str(base / "csv"))
        ours = from_source(spark, FileSource(base / "csv", "csv"), parallelism=2)
        assert types(ours) == types(native)
        assert rows_of(ours) == rows_of(native)
