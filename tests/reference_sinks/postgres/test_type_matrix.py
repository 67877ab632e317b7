"""Every Spark SQL type through PostgresSink reads back, with psycopg, as Spark's value.

Each DataFrame goes into a fresh table whose columns have the natural PostgreSQL
type of their Spark type (`pg_type`): long -> bigint, int -> integer, byte and short
-> smallint, float -> real, double -> double precision, decimal(p, s) ->
numeric(p, s), string -> text, boolean, binary -> bytea, date, timestamp ->
timestamptz, timestamp_ntz -> timestamp, an array of a leaf type -> that type's
array, and everything nested deeper (arrays of arrays or structs, maps, structs) ->
jsonb. Read back with a binary psycopg cursor (floats bit for bit), each value must
equal Spark's own (``toArrow().to_pylist()``): NaN, infinities and -0.0 in real and
double precision, the widest decimals, years 1 and 9999, nulls inside arrays. A
jsonb value must equal Spark's own JSON writer's (``df.write.json``) for the same
value, read the same way (`json_value`: numbers compared by their digits, so a
float written as its float32's long double digits would differ); PostgreSQL's
numeric, which jsonb numbers are, has no -0, so -0.0 inside jsonb reads back as 0.

Also PostgreSQL's own edges: text cannot hold NUL (a row with one fails naming row
and column, nothing written), numeric NaN and infinities, timestamps before 1970 and
after 2038 in a session time zone whose offsets have seconds (LMT); and the types
the sink refuses before any data moves, naming column and types.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import functools
import itertools
import json
import math
import re
import struct
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from psycopg import sql
from pyspark.sql import types as T

from reference_sinks.postgres import PostgresSink
from sinkv2.errors import FatalDestinationError, SinkConfigurationError
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext
from tests.reference_sinks.json_read import from_arrow
from tests.reference_sinks.postgres.helpers import prepared
from tests.reference_sinks.spark_values import (
    ALL_TYPES,
    ALL_TYPES_ROWS,
    comparable,
    rows,
    schemas,
)

pytestmark = pytest.mark.spark

_RUNS = itertools.count()

_LEAF_TYPES: dict[type[T.DataType], str] = {
    T.LongType: "bigint",
    T.IntegerType: "integer",
    T.ShortType: "smallint",
    T.ByteType: "smallint",
    T.FloatType: "real",
    T.DoubleType: "double precision",
    T.StringType: "text",
    T.BooleanType: "boolean",
    T.BinaryType: "bytea",
    T.DateType: "date",
    T.TimestampType: "timestamptz",
    T.TimestampNTZType: "timestamp",
}


def _leaf_type(kind: T.DataType) -> str | None:
    if isinstance(kind, T.DecimalType):
        return f"numeric({kind.precision}, {kind.scale})"
    return _LEAF_TYPES.get(type(kind))


def pg_type(kind: T.DataType) -> str:
    """The natural PostgreSQL column type of a Spark type."""
    leaf = _leaf_type(kind)
    if leaf is not None:
        return leaf
    if isinstance(kind, T.ArrayType):
        element = _leaf_type(kind.elementType)
        if element is not None:
            return f"{element}[]"
    return "jsonb"


def _is_json(kind: T.DataType) -> bool:
    return pg_type(kind) == "jsonb"


_F32 = struct.Struct("<f")


def _float32(value: float) -> float:
    return float(_F32.unpack(_F32.pack(value))[0])


def _key(text: str, kind: T.DataType, shortest: bool) -> Any:
    if isinstance(kind, T.StringType):
        return text
    return json_value(json.loads(text, parse_float=decimal.Decimal), kind, shortest=shortest)


def json_value(value: Any, kind: T.DataType, *, shortest: bool = False) -> Any:  # noqa: PLR0911 - one branch per type
    """A JSON value (parsed with ``parse_float=Decimal``) as a comparable value of ``kind``.

    With ``shortest``, a float must be written with its own digits (a float32 with at
    most 9 significant digits, not its double's 1.100000023841858); decimals must be
    JSON numbers, binary base64, dates and timestamps ISO 8601 (compared as values); a
    missing struct field is null (Spark's writer leaves null fields out).
    """
    if value is None:
        return None
    if isinstance(kind, T.StructType):
        assert isinstance(value, dict)
        assert set(value) <= set(kind.fieldNames())
        return {
            f.name: json_value(value.get(f.name), f.dataType, shortest=shortest)
            for f in kind.fields
        }
    if isinstance(kind, T.ArrayType):
        assert isinstance(value, list)
        return [json_value(item, kind.elementType, shortest=shortest) for item in value]
    if isinstance(kind, T.MapType):
        assert isinstance(value, dict)
        return {
            _key(key, kind.keyType, shortest): json_value(item, kind.valueType, shortest=shortest)
            for key, item in value.items()
        }
    if isinstance(kind, T.FloatType | T.DoubleType):
        if isinstance(value, str):
            assert value in ("NaN", "Infinity", "-Infinity")
            return value
        assert isinstance(value, int | decimal.Decimal)
        # The float's digits, not a longer number that rounds to it: at most 9
        # significant digits for a float32, 17 for a double.
        digits = decimal.Decimal(value).normalize().as_tuple().digits
        assert not shortest or len(digits) <= (9 if isinstance(kind, T.FloatType) else 17), value
        number = float(value) or 0.0  # jsonb's numeric has no -0
        return _float32(number) if isinstance(kind, T.FloatType) else number
    if isinstance(kind, T.DecimalType):
        assert isinstance(value, int | decimal.Decimal), f"decimal as {value!r}"
        return decimal.Decimal(value)
    if isinstance(kind, T.BinaryType):
        return base64.b64decode(value, validate=True)
    if isinstance(kind, T.DateType):
        return dt.date.fromisoformat(value)
    if isinstance(kind, T.TimestampType | T.TimestampNTZType):
        return comparable(dt.datetime.fromisoformat(value))
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        assert isinstance(value, int)
        assert not isinstance(value, bool)
    return value


def create_table(url: str, name: str, schema: T.StructType) -> None:
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(field.name), sql.SQL(pg_type(field.dataType)))
        for field in schema.fields
    )
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(name), columns))


def read_back(url: str, name: str, schema: T.StructType) -> list[dict[str, Any]]:
    """The table's rows by id; jsonb columns as their text, the rest binary (exact)."""
    columns = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(field.name))
        if _is_json(field.dataType)
        else sql.Identifier(field.name)
        for field in schema.fields
    )
    with (
        psycopg.connect(url, autocommit=True) as connection,
        connection.cursor(binary=True) as cursor,
    ):
        cursor.execute(
            sql.SQL("SELECT {} FROM {} ORDER BY 1").format(columns, sql.Identifier(name))
        )
        return [dict(zip(schema.fieldNames(), row, strict=True)) for row in cursor.fetchall()]


