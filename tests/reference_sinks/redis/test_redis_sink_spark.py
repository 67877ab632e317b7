"""RedisSink through SinkTopologyTranslator on local Spark (local[2,4]: task retries allowed).

Every row of a DataFrame ends up in Redis, also when task attempts fail mid-write
and Spark re-runs them (the re-run writes its rows again: idempotent SETs).
"""

from __future__ import annotations

import pytest

from reference_sinks.redis import HashMode, RedisSink, SetMode
from sinkv2 import Sink, StatefulSinkWriter, SupportsWriterState

pytestmark = pytest.mark.spark

N = 20_000


class InjectedFault(RuntimeError):
    pass


class FailingWriter(StatefulSinkWriter):
    """Raises at element ``fail_at`` (after the rows before it may have landed)."""

    def __init__(self, inner, fail_at) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.seen = 0

    def write(self, element, context) -> None:
        if self.seen == self.fail_at:
            raise InjectedFault(f"injected failure at element {self.seen}")
        self.seen += 1
        self.inner.write(element, context)

    def flush(self, end_of_input) -> None:
        self.inner.flush(end_of_input)

    def write_watermark(self, watermark) -> None:
        self.inner.write_watermark(watermark)

    def snapshot_state(self, checkpoint_id):
        return self.inner.snapshot_state(checkpoint_id)

    def close(self) -> None:
        self.inner.close()


class FailingSink(Sink, SupportsWriterState):
    """``failures``: (subtask, attempt) -> element index at which that attempt raises."""

    def __init__(self, inner, failures) -> None:
        self.inner = inner
        self.failures = dict(failures)

    def create_writer(self, context):
        return self.restore_writer(context, ())

    def restore_writer(self, context, recovered_state):
        inner = self.inner.restore_writer(context, recovered_state)
        fail_at = self.failures.get((context.get_subtask_id(), context.get_attempt_number()))
        return FailingWriter(inner, fail_at)

    def get_writer_state_serializer(self):
        return self.inner.get_writer_state_serializer()


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
