"""Spark's ``variant`` columns, shredded or not, read by FileSource as Spark's reader reads them.

Spark 4 writes a variant column to Parquet shredded by default: per file, the shape
it infers from the values moves into a ``typed_value`` group, the rest stays in
``value``. Spark writes files of several shapes (objects, arrays, scalars, primitives of
every kind, a partially shredded object, an unshredded file; variants inside a struct,
an array and a map too) into one directory;
FileSource reads them on both paths (its readers, and Spark's reader given its
declared schema), and each variant must be Spark's own, byte for byte: the same
``value`` and ``metadata`` as ``spark.read.parquet`` gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_sinks.files import FileReadError, FileSource
from reference_sinks.files._source_listing import list_files, make_splits
from sinkv2.source import NativeReadUnavailable, SourceReaderError
from sinkv2_spark import from_source
from tests.reference_sinks.files.file_source_data import read_all

PRIMITIVES = (
    "to_variant_object(named_struct('i1', cast(id as tinyint), 'i2', cast(id * 300 as smallint), "
    "'i4', cast(id * 100000 as int), 'i8', id * 10000000000, 'd', cast(id as double) / 3, "
    "'f', cast(cast(id as float) / 3 as float), 'dec', cast(id as decimal(10, 2)) / 7, "
    "'dec38', cast(id as decimal(38, 5)) * 1000000000000000000000, "
    "'s', repeat('x', cast(id as int) * 10), 'b', cast(concat('b', id) as binary), "
    "'bo', id % 2 = 0, 'dt', date_add(date'2024-01-02', cast(id as int)), "
    "'ts', timestamp_micros(1700000000123456 + id), "
    "'ntz', cast(timestamp_micros(1700000000123456 - id) as timestamp_ntz), "
    "'nul', cast(null as string)))"
)
SHAPES = {  # one file each, in one directory: shapes Spark infers from 40 rows, and unshredded
    "objects": (  # a SQL null, a variant null, a partially shredded object (ab, b.cz left)
        "case when id = 0 then null when id = 1 then parse_json('null') "
        """when id = 7 then parse_json('{"a": 7, "ab": {"deep": [1, "x", null]}, """
        """"b": {"c": "t", "d": [], "cz": 1}}') """
        "else to_variant_object(named_struct('a', id, 'b', named_struct('c', cast(id as string), "
        "'d', array(id, id * 1.5)))) end"
    ),
    "primitives": PRIMITIVES,
    "arrays": (  # elements partially shredded (w), a field of two types (q: value only)
        """case when id = 3 then parse_json('[{"q": "x"}, null, {"r": "t", "w": 1}]') """
        """when id = 4 then null else parse_json(concat('[{"q": ', id, ', "r": "s"}, """
        """{"q": ', id, '}]')) end"""
    ),
    "scalars": (
        "case when id = 5 then parse_json('null') when id = 6 then null "
        "else cast(id * 1000 as variant) end"
    ),
    "wide": (  # over 255 fields (Spark shreds some), and an array of over 255 elements
        "parse_json(concat('{', concat_ws(',', transform(sequence(0, 299), "
        """i -> format_string('"k%03d": %d', i, id + i))), ', "arr": ', """
        "to_json(sequence(0, 299 + cast(id as int))), '}'))"
    ),
}
UNSHREDDED = SHAPES["objects"]
ROWS = 40


def splits_of(source: FileSource) -> list[Any]:
    fs, root = source.resolve()
    return [
        split
        for status in list_files(fs, root, source.extensions)
        for split in make_splits(fs, status, source.format, source.split_bytes)
    ]


def frame(spark: Any, variant: str) -> Any:
    """``ROWS`` rows in one partition (one file, whose shape Spark infers from them)."""
    return (
        spark.range(ROWS)
        .selectExpr(
            "id",
            f"{variant} as v",
            """named_struct('inner', parse_json(concat('{"n": ', id, '}'))) as s""",
            "array(parse_json(cast(id as string)), null) as arr",
            """map('m', parse_json(concat('[', id, ']')), 'n', null) as m""",
        )
        .coalesce(1)
    )


@pytest.fixture(scope="module")
def variants(spark: Any, tmp_path_factory: Any) -> Path:
    root = str(tmp_path_factory.mktemp("variants") / "data")
    for variant in SHAPES.values():  # one write each (a union in one write came out unshredded)
        frame(spark, variant).write.mode("append").parquet(root)
    key = "spark.sql.variant.writeShredding.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        frame(spark, UNSHREDDED).write.mode("append").parquet(root)
    finally:
        spark.conf.set(key, before)
    return Path(root)


def plain(value: Any) -> Any:
    """A collected value with each variant as its (value, metadata) bytes, maps as lists."""
    from pyspark.sql import Row
    from pyspark.sql.types import VariantVal

    if isinstance(value, VariantVal):
        return ("variant", bytes(value.value), bytes(value.metadata))
    if isinstance(value, Row):
        return tuple(plain(item) for item in value)
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return sorted(((key, plain(item)) for key, item in value.items()), key=lambda kv: kv[0])
    return value


