"""JSON lines of values at the edges of Spark's ranges, which Python's types cannot hold.

Dates and timestamps whose UTC instant lies outside years 1..9999 (valid Spark
values; Python's ``datetime`` stops at 9999) and variants holding decimals of more
digits than a double or Python's default decimal context keeps. Each is written by
FileSink through real Spark and read back with ``spark.read.schema(...).json``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_sinks.files import FileSink
from reference_sinks.files._json_lines import JsonLinesEncoder
from tests.reference_sinks.files.test_type_matrix import string_keys

_RUNS = itertools.count()
_MICROS = st.integers(-62135596800000000, 253402300799999999)  # years 1..9999


def lines(path: Path) -> list[str]:
    """Every line of the JSON lines files under ``path``."""
    return [
        line
        for file in sorted(path.rglob("*.jsonl"))
        for line in file.read_text(encoding="utf-8").splitlines()
    ]


@given(micros=_MICROS)
def test_integer_timestamps_are_spelled_as_python_spells_them(micros: int) -> None:
    """The text made from a batch's integers is ``isoformat``'s, where Python can make it."""
    stamp = pa.array([micros], pa.timestamp("us", tz="UTC"))
    days = pa.array([micros // 86_400_000_000], pa.date32())
    batch = pa.record_batch({"t": stamp, "n": stamp.cast(pa.timestamp("us")), "d": days})
    encoder = JsonLinesEncoder(batch.schema)
    usual = encoder.encode(batch)
    encoder._converters = encoder._raw_converters
    encoder._cast = encoder._raw_schema
    assert encoder.encode(batch) == usual


def test_years_past_9999_without_spark() -> None:
    """A batch with a year Python cannot hold is written whole, other rows as usual."""
    kind = pa.timestamp("us", tz="America/New_York")
    stamps = pa.array([253402318799999999, 0, None], kind)
    days = pa.array([2932897, -719529, 0], pa.date32())
    batch = pa.record_batch(
        {
            "t": stamps,
            "d": days,
            "a": pa.array([[253402318799999999, None], [], None], pa.list_(kind)),
            "m": pa.array([[(-719529, 1)], [], None], pa.map_(pa.date32(), pa.int32())),
        }
    )
    found = [json.loads(line) for line in JsonLinesEncoder(batch.schema).encode(batch).splitlines()]
    assert found == [
        {
            "t": "+10000-01-01T04:59:59.999999+00:00",
            "d": "+10000-01-01",
            "a": ["+10000-01-01T04:59:59.999999+00:00", None],
            "m": {"-0001-12-31": 1},
        },
        {"t": "1970-01-01T00:00:00+00:00", "d": "-0001-12-31", "a": [], "m": {}},
        {"t": None, "d": "1970-01-01", "a": None, "m": None},
    ]


EXTREMES = [
    ("America/New_York", "TIMESTAMP'9999-12-31 23:59:59.999999'"),
    ("Asia/Kolkata", "TIMESTAMP'0001-01-01 00:00:00'"),
    ("UTC", "date_add(DATE'9999-12-31', 1)"),
    ("UTC", "date_add(DATE'0001-01-01', -1)"),
    ("UTC", "timestamp_micros(253402300800000000)"),
    ("UTC", "timestamp_micros(9223372036854775807)"),
    ("UTC", "timestamp_micros(-9223372036854775808)"),
    ("UTC", "date_add(DATE'1970-01-01', 2147483647)"),
    ("UTC", "CAST(timestamp_micros(253402300800000001) AS TIMESTAMP_NTZ)"),
]


@pytest.mark.spark
@pytest.mark.parametrize(("zone", "value"), EXTREMES)
def test_years_python_cannot_hold_read_back_in_spark(spark, translator, tmp_path, zone, value):  # type: ignore[no-untyped-def]
    """Top level, in arrays, structs and map keys, beside a usual row in the same batch."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        df = spark.sql(
            f"""
            SELECT id, t, array(t, NULL) AS a, named_struct('x', t) AS s, map(t, id) AS m
            FROM (SELECT 0L AS id, {value} AS t
                  UNION ALL SELECT 1L, CAST(DATE'2024-03-30' AS {_type_of(spark, value)}))
            """
        ).coalesce(1)
        kind = df.schema["t"].dataType.simpleString()
        out = tmp_path / f"out-{next(_RUNS)}"
        translator.apply(df, FileSink(str(out), "jsonl", native_write=False), sink_id="extremes")
        back = spark.read.schema(string_keys(df.schema)).json(str(out))
        as_text = [
            "id",
            "CAST(t AS STRING)",
            "CAST(a AS STRING)",
            "CAST(s AS STRING)",
            f"CAST(CAST(map_keys(m)[0] AS {kind}) AS STRING)",
        ]
        expected = df.selectExpr(*as_text[:-1], "CAST(map_keys(m)[0] AS STRING)")
        assert sorted(back.selectExpr(*as_text).collect()) == sorted(expected.collect())
        assert len(lines(out)) == 2
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def _type_of(spark: Any, value: str) -> str:
    """The Spark SQL type of the expression ``value``."""
    return str(spark.sql(f"SELECT {value} AS t").schema["t"].dataType.simpleString())