def through_sink(spark, translator, url: str, df) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """``df`` written by the sink into a new table of natural types; its rows by id."""
    name = f"t{next(_RUNS)}"
    create_table(url, name, df.schema)
    translator.apply(df, PostgresSink(url, name), sink_id=name, checkpoint_id=1)
    return read_back(url, name, df.schema)


_MICROSECONDS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


def spark_values(df) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """``df``'s rows by id as Spark gives them, each JSON column also as Spark's ``to_json``.

    ``to_json`` is Spark's JSON writer (``df.write.json``) for one value; with
    microsecond timestamps, as the sink writes them. One Spark job.
    """
    from pyspark.sql import functions as F

    json_columns = [
        F.to_json(F.col(field.name), _MICROSECONDS).alias(f"{field.name} as json")
        for field in df.schema.fields
        if _is_json(field.dataType)
    ]
    found = df.select(*(F.col(name) for name in df.columns), *json_columns).toArrow()
    return sorted(found.to_pylist(), key=lambda row: row["id"])


def check_same(spark, translator, url: str, schema: T.StructType, data) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(data, schema)
    stored = through_sink(spark, translator, url, df)
    expected = spark_values(df)
    assert len(stored) == len(expected) == len(data)
    native = [field for field in schema.fields if not _is_json(field.dataType)]
    assert [{f.name: row[f.name] for f in native} for row in comparable(stored)] == [
        {f.name: from_arrow(row[f.name], f.dataType) for f in native}
        for row in comparable(expected)
    ]
    for row, spark_row in zip(stored, expected, strict=True):
        for field in schema.fields:
            if not _is_json(field.dataType):
                continue
            text, spark_text = row[field.name], spark_row[f"{field.name} as json"]
            assert (text is None) == (spark_text is None), (row["id"], field.name, text)
            if text is not None:
                assert json_value(
                    json.loads(text, parse_float=decimal.Decimal), field.dataType, shortest=True
                ) == json_value(
                    json.loads(spark_text, parse_float=decimal.Decimal), field.dataType
                ), (row["id"], field.name, text, spark_text)


