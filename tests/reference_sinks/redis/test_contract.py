"""RedisSink through the contract-test kit (in process, no Spark): at least once.

The kit counts elements as a multiset: everything it wrote and saw committed must
be visible, duplicates allowed. ``SET`` and ``HSET`` keep one value per key, so
their elements carry a unique ``id`` (as rows with a primary key do): a
re-delivered element overwrites its own key and shows up once, which is exactly
what idempotent writes promise. ``XADD`` with ids from Redis appends every
delivery; the kit sees the duplicates and accepts them.

`check_sink`'s streaming stage (`check_streaming`) carries the buffered entries in
writer state from micro-batch to micro-batch, across restarts and rescales, and
ends each stream with a draining stop.
"""

import itertools
import json

import pytest
from hypothesis import strategies as st

from reference_sinks.redis import HashMode, RedisSink, SetMode, StreamMode
from sinkv2 import DeliveryGuarantee
from sinkv2.asyncsink import AsyncSinkWriterConfiguration, ExponentialBackoff
from sinkv2.testing import SinkUnderTest, check_sink

EXAMPLES = 40  # $SINKV2_KIT_EXAMPLES overrides it
CONFIG = AsyncSinkWriterConfiguration(
    max_batch_size=3,
    max_in_flight_requests=2,
    max_buffered_requests=8,
    retry_backoff=ExponentialBackoff(initial_ms=0, max_ms=0),
)
_ids = itertools.count()


def unique_rows():
    """Rows with a fresh ``id`` each: equal rows never collide on one key."""
    return st.builds(
        lambda name, score: {"id": next(_ids), "name": name, "score": score},
        st.text(max_size=8),
        st.floats(allow_nan=False, allow_infinity=False),
    )


def read_set(client):
    return [json.loads(client.get(key)) for key in client.scan_iter("row:*")]


def read_hash(client):
    rows = []
    for key in client.scan_iter("row:*"):
        fields = client.hgetall(key)
        rows.append(
            {
                "id": int(fields[b"id"]),
                "name": fields[b"name"].decode(),
                "score": float(fields[b"score"]),
            }
        )
    return rows


def read_stream(client):
    return [json.loads(fields[b"row"]) for _, fields in client.xrange("rows")]


CASES = {
    "set": (SetMode(key="row:{id}"), unique_rows(), read_set),
    "hash": (HashMode(key="row:{id}"), unique_rows(), read_hash),
    "stream": (
        StreamMode(key="rows", fields=lambda row: {"row": json.dumps(row)}),
        st.fixed_dictionaries({"k": st.sampled_from(["a", "b"]), "v": st.integers(0, 3)}),
        read_stream,
    ),
}


def factory(server, client, mode, read):
    def make():
        client.flushall()
        return SinkUnderTest(
            RedisSink(server.url, mode, configuration=CONFIG), read_back=lambda: read(client)
        )

    return make


@pytest.mark.parametrize("case", sorted(CASES))
def test_redis_sink_keeps_the_at_least_once_contract(redis_server, redis_client, case):
    mode, elements, read = CASES[case]
    check_sink(
        factory(redis_server, redis_client, mode, read),
        guarantee=DeliveryGuarantee.AT_LEAST_ONCE,
        elements=elements,
        max_examples=EXAMPLES,
    )
