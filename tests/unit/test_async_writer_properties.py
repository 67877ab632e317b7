"""Properties of `AsyncSinkWriter` under random destination behaviour and restarts.

The destination (in process) fails random entries, raises random retryable
errors and throttles at random; the writer is checkpointed and restored from its
state at random points. At least once must hold: every element lands. With an
ordering key, each key's elements land in input order (a re-delivery after a
restore may repeat a suffix, never reorder).
"""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinkv2.asyncsink import BufferedRequestState, RequestEntryWrapper
from sinkv2.errors import RetryableError, SinkConfigurationError, ThrottledError
from tests.unit.async_writers import ScriptedWriter, config

ANSWERS = st.sampled_from(["ok", "ok", "ok", "retry-some", "retry-all", "error", "throttle"])


def scripted(answers, rng_bits):
    """A destination answering batch n with answers[n % len(answers)].

    An entry is asked back at most twice, so every schedule ends.
    """
    calls = iter(range(10**9))
    asked: dict[tuple, int] = {}

    def answer(batch):
        kind = answers[next(calls) % len(answers)]
        if kind == "retry-some":
            chosen = [entry for i, entry in enumerate(batch) if (rng_bits >> (i % 16)) & 1]
        elif kind == "retry-all":
            chosen = list(batch)
        else:
            return []
        retry = [entry for entry in chosen if asked.get(tuple(entry), 0) < 2]
        for entry in retry:
            asked[tuple(entry)] = asked.get(tuple(entry), 0) + 1
        return retry

    return answer, answers


def install(writer, answers, rng_bits):
    retry, _ = scripted(answers, rng_bits)
    writer.retry = retry
    writer.errors = [
        RetryableError("flaky") if kind == "error" else ThrottledError("busy", retry_after_ms=0)
        for kind in answers
        if kind in ("error", "throttle")
    ]


@settings(deadline=None)
@given(
    elements=st.lists(st.tuples(st.integers(0, 4), st.integers()), max_size=60),
    answers=st.lists(ANSWERS, min_size=1, max_size=12),
    rng_bits=st.integers(0, 2**16 - 1),
    checkpoints=st.sets(st.integers(0, 60), max_size=4),
    ordered=st.booleans(),
    batch=st.integers(1, 6),
    in_flight=st.integers(1, 4),
)
def test_every_element_lands_and_per_key_order_holds(  # noqa: PLR0917 - hypothesis arguments
    elements, answers, rng_bits, checkpoints, ordered, batch, in_flight
):
    entries = [(key, seq, value) for seq, (key, value) in enumerate(elements)]
    hints = config(
        max_batch_size=batch,
        max_in_flight_requests=in_flight,
        max_buffered_requests=batch + 3,
        max_retries_per_entry=None,
        ordering_key=(lambda entry: entry[0]) if ordered else None,
    )
    landed = []
    writer = ScriptedWriter(hints, converter=lambda element, context: element)
    install(writer, answers, rng_bits)
    try:
        for index, entry in enumerate(entries):
            if index in checkpoints:
                writer.flush(False)
                states = writer.snapshot_state(index)
                landed += writer.landed
                writer.close()
                writer = ScriptedWriter(hints, states=states)
                install(writer, answers, rng_bits)
            writer.write(entry, None)
        writer.flush(True)
        landed += writer.landed
    finally:
        writer.close()
    assert sorted(map(tuple, landed)) == sorted(entries)
    if ordered:
        for key in range(5):
            seqs = [entry[1] for entry in map(tuple, landed) if entry[0] == key]
            assert seqs == sorted(seqs), f"key {key} landed out of order: {seqs}"


@settings(deadline=None)
@given(
    restored=st.lists(st.integers(0, 120), min_size=1, max_size=25),
    written=st.lists(st.integers(0, 60), max_size=25),
    record_limit=st.integers(1, 100),
    batch_slack=st.integers(0, 100),
    batch=st.integers(1, 6),
)
def test_restored_state_meets_todays_limits_and_no_batch_exceeds_the_byte_limit(
    restored, written, record_limit, batch_slack, batch
):
    """State written under other limits is refused at construction (as Flink) or sent
    in batches within ``max_batch_size_in_bytes`` - never one above it."""
    sizes = dict(enumerate(restored + written))
    state = BufferedRequestState([RequestEntryWrapper(i, size) for i, size in enumerate(restored)])
    max_bytes = record_limit + batch_slack
    hints = config(
        max_batch_size=batch,
        max_batch_size_in_bytes=max_bytes,
        max_record_size_in_bytes=record_limit,
        rate_limiting_strategy=None,
    )
    too_big = [size for size in restored if size > record_limit]
    if too_big:
        expected = (
            f"size [{too_big[0]}], when the max_record_size_in_bytes was set to [{record_limit}]"
        )
        with pytest.raises(SinkConfigurationError, match=re.escape(expected)):
            ScriptedWriter(hints, states=[state])
        return
    writer = ScriptedWriter(hints, states=[state])
    writer.sizes = {i: size for i, size in sizes.items() if i >= len(restored)}
    writer.handle_dead_letters = lambda letters: None  # written entries above the limit
    try:
        for i in range(len(restored), len(sizes)):
            writer.write(i, None)
        writer.flush(True)
    finally:
        writer.close()
    assert all(sum(sizes[entry] for entry in sent) <= max_bytes for sent in writer.batches)
    deliverable = [i for i, size in sizes.items() if i < len(restored) or size <= record_limit]
    assert sorted(writer.landed) == deliverable
