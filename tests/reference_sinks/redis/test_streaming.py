"""RedisSink under Structured Streaming: at least once, buffered entries carried in writer state.

Each micro-batch ends its writers with ``flush(False)``: what is buffered and not
a full batch stays in the writer state (``max_time_in_buffer_ms`` is an hour here,
so the buffer timer never sends it), and the next micro-batch's writers restore it
and send it first. ``stop(drain=True)`` sends it on the driver instead.

Every file is one micro-batch of 10 rows over 3 keys; each row is appended to its
key's Redis stream, so the streams show what arrived, how often, in which order.
"""

from __future__ import annotations

import pytest

from reference_sinks.redis import RedisSink, SetMode, StreamMode
from sinkv2.asyncsink import AsyncSinkWriterConfiguration
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.failing_sink import FailingSink
from tests.reference_sinks.streaming import (
    KEYED_SCHEMA,
    KEYS,
    ids_by_key,
    json_stream,
    keyed_rows,
    stopped_at_exit,
    write_json_file,
)

pytestmark = pytest.mark.spark

SMALL_BATCHES = AsyncSinkWriterConfiguration(
    max_batch_size=4, max_buffered_requests=100, max_time_in_buffer_ms=3_600_000
)


def stream_sink(redis_server) -> RedisSink:
    return RedisSink(
        redis_server.url,
        StreamMode(key="log:{key}", fields=lambda row: {"id": row["id"]}),
        keep_key_order=True,
        configuration=SMALL_BATCHES,
    )


def delivered(redis_client) -> dict[str, list[int]]:
    return {
        f"k{k}": [int(fields[b"id"]) for _, fields in redis_client.xrange(f"log:k{k}")]
        for k in range(KEYS)
    }


def assert_in_order(got: dict[str, list[int]], *, all_of: range, some_of: range) -> None:
    """Per key: every id of the files ``all_of`` once, in input order, then some of the rest."""
    complete = ids_by_key(all_of)
    expected = ids_by_key(range(all_of.start, some_of.stop))
    for key, ids in got.items():
        assert ids == expected[key][: len(ids)], key
        assert len(ids) >= len(complete[key]), key


def start(translator, spark, sink, directory, trigger):
    return translator.apply(
        json_stream(spark, directory / "in", KEYED_SCHEMA),
        sink,
        sink_id="redis-stream",
        checkpoint_location=str(directory / "checkpoint"),
        trigger=trigger,
    )


def test_buffered_entries_are_sent_by_the_next_micro_batch_and_by_the_next_run(
    spark, translator, redis_server, redis_client, tmp_path
):
    source = tmp_path / "in"
    sink = stream_sink(redis_server)
    for index in range(3):
        write_json_file(source, index, keyed_rows(index))
    query = start(translator, spark, sink, tmp_path, {"availableNow": True})
    with stopped_at_exit(query):
        query.awaitTermination()
    results = query.recent_results
    assert [r.records_written for r in results] == [10, 10, 10]
    sent = [int(r.writer_metrics["numRecordsSend"]) for r in results]
    got = delivered(redis_client)
    assert sum(map(len, got.values())) == sum(sent) < 30  # the last batch left some buffered
    # What micro-batches 1 and 2 left buffered, their successors sent first.
    assert_in_order(got, all_of=range(2), some_of=range(3))
    with pytest.raises(SinkConfigurationError, match="processAllAvailable"):
        query.stop(drain=True)  # the job ended with awaitTermination(): states stay

    # A plain end leaves the buffer in the state; the next run's first micro-batch sends it.
    write_json_file(source, 3, keyed_rows(3))
    query = start(translator, spark, sink, tmp_path, {"availableNow": True})
    with stopped_at_exit(query):
        query.awaitTermination()
    assert [r.checkpoint_id for r in query.recent_results] == [4]
    assert_in_order(delivered(redis_client), all_of=range(3), some_of=range(4))


def test_stop_with_drain_sends_what_the_last_micro_batch_left_buffered(
    spark, translator, redis_server, redis_client, tmp_path
):
    source = tmp_path / "in"
    sink = stream_sink(redis_server)
    for index in range(2):
        write_json_file(source, index, keyed_rows(index))
    query = start(translator, spark, sink, tmp_path, {"processingTime": "100 milliseconds"})
    with stopped_at_exit(query):
        query.processAllAvailable()
        before = delivered(redis_client)
        assert sum(map(len, before.values())) < 20
        query.stop(drain=True)
    assert query.exception() is None
    got = delivered(redis_client)
    assert got == ids_by_key(range(2))  # all of it, once, in order

    # The drained entries left the state: the next run does not send them again.
    write_json_file(source, 2, keyed_rows(2))
    query = start(translator, spark, sink, tmp_path, {"processingTime": "100 milliseconds"})
    with stopped_at_exit(query):
        query.processAllAvailable()
        query.stop(drain=True)
    assert delivered(redis_client) == ids_by_key(range(3))


def test_task_failures_in_micro_batches_lose_nothing(
    spark, translator, redis_server, redis_client, tmp_path
):
    """Every micro-batch's subtask 0 fails once mid-write; Spark retries it from the same state."""
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inner = RedisSink(
        redis_server.url,
        SetMode(key="row:{id}", value=lambda row: row["key"]),
        configuration=SMALL_BATCHES,
    )
    sink = FailingSink(inner, {(0, 0): 7})
    for index in range(3):
        write_json_file(source, index, keyed_rows(index))
    query = translator.apply(
        json_stream(spark, source, KEYED_SCHEMA),
        sink,
        sink_id="redis-failing",
        checkpoint_location=str(checkpoint),
        trigger={"processingTime": "100 milliseconds"},
    )
    with stopped_at_exit(query):
        query.processAllAvailable()
        query.stop(drain=True)
    assert query.exception() is None
    rows = [row for index in range(3) for row in keyed_rows(index)]
    keys = [f"row:{row['id']}" for row in rows]
    assert redis_client.mget(keys) == [row["key"].encode() for row in rows]
    assert redis_client.dbsize() == len(rows)


def test_a_micro_batch_without_partitions_keeps_the_buffered_entries(
    spark, translator, redis_server, redis_client, tmp_path
):
    """Spark's file source gives an empty file's micro-batch no partitions at all."""
    source = tmp_path / "in"
    write_json_file(source, 0, keyed_rows(0))
    write_json_file(source, 1, [])
    write_json_file(source, 2, keyed_rows(2))
    query = start(translator, spark, stream_sink(redis_server), tmp_path, {"availableNow": True})
    with stopped_at_exit(query):
        query.processAllAvailable()
        query.stop(drain=True)
    assert query.exception() is None
    assert [(r.checkpoint_id, r.records_written) for r in query.recent_results] == [
        (1, 10),
        (2, 0),
        (3, 10),
    ]
    assert delivered(redis_client) == ids_by_key(range(0, 3, 2))
