"""Properties under random server schedules: at least once, and per-key order with ``ordering_key``.

Each example sets a fresh schedule on the real server (which request numbers are
throttled, fail, or have records sent back for retry), writes keyed records, and
flushes. Every record must arrive; with ``ordering_key``, each key's arrivals (with
consecutive duplicates collapsed) must be exactly its input order.

Timeouts are left out on purpose: a request the writer gave up on may still be
stored by the server after its retry, so per-key order cannot hold across them
(``docs/sinks/http.md`` says so).
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_sinks.http import HttpSink
from tests.reference_sinks.http.helpers import config, write_all

ANSWERS = st.one_of(
    st.sampled_from(
        [
            {"status": 429, "retry_after": "0"},
            {"status": 503},
            {"status": 500},
            {"status": 502},
            {"status": 504},
        ]
    ),
    st.builds(
        lambda retry: {"status": 207, "retry": sorted(retry)},
        st.sets(st.integers(0, 7), min_size=1, max_size=4),
    ),
)


def collapse(sequence):
    out = []
    for item in sequence:
        if not out or out[-1] != item:
            out.append(item)
    return out


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 60),
    keys=st.integers(1, 4),
    schedule=st.dictionaries(st.integers(0, 25), ANSWERS, max_size=12),
    hints=st.fixed_dictionaries(
        {"batch": st.integers(1, 8), "in_flight": st.integers(1, 4), "ordered": st.booleans()}
    ),
)
def test_every_record_arrives_and_per_key_order_holds(http_server, n, keys, schedule, hints):
    http_server.reset()
    http_server.control(schedule={str(k): v for k, v in schedule.items()})
    ordered = hints["ordered"]
    elements = [{"id": i, "key": f"k{i % keys}"} for i in range(n)]
    sink = HttpSink(
        http_server.ingest_url,
        configuration=config(
            max_batch_size=hints["batch"],
            max_in_flight_requests=hints["in_flight"],
            max_retries_per_entry=None,
            ordering_key=(lambda entry: entry["key"]) if ordered else None,
        ),
    )
    write_all(sink, elements)
    arrived = http_server.records()
    assert {r["id"] for r in arrived} == set(range(n)), "at least once"
    if ordered:
        for key in {e["key"] for e in elements}:
            sent = [e["id"] for e in elements if e["key"] == key]
            got = collapse(r["id"] for r in arrived if r["key"] == key)
            assert got == sent, f"order of key {key}"