def test_a_date_spells_its_year_as_spark() -> None:
    """Four digits up to 9999, then a plus sign; negative years (1 BC is 0) with four digits."""
    batch = pa.record_batch(
        {"d": pa.array([-719163 - 366, -719162, 2932896, 2932897], pa.date32())}
    )
    found = [
        json.loads(line)["d"] for line in JsonLinesEncoder(batch.schema).encode(batch).splitlines()
    ]
    assert found == ["-0001-12-31", "0001-01-01", "9999-12-31", "+10000-01-01"]
    assert dt.date(1, 1, 1).toordinal() - dt.date(1970, 1, 1).toordinal() == -719162


@pytest.mark.spark
def test_variant_decimals_keep_every_digit(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    """More digits than a double (17) or Python's default decimal context (28) keeps."""
    docs = [
        "12345678901234567890.123456789",
        '{"a": [0.00000000012345678901234567890123456789, 1e-10, "E"]}',
        "-99999999999999999999999999999999999999",
        "0.0000000001",
        "1.5e300",
    ]
    df = spark.createDataFrame(list(enumerate(docs)), "id long, doc string").selectExpr(
        "id", "parse_json(doc) AS v", "array(parse_json(doc)) AS vs"
    )
    out = tmp_path / "out"
    translator.apply(
        df, FileSink(str(out), "jsonl", native_write=False), sink_id="variant-decimals"
    )
    written = sorted(lines(out), key=lambda line: json.loads(line)["id"])
    assert written[0] == (
        '{"id": 0, "v": 12345678901234567890.123456789, "vs": [12345678901234567890.123456789]}'
    )
    assert '"v": {"a":[0.00000000012345678901234567890123456789,1e-10,"E"]}' in written[1]
    assert '"v": -99999999999999999999999999999999999999,' in written[2]
    assert '"v": 0.0000000001,' in written[3]
    as_text = ["id", "to_json(v)", "schema_of_variant(v)", "to_json(vs)"]
    back = spark.read.schema(df.schema).json(str(out)).selectExpr(*as_text)
    assert sorted(back.collect()) == sorted(df.selectExpr(*as_text).collect())


@pytest.mark.spark
def test_variant_non_finite_doubles_are_spelled_as_spark_writes_them(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    """PySpark's JSON text has bare nan/inf; Spark's writer writes the strings "NaN"..."""
    df = spark.sql(
        """SELECT 0L AS id, CAST(CAST('NaN' AS DOUBLE) AS VARIANT) AS v,
                  CAST(array(CAST('-Infinity' AS DOUBLE), 1.5D, CAST('Infinity' AS DOUBLE))
                       AS VARIANT) AS w,
                  parse_json('{"nan": "inf", "x": "-inf\\\\"nan"}') AS s"""
    )
    out = tmp_path / "out"
    translator.apply(
        df, FileSink(str(out), "jsonl", native_write=False), sink_id="variant-non-finite"
    )
    [line] = lines(out)
    expected = df.selectExpr("to_json(named_struct('id', id, 'v', v, 'w', w, 's', s))").first()[0]
    assert json.loads(line) == json.loads(expected)