def rows(df: Any) -> list[Any]:
    return sorted((plain(row) for row in df.collect()), key=lambda row: (row[0], repr(row)))


@pytest.mark.spark
def test_the_files_are_shredded_in_several_shapes_and_one_is_not(variants: Path):
    shapes = {str(pq.read_schema(path).field("v").type) for path in variants.glob("*.parquet")}
    assert len(shapes) == len(SHAPES) + 1
    assert sum("typed_value" not in shape for shape in shapes) == 1


@pytest.mark.spark
@pytest.mark.parametrize("native_read", [False, True])
def test_variants_read_as_spark_reads_them_byte_for_byte(
    spark: Any, variants: Path, native_read: bool
):
    expected = spark.read.parquet(str(variants))
    found = from_source(spark, FileSource(str(variants)), native_read=native_read)
    assert found.schema.simpleString() == expected.schema.simpleString()
    assert "v:variant" in found.schema.simpleString()
    read = rows(found)
    assert read == rows(expected)
    assert len(read) == ROWS * (len(SHAPES) + 1)


@pytest.mark.spark
def test_a_variant_declared_as_a_plain_struct_is_not_read_by_sparks_reader(
    spark: Any, variants: Path
):
    # Spark's reader fails on a variant group asked for as a struct; FileSource's reads it
    struct = pa.struct([("value", pa.binary()), ("metadata", pa.binary())])
    schema = pa.schema([("id", pa.int64()), ("v", struct)])
    source = FileSource(str(variants), schema=schema)
    answer = source.native_read(splits_of(source))
    assert isinstance(answer, NativeReadUnavailable)
    assert "column 'v'" in answer.reason
    found = from_source(spark, source)  # the Python path, as variants' bytes
    expected = spark.read.parquet(str(variants)).select("id", "v")
    assert rows(found) == [(id_, None if v is None else tuple(v[1:])) for id_, v in rows(expected)]


SPARK_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"


@pytest.mark.parametrize(
    ("typed", "row", "problem"),
    [
        (pa.int64(), {"value": None, "typed_value": None}, "missing"),
        (
            pa.struct([("a", pa.struct([("value", pa.binary()), ("typed_value", pa.int64())]))]),
            {"value": b"\x00", "typed_value": {"a": {"value": None, "typed_value": 1}}},
            "not an object",
        ),
    ],
)
def test_a_malformed_shredded_variant_fails_the_read_naming_file_and_column(
    tmp_path: Path, typed: pa.DataType, row: dict[str, Any], problem: str
):
    group = pa.struct([("metadata", pa.binary()), ("value", pa.binary()), ("typed_value", typed)])
    spark_schema = {"type": "struct", "fields": [{"name": "v", "type": "variant"}]}
    table = pa.table({"v": pa.array([{"metadata": b"\x01\x00\x00", **row}], group)})
    table = table.replace_schema_metadata({SPARK_SCHEMA: json.dumps(spark_schema)})
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(SourceReaderError) as raised:
        read_all(FileSource(str(tmp_path)), parallelism=1)
    error = raised.value.__cause__
    assert isinstance(error, FileReadError)
    assert problem in str(error)
    assert error.column == "v"
    assert error.path.endswith("bad.parquet")


KEYS = st.sampled_from(["a", "b", "c", "long key é"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=70)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
KINDS = (
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=70),
    st.lists(st.integers(-1000, 1000) | st.none(), max_size=4),
    st.dictionaries(KEYS, SCALARS, max_size=3),
)


@st.composite
def documents(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Objects whose keys hold mostly one kind of value each (so Spark shreds them)."""
    kinds = {key: draw(st.sampled_from(KINDS)) for key in ["a", "b", "c", "long key é"]}
    count = draw(st.integers(1, 12))
    return [
        {
            key: draw(kind if draw(st.integers(0, 5)) else JSON)
            for key, kind in kinds.items()
            if draw(st.booleans())
        }
        for _ in range(count)
    ]


@pytest.mark.spark
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=documents())
def test_random_json_shredded_by_spark_reads_back_as_spark_reads_it(
    spark: Any, tmp_path_factory: Any, documents: list[Any]
):
    path = tmp_path_factory.mktemp("json") / "data"
    texts = [(i, json.dumps(document)) for i, document in enumerate(documents)]
    frame = spark.createDataFrame(texts, "id long, text string")
    frame.selectExpr("id", "parse_json(text) as v").coalesce(1).write.parquet(str(path))
    expected = [(id_, v) for id_, v in rows(spark.read.parquet(str(path)))]
    found = [
        (record["id"], ("variant", record["v"]["value"], record["v"]["metadata"]))
        for record in read_all(FileSource(str(path)), parallelism=1)
    ]
    assert found == expected
