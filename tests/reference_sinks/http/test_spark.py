"""HttpSink through SinkTopologyTranslator on local Spark (local[2,4]: task retries allowed).

20k rows in 4 partitions go to the real local server while it throttles to a fixed
capacity, fails some requests and sends some records back for retry, and while
some task attempts fail halfway (Spark retries them): every row arrives. Retried
tasks send their rows again, so duplicates are expected (at least once).
"""

from collections import Counter

import pytest

from reference_sinks.http import HttpSink
from tests.reference_sinks.failing_sink import FailingSink
from tests.reference_sinks.http.helpers import FAST

pytestmark = pytest.mark.spark

N = 20_000


def frame(spark, n=N, partitions=4):
    return (
        spark.range(n)
        .selectExpr(
            "id", "concat('k', cast(id % 7 as string)) as key", "cast(id as double) / 2 as value"
        )
        .repartition(partitions)
    )


def test_nothing_is_lost_under_task_failures_throttling_and_server_errors(
    spark, translator, http_server
):
    from sinkv2.asyncsink import AsyncSinkWriterConfiguration

    http_server.reset()
    http_server.control(
        capacity=10_000, fail_probability=0.05, fail_status=503, retry_probability=0.01, seed=3
    )
    sink = HttpSink(
        http_server.ingest_url,
        configuration=AsyncSinkWriterConfiguration(
            max_batch_size=250,
            max_in_flight_requests=4,
            max_buffered_requests=2_000,
            retry_backoff=FAST,
            max_retries_per_entry=None,
            request_timeout_ms=30_000,
        ),
    )
    failures = {(0, 0): 1_000, (2, 0): 3_000, (3, 0): 10}
    wrapped = FailingSink(sink, failures)
    result = translator.apply(frame(spark), wrapped, sink_id="http")
    records = http_server.records()
    counts = Counter(r["id"] for r in records)
    assert set(counts) == set(range(N))
    assert records[0].keys() == {"id", "key", "value"}
    stats = http_server.stats()
    assert {"429", "503"} <= stats["statuses"].keys()  # it was throttled and failed
    assert result.records_written >= N