def _leaf_arrays() -> tuple[T.StructType, list[tuple[Any, ...]]]:
    """An array of every leaf type, with nulls, edge values and array-literal metacharacters."""
    kinds = [
        T.LongType(),
        T.IntegerType(),
        T.ShortType(),
        T.ByteType(),
        T.FloatType(),
        T.DoubleType(),
        T.DecimalType(38, 10),
        T.StringType(),
        T.BooleanType(),
        T.BinaryType(),
        T.DateType(),
        T.TimestampType(),
        T.TimestampNTZType(),
    ]
    schema = T.StructType(
        [T.StructField("id", T.LongType(), nullable=False)]
        + [T.StructField(f"a_{kind.simpleString()}", T.ArrayType(kind)) for kind in kinds]
    )
    nan, inf = float("nan"), float("inf")
    widest = decimal.Decimal("9" * 28 + "." + "9" * 10)
    t0 = dt.datetime(2024, 3, 30, 12, 34, 56, 123456, tzinfo=dt.UTC)
    data = [
        (0, *([None] * len(kinds))),
        (1, *([[]] * len(kinds))),
        (
            2,
            [-(2**63), None, 2**63 - 1],
            [-(2**31), None, 2**31 - 1],
            [-(2**15), None, 2**15 - 1],
            [-128, None, 127],
            [nan, inf, -inf, -0.0, None, 0.1, 3.4028234663852886e38, 1e-45],
            [nan, inf, -inf, -0.0, None, 0.1, 5e-324, 1.7976931348623157e308],
            [widest, widest.copy_negate(), None, decimal.Decimal("0E-10")],
            ["", None, "NULL", "null", '"', "\\", "{a,b}", " x ", "ünï\u2603", "a\nb", "x" * 1000],
            [True, None, False],
            [bytearray(), None, bytearray(b"\x00\xff\\\"{}"), bytearray(range(256))],
            [dt.date(1, 1, 1), None, dt.date(9999, 12, 31), dt.date(1969, 12, 31)],
            [t0, None, dt.datetime(1, 1, 1, tzinfo=dt.UTC), dt.datetime(9999, 1, 1, tzinfo=dt.UTC)],
            [dt.datetime(1, 1, 1), None, dt.datetime(9999, 12, 31, 23, 59, 59, 999999)],
        ),
        (3, *([[None]] * len(kinds))),
    ]  # fmt: skip
    return schema, data


def test_every_type_with_its_edge_values(spark, translator, postgres_url):  # type: ignore[no-untyped-def]
    check_same(spark, translator, postgres_url, ALL_TYPES, ALL_TYPES_ROWS)


def test_arrays_of_every_leaf_type(spark, translator, postgres_url):  # type: ignore[no-untyped-def]
    schema, data = _leaf_arrays()
    check_same(spark, translator, postgres_url, schema, data)


