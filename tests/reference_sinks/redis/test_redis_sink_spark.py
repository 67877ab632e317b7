"""RedisSink through SinkTopologyTranslator on local Spark (local[2,4]: task retries allowed).

Every row of a DataFrame ends up in Redis, also when task attempts fail mid-write
and Spark re-runs them (the re-run writes its rows again: idempotent SETs).
"""

from __future__ import annotations

import pytest

from reference_sinks.redis import HashMode, RedisSink, SetMode
from tests.reference_sinks.failing_sink import FailingSink

pytestmark = pytest.mark.spark

N = 20_000


def frame(spark, n=N, partitions=4):
    return (
        spark.range(n)
        .selectExpr(
            "id", "concat('name-', cast(id as string)) as name", "cast(id as double) / 4 as score"
        )
        .repartition(partitions)
    )


def test_every_row_lands_in_redis(spark, translator, redis_server, redis_client):
    sink = RedisSink(redis_server.url, HashMode(key="user:{id}"))
    result = translator.apply(frame(spark), sink, sink_id="redis-users")
    assert result.records_written == N
    assert redis_client.dbsize() == N
    assert redis_client.hgetall("user:12345") == {
        b"id": b"12345",
        b"name": b"name-12345",
        b"score": b"3086.25",
    }


def test_task_failures_lose_no_row(spark, translator, redis_server, redis_client):
    inner = RedisSink(redis_server.url, SetMode(key="k:{id}", value=lambda row: row["name"]))
    failures = {(0, 0): 10, (1, 0): 3000, (1, 1): 4000, (3, 0): 0}
    result = translator.apply(frame(spark), FailingSink(inner, failures), sink_id="redis-faults")
    assert result.records_written == N
    assert redis_client.dbsize() == N
    values = redis_client.mget([f"k:{i}" for i in range(N)])
    assert values == [f"name-{i}".encode() for i in range(N)]
