"""HttpSink under Structured Streaming: at least once, per-key order across micro-batches.

Micro-batches end their writers with ``flush(False)``: records buffered but not a
full batch, and retries still waiting out their backoff, stay in the writer state
(``max_time_in_buffer_ms`` is an hour, so the buffer timer never sends them); the
next micro-batch restores and sends them first. ``ordering_key`` keeps each key's
records in input order through all of it, even while the server fails requests
and asks for records again. ``stop(drain=True)`` sends the rest on the driver.
"""

from __future__ import annotations

import operator

import pytest

from reference_sinks.http import HttpSink
from tests.reference_sinks.http.helpers import config
from tests.reference_sinks.streaming import (
    KEYED_SCHEMA,
    ids_by_key,
    json_stream,
    keyed_rows,
    stopped_at_exit,
    write_json_file,
)

pytestmark = pytest.mark.spark


def keyed_sink(server) -> HttpSink:
    return HttpSink(
        server.ingest_url,
        configuration=config(
            max_batch_size=4,
            max_time_in_buffer_ms=3_600_000,
            max_retries_per_entry=None,
            ordering_key=operator.itemgetter("key"),
        ),
    )


def arrived(server) -> dict[str, list[int]]:
    by_key: dict[str, list[int]] = {}
    for record in server.records():
        by_key.setdefault(record["key"], []).append(record["id"])
    return by_key


def start(translator, spark, sink, directory, trigger):
    return translator.apply(
        json_stream(spark, directory / "in", KEYED_SCHEMA),
        sink,
        sink_id="http-stream",
        checkpoint_location=str(directory / "checkpoint"),
        trigger=trigger,
    )


def test_buffered_records_carry_over_in_key_order_despite_failures_and_restarts(
    spark, translator, server, tmp_path
):
    server.control(fail_probability=0.2, fail_status=503, retry_probability=0.1, seed=7)
    source = tmp_path / "in"
    sink = keyed_sink(server)
    for index in range(3):
        write_json_file(source, index, keyed_rows(index))
    query = start(translator, spark, sink, tmp_path, {"availableNow": True})
    with stopped_at_exit(query):
        query.awaitTermination()
    assert [r.records_written for r in query.recent_results] == [10, 10, 10]
    got = arrived(server)
    everything = ids_by_key(range(3))
    for key, ids in got.items():  # a prefix of each key's records: in order, none twice
        assert ids == everything[key][: len(ids)], key
    assert sum(map(len, got.values())) < 30  # the last micro-batch left some in its state
    # (How much of the earlier micro-batches has arrived by now depends on the server's
    # failures and the retries' backoff timing: only the end state below is exact.)

    write_json_file(source, 3, keyed_rows(3))
    query = start(translator, spark, sink, tmp_path, {"processingTime": "100 milliseconds"})
    with stopped_at_exit(query):
        query.processAllAvailable()
        query.stop(drain=True)
    assert query.exception() is None
    assert arrived(server) == ids_by_key(range(4))  # all, once, each key in input order
    statuses = server.stats()["statuses"]
    assert {"200", "503"} <= statuses.keys()


def test_a_plain_stop_keeps_the_buffer_for_the_next_run_and_a_draining_stop_sends_it(
    spark, translator, server, tmp_path
):
    source = tmp_path / "in"
    sink = keyed_sink(server)
    write_json_file(source, 0, keyed_rows(0))
    trigger = {"processingTime": "100 milliseconds"}
    query = start(translator, spark, sink, tmp_path, trigger)
    with stopped_at_exit(query):
        query.processAllAvailable()
        query.stop()
    left = 10 - len(server.records())
    assert left > 0  # kept in the writer state of checkpoint 1

    write_json_file(source, 1, keyed_rows(1))
    query = start(translator, spark, sink, tmp_path, trigger)
    with stopped_at_exit(query):
        query.processAllAvailable()
        assert all(len(arrived(server)[k]) >= len(v) for k, v in ids_by_key(range(1)).items())
        query.stop(drain=True)
    assert [r.checkpoint_id for r in query.recent_results] == [2]
    assert arrived(server) == ids_by_key(range(2))