def without_nul(value: Any) -> Any:
    """``value`` with NUL taken out of every string, map keys too: PostgreSQL's text and
    jsonb cannot hold it, which `test_a_value_postgresql_cannot_hold_fails_naming_row_and_column`
    covers."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(without_nul(v) for v in value)
    return value


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=schemas().flatmap(
        lambda schema: rows(schema).map(lambda found: (schema, without_nul(found)))
    )
)
def test_random_schemas_and_values(spark, translator, postgres_url, data):  # type: ignore[no-untyped-def]
    schema, found = data
    check_same(spark, translator, postgres_url, schema, found)


@contextlib.contextmanager
def session_time_zone(spark, zone: str) -> Iterator[None]:  # type: ignore[no-untyped-def]
    key = "spark.sql.session.timeZone"
    before = spark.conf.get(key)
    spark.conf.set(key, zone)
    try:
        yield
    finally:
        spark.conf.set(key, before)


def test_years_1_and_9999_and_around_1970_and_2038(spark, translator, postgres_url):  # type: ignore[no-untyped-def]
    """Timestamps at the ends of Python's range and around 1970 and 2038, to the microsecond."""
    utc = dt.UTC
    at = [
        dt.datetime(1, 1, 1, tzinfo=utc),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
        dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=utc),
        dt.datetime(2038, 1, 19, 3, 14, 8, tzinfo=utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
    ]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("at", T.TimestampType()),
            T.StructField("local", T.TimestampNTZType()),
            T.StructField("day", T.DateType()),
            T.StructField("ats", T.ArrayType(T.TimestampType())),
            T.StructField("doc", T.StructType([T.StructField("at", T.TimestampType())])),
        ]
    )
    data = [
        (i, value, value.replace(tzinfo=None), value.date(), [value, None], (value,))
        for i, value in enumerate(at)
    ]
    check_same(spark, translator, postgres_url, schema, data)


def test_a_session_zone_whose_offsets_have_seconds(spark, translator, postgres_url):  # type: ignore[no-untyped-def]
    """Amsterdam was UTC+00:19:32 until 1937: each instant is kept to the second, in every shape.

    Spark's own JSON writer drops the offset's seconds (pattern ``XXX``), so the jsonb
    value is compared with Spark's value, not its JSON.
    """
    at = [
        dt.datetime(1850, 6, 1, 12, 0, 0, 1, tzinfo=dt.UTC),
        dt.datetime(1900, 1, 1, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(2038, 1, 19, 3, 14, 8, tzinfo=dt.UTC),
        dt.datetime(2100, 7, 1, tzinfo=dt.UTC),
    ]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("at", T.TimestampType()),
            T.StructField("ats", T.ArrayType(T.TimestampType())),
            T.StructField("doc", T.StructType([T.StructField("at", T.TimestampType())])),
        ]
    )
    with session_time_zone(spark, "Europe/Amsterdam"):
        df = spark.createDataFrame([(i, v, [v], (v,)) for i, v in enumerate(at)], schema)
        stored = through_sink(spark, translator, postgres_url, df)
    for row, value in zip(stored, at, strict=True):
        assert comparable(row["at"]) == value, row["id"]
        assert comparable(row["ats"]) == [value], row["id"]
        assert json_value(json.loads(row["doc"]), schema["doc"].dataType) == {"at": value}


@pytest.mark.parametrize(
    ("zone", "beyond"),
    [
        # Year 1 at midnight UTC is still year 0 in Los Angeles (LMT, -07:52:58).
        ("America/Los_Angeles", "0000-12-31T16:07:02-07:52:58"),
        # 9999-12-31 23:59:59.999999 UTC is already year 10000 in Tokyo.
        ("Asia/Tokyo", "10000-01-01T08:59:59.999999+09:00"),
    ],
)
def test_years_1_and_9999_in_a_session_zone_that_moves_them_off_the_calendar(  # type: ignore[no-untyped-def]
    spark, translator, postgres_url, zone, beyond
):
    """Valid Spark timestamps whose wall time in the session's zone Python cannot hold.

    In arrays (timestamptz[]) they are the same instants; in jsonb, where Spark
    writes the wall time in the session's zone, they are spelled with year 0 or
    10000, the rest as Spark's values are.
    """
    at = [
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(2024, 2, 29, 12, tzinfo=dt.UTC),
    ]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("at", T.TimestampType()),
            T.StructField("ats", T.ArrayType(T.TimestampType())),
            T.StructField("doc", T.StructType([T.StructField("at", T.TimestampType())])),
        ]
    )
    with session_time_zone(spark, zone):
        df = spark.createDataFrame([(i, v, [v, None], (v,)) for i, v in enumerate(at)], schema)
        stored = through_sink(spark, translator, postgres_url, df)
    for row, value in zip(stored, at, strict=True):
        assert comparable(row["at"]) == value, row["id"]
        assert comparable(row["ats"]) == [value, None], row["id"]
        text = json.loads(row["doc"])["at"]
        try:
            shown = value.astimezone(ZoneInfo(zone))
        except OverflowError:
            assert text == beyond, row["id"]
        else:  # the wall time in the session's zone, with its offset, as Spark writes it
            assert dt.datetime.fromisoformat(text) == shown, row["id"]
            assert dt.datetime.fromisoformat(text).utcoffset() == shown.utcoffset(), row["id"]
    assert sum(json.loads(row["doc"])["at"] == beyond for row in stored) == 1


