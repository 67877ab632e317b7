"""HttpSink through the contract-test kit (in process, no Spark): at least once.

Each example resets the real local server (one process for the session), which
sends about one record in ten back for retry, and reads back what it stored.
Crashes drop writers with or without ``close()``; restores replay from the last
checkpoint, so duplicates are expected and allowed. `check_sink`'s streaming stage
(`check_streaming`) carries the buffered requests in writer state from micro-batch to
micro-batch, across restarts and rescales, and ends each stream with a draining stop.
"""

from hypothesis import strategies as st

from reference_sinks.http import HttpSink
from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkUnderTest, check_sink
from tests.reference_sinks.http.helpers import config

ELEMENTS = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "key": st.one_of(st.none(), st.text(st.characters(exclude_categories=["Cs"]), max_size=8)),
        "value": st.floats(allow_nan=False, allow_infinity=False),
    }
)


def test_http_sink_keeps_the_at_least_once_contract(http_server):
    def make():
        http_server.reset()
        http_server.control(retry_probability=0.1, seed=7)
        return SinkUnderTest(
            HttpSink(http_server.ingest_url, configuration=config(max_batch_size=3)),
            read_back=http_server.records,
        )

    check_sink(make, guarantee=DeliveryGuarantee.AT_LEAST_ONCE, elements=ELEMENTS, max_examples=40)
