"""The async-sink how-to's webhook sink (docs/examples/webhook_sink.py) does what the page says.

It runs against the real local HTTP server (its own process) while the server
fails and throttles requests: engine-free, and through the Spark translator.
"""

import datetime
import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from sinkv2.asyncsink import AsyncSinkWriterConfiguration, ExponentialBackoff
from sinkv2.errors import FatalDestinationError
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext
from tests.servers.http_server import LocalServer

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "webhook_sink.py"
HINTS = AsyncSinkWriterConfiguration(
    max_batch_size=100,
    max_in_flight_requests=4,
    max_buffered_requests=1_000,
    max_time_in_buffer_ms=200,
    retry_backoff=ExponentialBackoff(initial_ms=5, max_ms=50),
    max_retries_per_entry=50,
)


def load_example():
    spec = importlib.util.spec_from_file_location("webhook_sink", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["webhook_sink"] = module
    spec.loader.exec_module(module)
    # Executors cannot import docs/examples: ship the classes by value.
    from pyspark import cloudpickle  # Spark pickles with its own copy

    cloudpickle.register_pickle_by_value(module)
    return module


@pytest.fixture(scope="module")
def server():
    started = LocalServer.start()
    yield started
    started.stop()


@pytest.fixture
def webhook():
    return load_example()


def test_the_example_is_under_sixty_lines():
    assert len(EXAMPLE.read_text().splitlines()) < 60


def test_every_row_arrives_while_the_server_fails_and_throttles(server, webhook):
    server.reset()
    server.control(fail_probability=0.2, fail_status=503, fail_retry_after="0", seed=3)
    sink = webhook.WebhookSink(server.ingest_url, HINTS)
    writer = sink.create_writer(BasicWriterInitContext())
    try:
        for i in range(5_000):
            writer.write({"id": i}, BasicSinkWriterContext())
        writer.flush(True)
    finally:
        writer.close()
    assert sorted(record["id"] for record in server.records()) == list(range(5_000))


def test_dates_travel_as_strings_and_a_dated_retry_after_backs_off(server, webhook):
    server.reset()
    server.control(
        fail_probability=0.3, fail_status=429, fail_retry_after="Wed, 21 Oct 2015 07:28:00 GMT"
    )
    sink = webhook.WebhookSink(server.ingest_url, HINTS)
    writer = sink.create_writer(BasicWriterInitContext())
    try:
        for i in range(300):
            writer.write({"id": i, "day": datetime.date(2026, 1, 1 + i % 28)}, None)
        writer.flush(True)
    finally:
        writer.close()
    records = server.records()
    assert sorted(record["id"] for record in records) == list(range(300))
    assert records[0]["day"].startswith("2026-01-")


def test_a_refused_batch_fails_with_the_servers_message(server, webhook):
    server.reset()
    server.control(schedule={"0": {"status": 400}})
    sink = webhook.WebhookSink(server.ingest_url, HINTS)
    writer = sink.create_writer(BasicWriterInitContext())
    try:
        writer.write({"id": 1}, BasicSinkWriterContext())
        with pytest.raises(FatalDestinationError, match="refused a batch: 400"):
            writer.flush(True)
    finally:
        writer.close()


@pytest.mark.spark
def test_the_example_runs_on_spark_without_losing_rows(server, webhook, spark, translator):
    server.reset()
    server.control(fail_probability=0.1, fail_status=500, seed=5)
    sink = webhook.WebhookSink(server.ingest_url, HINTS)
    result = translator.apply(spark.range(10_000).repartition(4), sink, sink_id="webhook-howto")
    assert result.records_written == 10_000
    arrived = Counter(record["id"] for record in server.records())
    assert set(arrived) == set(range(10_000))