@pytest.mark.parametrize(
    ("zone", "local", "instant", "shown"),
    [
        # Year 1 at midnight in Kolkata (LMT, +05:53:28) is year 0 in UTC.
        (
            "Asia/Kolkata",
            "0001-01-01 00:00:00",
            "0001-12-31 18:06:32+00 BC",
            "0001-01-01T00:00:00+05:53:28",
        ),
        # The last microsecond of 9999 in New York is year 10000 in UTC.
        (
            "America/New_York",
            "9999-12-31 23:59:59.999999",
            "10000-01-01 04:59:59.999999+00",
            "9999-12-31T23:59:59.999999-05:00",
        ),
    ],
)
def test_timestamps_whose_instant_is_off_the_calendar_in_utc(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - pytest parameters
    spark, translator, postgres_url, zone, local, instant, shown
):
    """Valid Spark timestamps whose UTC instant Python cannot hold, alone, in arrays, in jsonb.

    Stored as the same instants (read back as text in UTC); in jsonb, as Spark
    writes them, the wall time in the session's zone, as a value and as a map key.
    Also a date after 9999-12-31 (Spark's ``date_add`` makes one), alone and in an array.
    """
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE far (id bigint, at timestamptz, ats timestamptz[], doc jsonb, "
            "d date, ds date[])"
        )
    with session_time_zone(spark, zone):
        df = spark.sql(
            f"""SELECT 0L AS id, TIMESTAMP'{local}' AS at,
                       array(TIMESTAMP'{local}', NULL) AS ats,
                       named_struct('at', TIMESTAMP'{local}',
                                    'm', map(TIMESTAMP'{local}', 1)) AS doc,
                       date_add(DATE'9999-12-31', 1) AS d,
                       array(date_add(DATE'9999-12-31', 1)) AS ds"""
        )
        translator.apply(df, PostgresSink(postgres_url, "far"), sink_id="far", checkpoint_id=1)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET TimeZone = 'UTC'")
        found = connection.execute(
            "SELECT at::text, ats::text, doc::text, d::text, ds::text FROM far"
        ).fetchone()
    assert found is not None
    at, ats, doc, d, ds = found
    assert at == instant
    assert ats == f'{{"{instant}",NULL}}'
    assert json.loads(doc) == {"at": shown, "m": {shown: 1}}
    assert (d, ds) == ("10000-01-01", "{10000-01-01}")


