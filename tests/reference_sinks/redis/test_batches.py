"""The column-wise conversion of Arrow batches builds the row path's entries, byte for byte.

`batch_entries` is an optimisation of ``mode.to_entry`` per row dict (Arrow's
``to_pylist``), so for any batch it must give exactly the row path's entries: the
same keys, the same JSON and the same fields, nulls, NaN, control characters and
nested values included. Writers fall back to the row path where it cannot (a
function in the mode, a null key column); those batches must still be written, or
fail with the row's own message.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

import hiredis
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_sinks.redis import HashMode, RedisSink, SetMode, StreamMode
from reference_sinks.redis._batches import Unvectorised, batch_entries
from reference_sinks.redis._modes import PackedEntry, column_encoders
from reference_sinks.redis._sink import _Converter
from sinkv2.asyncsink import AsyncSinkWriterConfiguration
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=6) | st.sampled_from(
    ['"', "\\", "\n\t\x00", "é€😀", "%s", "{}", ""]
)
COLUMNS = {
    "i32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "i8": (pa.int8(), st.integers(-128, 127)),
    "s": (pa.string(), _TEXT),
    "ls": (pa.large_string(), _TEXT),
    "f64": (pa.float64(), st.floats()),
    "f32": (pa.float32(), st.floats(width=32)),
    "b": (pa.bool_(), st.booleans()),
    "bin": (pa.binary(), st.binary(max_size=6)),
    "dec": (pa.decimal128(9, 2), st.decimals(-9999999, 9999999, places=2)),
    "day": (pa.date32(), st.dates()),
    "ts": (pa.timestamp("us"), st.datetimes(min_value=dt.datetime(1, 1, 1))),
    "tz": (
        pa.timestamp("us", tz="UTC"),
        st.datetimes(min_value=dt.datetime(1900, 1, 1), timezones=st.just(dt.UTC)),
    ),
    "arr": (pa.list_(pa.int64()), st.lists(st.none() | st.integers(-5, 5), max_size=3)),
    "obj": (
        pa.struct([("a", pa.float64()), ("b", pa.string())]),
        st.fixed_dictionaries({"a": st.none() | st.floats(), "b": st.none() | _TEXT}),
    ),
    "m": (
        pa.map_(pa.string(), pa.int64()),
        st.lists(st.tuples(_TEXT, st.none() | st.integers(0, 9)), max_size=2),
    ),
    "nul": (pa.null(), st.none()),
}
TEMPLATES = ["k:{id}", "{s}/{id}", "{f64}:{id}", "lit{{x}}%:{id}:{b}", "{dec}{day}{id}", "one"]


@st.composite
def batches(draw):
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), unique=True, max_size=6))
    rows = draw(st.integers(1, 6))
    arrays = [pa.array(range(rows), pa.int64())]
    for name in names:
        kind, values = COLUMNS[name]
        # Key columns are not null: a null key goes the row path, tested apart.
        nullable = name not in {"s", "f64", "b", "dec", "day"} or draw(st.booleans())
        cells = draw(
            st.lists(values | st.none() if nullable else values, min_size=rows, max_size=rows)
        )
        arrays.append(pa.array(cells, kind))
    return pa.RecordBatch.from_arrays(arrays, names=["id", *names])


MODES = [
    *(SetMode(key=template) for template in TEMPLATES),
    *(HashMode(key=template) for template in TEMPLATES),
    SetMode(key="k:{id}", ttl_ms=5_000),
    HashMode(key="k:{id}", ttl_ms=5_000),
    StreamMode(key="{s}stream"),
]


def row_path(mode, batch):
    converter = _Converter(mode, column_encoders(mode, batch.schema))
    return [converter.apply(row, BasicSinkWriterContext()) for row in batch.to_pylist()]


@settings(max_examples=300, deadline=None)
@given(batch=batches(), mode=st.sampled_from(MODES))
def test_batch_entries_are_the_row_paths_entries(batch, mode):
    encoders = column_encoders(mode, batch.schema)
    try:
        entries = batch_entries(mode, batch, encoders)
    except Unvectorised:
        # Only where the row path fails too (a null or missing key column, a stream
        # row without a field), and it says which row.
        with pytest.raises(SinkConfigurationError):
            row_path(mode, batch)
        return
    assert entries is not None
    assert entries == row_path(mode, batch)
    for entry in entries:
        if isinstance(entry, PackedEntry):  # SET and HSET: packed as the writer would
            plain = list(entry)
            assert entry.commands == mode.pack([plain], hiredis.pack_command)[0]
            assert entry.size == mode.entry_size(plain)


def test_functions_and_repeated_columns_are_left_to_the_row_path():
    batch = pa.RecordBatch.from_pydict({"id": [1, 2], "v": ["a", "b"]})
    assert batch_entries(SetMode(key=lambda row: row["id"]), batch, {}) is None
    assert batch_entries(SetMode(key="k:{id}", value=lambda row: row["v"]), batch, {}) is None
    assert batch_entries(HashMode(key="k:{id}", fields=dict), batch, {}) is None
    assert batch_entries(StreamMode(key="s", id=lambda row: f"{row['id']}-0"), batch, {}) is None
    twice = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"])
    assert batch_entries(SetMode(key="k:{id}"), twice, {}) is None


SMALL = AsyncSinkWriterConfiguration(
    max_batch_size=50, max_in_flight_requests=2, max_buffered_requests=200
)


def write_batches(sink, batches):
    context = BasicWriterInitContext()
    writer = sink.create_writer(context)
    try:
        for batch in batches:
            writer.write_arrow_batch(batch, BasicSinkWriterContext())
        writer.flush(True)
    finally:
        writer.close()
    return context


def test_arrow_batches_land_as_their_rows_would(redis_server, redis_client):
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(300), pa.int64()),
            "name": [f"n\n{i}" if i % 7 else None for i in range(300)],
            "score": [i / 3 for i in range(300)],
            "price": pa.array([decimal.Decimal(i) / 4 for i in range(300)], pa.decimal128(9, 2)),
        }
    )
    context = write_batches(
        RedisSink(redis_server.url, SetMode(key="s:{id}"), configuration=SMALL), [batch]
    )
    write_batches(
        RedisSink(redis_server.url, HashMode(key="h:{id}", ttl_ms=60_000), configuration=SMALL),
        [batch],
    )
    write_batches(
        RedisSink(
            redis_server.url,
            SetMode(key="f:{id}", value=lambda row: row["score"]),
            configuration=SMALL,
        ),
        [batch],
    )
    assert context.metrics.get_num_records_send_counter().get_count() == 300
    assert json.loads(redis_client.get("s:14")) == {
        "id": 14,
        "name": None,
        "score": 14 / 3,
        "price": "3.50",
    }
    assert redis_client.hgetall("h:15") == {
        b"id": b"15",
        b"name": b"n\n15",
        b"score": b"5.0",
        b"price": b"3.75",
    }
    assert 0 < redis_client.pttl("h:15") <= 60_000
    assert redis_client.get("f:3") == b"1.0"
    assert redis_client.dbsize() == 900


def test_a_null_key_column_fails_naming_the_row(redis_server, redis_client):
    batch = pa.RecordBatch.from_pydict({"id": [1, None, 3], "v": ["a", "b", "c"]})
    sink = RedisSink(redis_server.url, SetMode(key="k:{id}"), configuration=SMALL)
    with pytest.raises(
        SinkConfigurationError, match=r"column 'id' is null in element \{'id': None, 'v': 'b'\}"
    ):
        write_batches(sink, [batch])
