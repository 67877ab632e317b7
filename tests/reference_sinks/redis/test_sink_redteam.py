"""RedisSink red-teamed: key template columns that are not strings, both conversion paths."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

from reference_sinks.redis import HashMode, RedisSink, SetMode
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext

CONTEXT = BasicSinkWriterContext()
BATCH = pa.RecordBatch.from_pydict(
    {
        "raw": pa.array([b"\x01a", b"b c"]),
        "flag": [True, False],
        "at": pa.array(
            [datetime.datetime(2024, 1, 1, 12, 30), datetime.datetime(1999, 12, 31)],
            pa.timestamp("us"),
        ),
        "v": [1, 2],
    }
)
KEYS = [b"k:\x01a:true:2024-01-01T12:30:00", b"k:b c:false:1999-12-31T00:00:00"]


def _write(sink, *, rows=None, batch=None):
    writer = sink.create_writer(BasicWriterInitContext(input_schema=BATCH.schema))
    try:
        if batch is not None:
            writer.write_arrow_batch(batch, CONTEXT)
        for row in rows or ():
            writer.write(row, CONTEXT)
        writer.flush(True)
    finally:
        writer.close()


@pytest.mark.parametrize("path", ["arrow", "rows"])
@pytest.mark.parametrize("mode", [SetMode, HashMode])
def test_key_columns_are_spelled_as_their_values_are_stored(redis_server, redis_client, path, mode):
    """Binary as its bytes (not Python's b'...'), booleans true/false, timestamps ISO 8601."""
    sink = RedisSink(redis_server.url, mode(key="k:{raw}:{flag}:{at}"))
    if path == "arrow":
        _write(sink, batch=BATCH)
    else:
        _write(sink, rows=BATCH.to_pylist())
    assert sorted(redis_client.keys()) == sorted(KEYS)
    if mode is HashMode:
        assert redis_client.hget(KEYS[0], "flag") == b"true"
        assert redis_client.hget(KEYS[0], "raw") == b"\x01a"


@pytest.mark.parametrize("path", ["arrow", "rows"])
def test_a_key_column_no_key_can_hold_is_refused_naming_it(redis_server, redis_client, path):
    batch = pa.RecordBatch.from_pydict({"id": [[1, 2]], "v": [1]})
    sink = RedisSink(redis_server.url, SetMode(key="l:{id}"))
    given = {"batch": batch} if path == "arrow" else {"rows": batch.to_pylist()}
    with pytest.raises(SinkConfigurationError, match=r"key template 'l:\{id\}': column 'id' holds"):
        _write(sink, **given)
    assert redis_client.keys() == []