def test_floats_into_numeric_keep_nan_and_infinities(spark, translator, postgres_url):  # type: ignore[no-untyped-def]
    """numeric holds NaN and +/-Infinity (PostgreSQL 14+), but not -0."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE n (id bigint, d numeric, f numeric, s numeric(10, 2))")
    df = spark.sql(
        """SELECT * FROM VALUES
             (0, CAST('NaN' AS DOUBLE), CAST('NaN' AS FLOAT), CAST('NaN' AS DOUBLE)),
             (1, CAST('Infinity' AS DOUBLE), CAST('-Infinity' AS FLOAT), 1.005D),
             (2, -0.0D, CAST(0.1 AS FLOAT), -0.0D),
             (3, 1e300D, CAST(3.4028235e38 AS FLOAT), 12345678.12D)
           AS t(id, d, f, s)"""
    ).coalesce(1)
    translator.apply(df, PostgresSink(postgres_url, "n"), sink_id="n", checkpoint_id=1)
    found = [
        {
            name: "NaN" if isinstance(value, decimal.Decimal) and value.is_nan() else value
            for name, value in row.items()
        }
        for row in read_back(postgres_url, "n", df.schema)
    ]
    number = decimal.Decimal
    assert found == [
        {"id": 0, "d": "NaN", "f": "NaN", "s": "NaN"},
        {"id": 1, "d": number("Infinity"), "f": number("-Infinity"), "s": number("1.01")},
        {"id": 2, "d": number(0), "f": number("0.1"), "s": number("0.00")},  # no -0
        {"id": 3, "d": number("1e300"), "f": number("3.4028235e38"), "s": number("12345678.12")},
    ]
    assert prepared(postgres_url) == []


def refused_by_a_writer(url: str, ddl: str, kind: pa.DataType, value: Any) -> str:
    """The error of a writer whose row 5 has ``value`` in column v.

    Two good rows go first, in a batch of their own; the second batch's row 3 of
    5 has ``value``, its other rows null. From a writer directly: each failing
    Spark job would run its task 4 times.
    """
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE bad (id bigint, ok text, v {ddl})")
    batch = pa.record_batch(
        {
            "id": pa.array(range(5), pa.int64()),
            "ok": pa.array(["fine"] * 5),
            "v": pa.array([None] * 3 + [value, None], kind),
        }
    )
    good = batch.filter(pa.array([True, True, False, False, False]))
    writer = PostgresSink(url, "bad").create_writer(
        BasicWriterInitContext(
            subtask_id=0,
            number_of_parallel_subtasks=1,
            attempt_number=0,
            job_id="job",
            input_schema=batch.schema,
        )
    )

    def write_and_flush() -> None:  # the writer finds it, or the server does at flush
        writer.write_arrow_batch(batch, BasicSinkWriterContext())
        writer.flush(True)

    try:
        writer.write_arrow_batch(good, BasicSinkWriterContext())
        with pytest.raises(FatalDestinationError) as caught:
            write_and_flush()
    finally:
        writer.close()
    with psycopg.connect(url, autocommit=True) as connection:
        assert connection.execute("SELECT count(*) FROM bad").fetchone() == (0,)
    assert prepared(url) == []
    return str(caught.value)


@pytest.mark.parametrize(
    ("ddl", "kind", "value", "reason"),
    [
        ("text", pa.string(), "a\x00b", "NUL"),
        ("text[]", pa.list_(pa.string()), ["ok", "a\x00b"], "NUL"),
        ("jsonb", pa.struct([("s", pa.string())]), {"s": "a\x00b"}, "unsupported Unicode"),
        ("numeric(10, 2)", pa.float64(), math.inf, "numeric field overflow"),
    ],
    ids=["text", "text[]", "jsonb", "inf-into-numeric(10,2)"],
)
def test_a_value_postgresql_cannot_hold_fails_naming_row_and_column(  # type: ignore[no-untyped-def]
    postgres_url, ddl, kind, value, reason
):
    """Text cannot hold NUL (a jsonb string neither, as ``\\u0000``); numeric(p, s) no infinity."""
    message = refused_by_a_writer(postgres_url, ddl, kind, value)
    assert re.search(rf"row 5 of subtask 0's input, column 'v'.*{reason}", message), message


@pytest.mark.parametrize(
    ("spark_type", "ddl", "arrow_type"),
    [
        ("INTERVAL '1' DAY", "bigint", "duration[us]"),
        ("INTERVAL '1' DAY", "jsonb", "duration[us]"),
        ("named_struct('w', INTERVAL '1' SECOND)", "json", "struct<w: duration[us]"),
        ("array(INTERVAL '1' SECOND)", "interval[]", "list<element: duration[us]"),
        ("map('k', 1)", "text[]", "map<large_string, int32>"),
        ("map('k', 1)", "text", "map<large_string, int32>"),
        ("named_struct('a', 1)", "text", "struct<a: int32"),
        ("array(array(1L))", "bigint[]", "list<element: list<element: int64"),
        ("array(named_struct('a', 1))", "text[]", "list<element: struct<a: int32"),
        ("array('{}')", "jsonb[]", "list<element: large_string"),
        ("X'00'", "text", "large_binary"),
        ("array(X'00')", "text[]", "list<element: large_binary"),
        ("true", "integer", "bool"),
        ("CURRENT_TIMESTAMP()", "bigint", "timestamp[us, tz=UTC]"),
        ("DATE'2024-01-01'", "integer", "date32"),
        ("1.5D", "boolean", "double"),
    ],
)
def test_a_type_the_column_cannot_take_is_refused_before_any_job(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - pytest fixtures
    spark, translator, postgres_url, spark_type, ddl, arrow_type
):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE r (id bigint, v {ddl})")
    df = spark.sql(f"SELECT id, {spark_type} AS v FROM range(3)")
    with pytest.raises(
        SinkConfigurationError,
        match=rf"column 'v' of type {re.escape(arrow_type)}.* cannot be written into "
        + re.escape(ddl),
    ):
        translator.apply(df, PostgresSink(postgres_url, "r"), sink_id="r", checkpoint_id=1)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        assert connection.execute("SELECT count(*) FROM r").fetchone() == (0,)


def test_variants_and_negative_zero_in_json_and_jsonb(spark, translator, postgres_url):  # type: ignore[no-untyped-def]
    """A variant is its JSON value, as Spark's ``to_json`` writes it; -0.0 stays in json only."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE j (id bigint, v jsonb, vs jsonb, z jsonb)")
        connection.execute("CREATE TABLE t (id bigint, v json, vs json, z json)")
    df = spark.sql(
        """SELECT 0 AS id,
                  parse_json('{"a": [1, 2.5, null], "b": "x", "d": 1.000000000000000000001,
                              "e": 12345678901234567890.123456789}') AS v,
                  array(parse_json('1'), NULL, parse_json('"s"')) AS vs,
                  named_struct('d', -0.0D, 'f', CAST('-0.0' AS FLOAT)) AS z"""
    ).coalesce(1)
    translator.apply(df, PostgresSink(postgres_url, "j"), sink_id="j", checkpoint_id=1)
    translator.apply(df, PostgresSink(postgres_url, "t"), sink_id="t", checkpoint_id=1)
    [spark_row] = df.selectExpr("to_json(v)", "to_json(vs)", "to_json(z)").collect()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        jsonb = connection.execute("SELECT v::text, vs::text, z::text FROM j").fetchone()
        text = connection.execute("SELECT v::text, vs::text, z::text FROM t").fetchone()
    parse = functools.partial(json.loads, parse_float=decimal.Decimal)
    assert jsonb is not None
    assert text is not None
    assert [parse(found) for found in jsonb[:2]] == [parse(found) for found in spark_row[:2]]
    assert [parse(found) for found in text[:2]] == [parse(found) for found in spark_row[:2]]
    assert parse(spark_row[2]) == {"d": decimal.Decimal("-0.0"), "f": decimal.Decimal("-0.0")}
    assert text[2].replace(" ", "") == '{"d":-0.0,"f":-0.0}'
    assert jsonb[2] == '{"d": 0.0, "f": 0.0}'


