"""PostgresSink -> PostgresSource: every type of the type table reads back as it was written.

A table gets each Arrow type's natural column type (`postgres_type`); a batch of edge
values (NaN, the infinities, -0.0, the widest decimals, years 1 and 9999, empty and
NULL-holding arrays, text with quotes, commas, newlines and backslashes) goes in
through `PostgresSink` and comes back through `PostgresSource` as the read type
(`arrow_type`): equal value for value, floats bit for bit. Nested values come back as
their JSON text.
"""

import datetime as dt
import decimal
import json
import math
import struct
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from reference_sinks.postgres import PostgresReadError, PostgresSink, PostgresSource
from reference_sinks.postgres._types import postgres_type
from sinkv2.runtime import (
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
    commit_with_retries,
)
from sinkv2.testing import LocalSourceEngine

NAN = float("nan")
INF = float("inf")
UTC = dt.UTC
TEXT = ["", 'a "quoted", comma', "line\nbreak\\back\tslash", "é NULL {}"]


def column(kind: pa.DataType, *values: Any) -> pa.Array:
    return pa.array([*values, None], kind)


# Four rows: three of values, the last all NULL.
COLUMNS: dict[str, tuple[pa.Array, pa.DataType]] = {
    "i8": (column(pa.int8(), -128, 127, 0), pa.int16()),
    "i16": (column(pa.int16(), -32768, 32767, 0), pa.int16()),
    "i32": (column(pa.int32(), -(2**31), 2**31 - 1, 0), pa.int32()),
    "i64": (column(pa.int64(), -(2**63), 2**63 - 1, 0), pa.int64()),
    "f32": (column(pa.float32(), NAN, -INF, -0.0), pa.float32()),
    "f64": (column(pa.float64(), INF, 5e-324, -0.0), pa.float64()),
    "dec_wide": (
        column(
            pa.decimal128(38, 10),
            decimal.Decimal("-" + "9" * 28 + "." + "9" * 10),
            decimal.Decimal("9" * 28 + "." + "9" * 10),
            decimal.Decimal("0.0000000001"),
        ),
        pa.decimal128(38, 10),
    ),
    "dec": (column(pa.decimal128(9, 2), decimal.Decimal("-9999999.99"), 0, 1), pa.decimal128(9, 2)),
    "s": (column(pa.string(), *TEXT[:3]), pa.string()),
    "b": (column(pa.bool_(), True, False, True), pa.bool_()),
    "raw": (column(pa.binary(), b"", b'\x00\xff\n,"\\', b"x"), pa.binary()),
    "d": (
        column(pa.date32(), dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)),
        pa.date32(),
    ),
    "ts": (
        column(
            pa.timestamp("us"),
            dt.datetime(1, 1, 1),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            dt.datetime(1969, 12, 31, 23, 59, 59, 1),
        ),
        pa.timestamp("us"),
    ),
    "tsz": (
        column(
            pa.timestamp("us", "UTC"),
            dt.datetime(1, 1, 1, tzinfo=UTC),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(2024, 2, 29, 12, tzinfo=UTC),
        ),
        pa.timestamp("us", "UTC"),
    ),
    "tsz_ms_zone": (
        pa.array(
            [0, -2_208_988_800_000, 1_700_000_000_123, None], pa.timestamp("ms", "Europe/Amsterdam")
        ),
        pa.timestamp("us", "UTC"),
    ),
    "span": (
        column(
            pa.duration("us"),
            dt.timedelta(days=1, microseconds=5),
            dt.timedelta(days=-3, seconds=7),
            dt.timedelta(0),
        ),
        pa.duration("us"),
    ),
    "ints": (column(pa.list_(pa.int32()), [1, None, -(2**31)], [], [0]), pa.list_(pa.int32())),
    "texts": (column(pa.list_(pa.string()), TEXT, [None, "NULL"], []), pa.list_(pa.string())),
    "floats": (
        column(pa.list_(pa.float64()), [NAN, -INF, -0.0], [1e300], []),
        pa.list_(pa.float64()),
    ),
    "bools": (column(pa.list_(pa.bool_()), [True, None, False], [], [False]), pa.list_(pa.bool_())),
    "days": (
        column(pa.list_(pa.date32()), [dt.date(1, 1, 1), None], [dt.date(9999, 12, 31)], []),
        pa.list_(pa.date32()),
    ),
    "instants": (
        column(
            pa.list_(pa.timestamp("us", "UTC")),
            [dt.datetime(1900, 1, 1, tzinfo=UTC), None],
            [dt.datetime(2100, 1, 1, 0, 0, 0, 1, tzinfo=UTC)],
            [],
        ),
        pa.list_(pa.timestamp("us", "UTC")),
    ),
    "decs": (
        column(pa.list_(pa.decimal128(9, 2)), [decimal.Decimal("1.25"), None], [], [0]),
        pa.list_(pa.decimal128(9, 2)),
    ),
    "blobs": (
        column(pa.list_(pa.binary()), [b"\x00\x01", None, b""], [], [b"\xff"]),
        pa.list_(pa.binary()),
    ),
    "doc": (
        column(
            pa.struct([("k", pa.string()), ("n", pa.int64())]),
            {"k": "x", "n": 1},
            {"k": None, "n": 2**62},
            {"k": '"', "n": None},
        ),
        pa.string(),
    ),
}


def _write(url: str, batch: pa.RecordBatch) -> None:
    sink = PostgresSink(url, "everything")
    writer = sink.create_writer(BasicWriterInitContext(job_id="types", input_schema=batch.schema))
    try:
        writer.write_arrow_batch(batch, BasicSinkWriterContext())
        committables = writer.prepare_commit()
    finally:
        writer.close()
    committer = sink.create_committer(BasicCommitterInitContext())
    try:
        commit_with_retries(committer, committables, sleep=lambda _: None)
    finally:
        committer.close()