@pytest.mark.parametrize(
    "key",
    [
        "TIMESTAMP'2024-01-01 00:00:00.5'",
        "TIMESTAMP_NTZ'2024-01-01 00:00:00.5'",
        "DATE'2024-01-02'",
        "X'0102ff'",
        "1.50BD",
        "1.1F",
        "CAST('NaN' AS DOUBLE)",
        "true",
        "array(1, 2)",
        "named_struct('a', 1, 'b', 'x')",
    ],
)
def test_a_map_key_reads_as_the_same_value_does(spark, translator, postgres_url, key):  # type: ignore[no-untyped-def]
    """In json and jsonb a non-string key is its JSON value's text, so it reads as the value.

    (Spark's ``to_json`` writes date and timestamp keys as internal numbers and a
    binary key as a JVM object's name; the sink does not copy that.)
    """
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE m (id bigint, b jsonb, t json)")
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.sql(f"SELECT 0L AS id, map({key}, {key}) AS b, map({key}, {key}) AS t")
        translator.apply(
            df.coalesce(1), PostgresSink(postgres_url, "m"), sink_id="m", checkpoint_id=1
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        found = connection.execute("SELECT b::text, t::text FROM m").fetchone()
    assert found is not None
    for text in found:
        [(name, value)] = json.loads(text, parse_float=decimal.Decimal).items()
        if isinstance(value, str):  # dates, timestamps, base64, "NaN"
            assert name == value, text
        else:
            assert json.loads(name, parse_float=decimal.Decimal) == value, text