def _same(value: Any) -> Any:
    """A value with its floats compared bit for bit (NaN equal to NaN, -0.0 not to 0.0)."""
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("float", struct.pack(">d", value))
    if isinstance(value, list):
        return [_same(item) for item in value]
    return value


def test_every_type_of_the_type_table_round_trips_through_sink_and_source(postgres_url):
    names = ["id", *COLUMNS]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([0, 1, 2, 3], pa.int64())] + [array for array, _ in COLUMNS.values()],
        names=names,
    )
    ddl = ", ".join(f'"{f.name}" {postgres_type(f.type)}' for f in batch.schema)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE everything ({ddl}, PRIMARY KEY (id))")
    _write(postgres_url, batch)

    source = PostgresSource(postgres_url, "everything", chunks=2)
    produced = source.get_produced_type()
    assert produced.field("id") == pa.field("id", pa.int64(), nullable=False)
    assert {name: produced.field(name).type for name in COLUMNS} == {
        name: read for name, (_, read) in COLUMNS.items()
    }
    engine = LocalSourceEngine(source, 2)
    engine.run()
    engine.finish()
    got = sorted((record.record for record in engine.committed), key=lambda row: row["id"])
    assert [row["id"] for row in got] == [0, 1, 2, 3]
    for name, (written, read) in COLUMNS.items():
        values = [row[name] for row in got]
        if name == "doc":
            want = written.to_pylist()
            assert [None if v is None else json.loads(v) for v in values] == want
        else:
            assert _same(values) == _same(written.cast(read).to_pylist()), name


def _read(url: str, table: str) -> list[dict[str, Any]]:
    source = PostgresSource(url, table, chunks=1)
    connection = source._reader_connection()
    try:
        return [
            row
            for split in source.plan()
            for b in source._read(connection, split)
            for row in b.to_pylist()
        ]
    finally:
        connection.close()


def test_read_only_types_arrays_of_them_and_multi_dimensional_arrays_read_as_the_table_says(
    postgres_url,
):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        connection.execute(
            "CREATE TABLE readonly (id int PRIMARY KEY, u uuid, j json, jb jsonb, m mood, "
            "v varchar(5), c char(3), ip inet, n numeric, span interval, us uuid[], "
            "js json[], spans interval[], grid int[], shifted int[], ns numeric[])"
        )
        connection.execute(
            "INSERT INTO readonly VALUES (1, '00000000-0000-0000-0000-00000000000a', "
            """'{"a": [1, 2.50]}', '{"b": null}', 'ok', 'abc', 'x', '10.0.0.1/8', """
            "1.1234567890123456789, interval '1 month 2 days 00:00:01.5', "
            "'{00000000-0000-0000-0000-00000000000b,NULL}', ARRAY['[1]'::json], "
            "ARRAY[interval '1 day', NULL, interval '-1 us'], '{{1,2},{3,NULL}}', "
            "'[0:1]={5,6}', '{1.5,NaN}'::numeric[])"
            ", (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
            "NULL, '{}', '{}')"
        )
    source = PostgresSource(postgres_url, "readonly", chunks=1)
    assert source.get_produced_type().field("ns").type == pa.list_(pa.decimal128(38, 18))
    with psycopg.connect(postgres_url, autocommit=True) as connection:  # NaN: no Arrow value
        connection.execute("UPDATE readonly SET ns = '{1.5}' WHERE id = 1")
    one, two = _read(postgres_url, "readonly")
    assert one == {
        "id": 1,
        "u": "00000000-0000-0000-0000-00000000000a",
        "j": '{"a": [1, 2.50]}',
        "jb": '{"b": null}',
        "m": "ok",
        "v": "abc",
        "c": "x",  # char(n) as text drops its padding (as ::text does)
        "ip": "10.0.0.1/8",
        "n": decimal.Decimal("1.123456789012345679"),  # numeric(38, 18), rounded by the server
        # extract(epoch ...): a month is 30 days
        "span": dt.timedelta(days=32, seconds=1, microseconds=500000),
        "us": ["00000000-0000-0000-0000-00000000000b", None],
        "js": ["[1]"],
        "spans": [dt.timedelta(days=1), None, dt.timedelta(microseconds=-1)],
        "grid": [1, 2, 3, None],  # the elements in order, as unnest gives them
        "shifted": [5, 6],
        "ns": [decimal.Decimal("1.5")],
    }
    assert two == {
        "id": 2,
        **{name: None for name in one if name not in {"id", "shifted", "ns"}},
        "shifted": [],
        "ns": [],
    }


def test_values_arrow_cannot_hold_fail_the_read(postgres_url):
    named = r"column '{}' holds .*Arrow cannot hold"
    cases = {  # column: (type, bad value, what the error says)
        "tz": ("timestamptz", "'infinity'", named),
        "ts": ("timestamp", "'-infinity'", named),
        "d": ("date[]", "ARRAY['2024-01-01'::date, 'infinity']", named),
        "w": ("numeric(30, 2)", "'NaN'", named),  # read as text
        "n": ("numeric(10, 2)", "'NaN'", named),  # as unscaled int8: the cast is refused
    }
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for name, (kind, value, _) in cases.items():
            connection.execute(f"CREATE TABLE bad_{name} (id int PRIMARY KEY, {name} {kind})")
            connection.execute(f"INSERT INTO bad_{name} VALUES (1, NULL), (2, {value})")
    for name, (_, _, says) in cases.items():
        with pytest.raises(PostgresReadError, match=says.format(name)):
            _read(postgres_url, f"bad_{name}")
