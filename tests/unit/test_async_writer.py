"""`AsyncSinkWriter`: the themes of Flink's ``AsyncSinkWriter{,Timeout,Throttling}Test``.

Each test is named after the behaviour it pins. Where we deliberately differ
from Flink (retry order, metrics counting deliveries, backoff, budget) the test
says so.
"""

import asyncio
import threading
import time

import pytest

from sinkv2.asyncsink import (
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    DeadLetter,
    ErrorVerdict,
    ExponentialBackoff,
    RequestEntryWrapper,
    default_error_verdict,
)
from sinkv2.errors import (
    FatalDestinationError,
    RequestTimeoutError,
    RetryableError,
    SinkConfigurationError,
    SinkDefinitionError,
    ThrottledError,
    UndeliverableEntriesError,
)
from tests.unit.async_writers import ManualClock, ScriptedWriter, config, wall_clock

WAIT_S = 60  # for what must happen: a loaded machine slows a test, it does not fail it


def run_in_thread(target):
    done = threading.Event()
    failure = []

    def body():
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            failure.append(error)
        finally:
            done.set()

    threading.Thread(target=body, daemon=True).start()
    return done, failure


TIMED = {"max_batch_size": 10, "max_buffered_requests": 20, "max_time_in_buffer_ms": 100}


@pytest.fixture
def writers():
    made = []

    def make(*args, **kwargs):
        writer = ScriptedWriter(*args, **kwargs)
        made.append(writer)
        return writer

    yield make
    for writer in made:
        if writer.gate is not None:
            writer.gate.set()
        writer.close()


# -- batching --------------------------------------------------------------------------


def test_number_of_records_a_multiple_of_batch_size_goes_out_in_full_batches(writers):
    writer = writers(config(max_batch_size=5))
    writer.write_all(range(25))
    writer.flush(False)
    assert [len(batch) for batch in writer.batches] == [5] * 5
    assert writer.landed == list(range(25))


def test_end_of_input_sends_the_last_partial_batch(writers):
    writer = writers(config(max_batch_size=5))
    writer.write_all(range(23))
    writer.flush(True)
    assert [len(batch) for batch in writer.batches] == [5, 5, 5, 5, 3]
    assert writer.landed == list(range(23))


def test_byte_threshold_met_before_count_threshold_makes_a_smaller_batch(writers):
    writer = writers(config(max_batch_size=10, max_batch_size_in_bytes=30))
    writer.sizes = dict.fromkeys(range(100), 10)
    writer.write_all(range(9))
    writer.flush(True)
    assert [len(batch) for batch in writer.batches] == [3, 3, 3]


def test_a_batch_may_be_exactly_the_byte_limit(writers):
    writer = writers(
        config(max_batch_size=10, max_batch_size_in_bytes=20, max_record_size_in_bytes=20)
    )
    writer.sizes = {0: 20, 1: 5, 2: 15}
    writer.write_all(range(3))
    writer.flush(True)
    assert writer.batches == [[0], [1, 2]]


def test_count_and_byte_thresholds_met_at_once_flush_once(writers):
    writer = writers(config(max_batch_size=4, max_batch_size_in_bytes=4))
    writer.write_all(range(4))
    writer.flush(False)
    assert writer.batches == [[0, 1, 2, 3]]
    assert writer.buffered() == []


def test_nothing_is_sent_below_every_threshold(writers):
    writer = writers(config(max_batch_size=5))
    writer.write_all(range(4))
    writer.flush(False)
    assert writer.batches == []
    assert writer.buffered() == [0, 1, 2, 3]


# -- validation ------------------------------------------------------------------------


def test_max_buffered_requests_must_be_strictly_greater_than_max_batch_size():
    with pytest.raises(SinkConfigurationError, match="'max_buffered_requests' must be greater"):
        AsyncSinkWriterConfiguration(max_batch_size=10, max_buffered_requests=10)


def test_max_record_size_must_not_exceed_max_batch_size_in_bytes():
    with pytest.raises(
        SinkConfigurationError, match=r"max_batch_size_in_bytes=10, max_record_size_in_bytes=11"
    ):
        AsyncSinkWriterConfiguration(max_batch_size_in_bytes=10, max_record_size_in_bytes=11)


@pytest.mark.parametrize(
    ("hint", "value"),
    [
        ("max_batch_size", 0),
        ("max_in_flight_requests", -1),
        ("max_buffered_requests", 2.5),
        ("max_time_in_buffer_ms", True),
        ("request_timeout_ms", "10s"),
        ("max_retries_per_entry", 0),
    ],
)
def test_a_bad_hint_names_itself_and_what_arrived(hint, value):
    with pytest.raises(SinkConfigurationError) as raised:
        AsyncSinkWriterConfiguration(**{hint: value})
    message = str(raised.value)
    assert repr(hint) in message
    assert repr(value) in message
    assert type(value).__name__ in message


def test_fail_on_timeout_must_be_a_bool():
    with pytest.raises(SinkConfigurationError, match="'fail_on_timeout' must be True or False"):
        AsyncSinkWriterConfiguration(fail_on_timeout="yes")


def test_a_rate_limiting_strategy_must_implement_the_protocol():
    with pytest.raises(SinkConfigurationError, match=r"lacks .*should_block"):
        AsyncSinkWriterConfiguration(rate_limiting_strategy=object())


def test_a_record_bigger_than_the_maximum_is_undeliverable_and_named(writers):
    writer = writers(config(max_record_size_in_bytes=100))
    writer.sizes = {7: 101}
    writer.write_all(range(7))
    with pytest.raises(
        UndeliverableEntriesError,
        match=r"7 of type int \(101 bytes, larger than max_record_size_in_bytes=100\)",
    ):
        writer.write(7, None)


def test_a_dead_letter_hook_takes_oversize_records_and_the_writer_goes_on(writers):
    class Collecting(ScriptedWriter):
        def handle_dead_letters(self, dead_letters):
            self.dead = getattr(self, "dead", []) + list(dead_letters)

    writer = Collecting(config(max_record_size_in_bytes=100))
    try:
        writer.sizes = {3: 500}
        writer.write_all(range(6))
        writer.flush(True)
        assert writer.landed == [0, 1, 2, 4, 5]
        assert [letter.request_entry for letter in writer.dead] == [3]
        assert writer.dead[0].attempts == 0
    finally:
        writer.close()


def test_a_bad_element_converter_is_refused():
    with pytest.raises(SinkDefinitionError, match="element_converter must have apply"):
        ScriptedWriter(converter=42)


def test_element_converter_open_is_invoked_with_the_writer_context():
    opened = []

    class Converter:
        def open(self, context):
            opened.append(context)

        def apply(self, element, context):
            return element * 10

    writer = ScriptedWriter(converter=Converter())
    try:
        writer.write_all([1, 2])
        writer.flush(True)
        assert opened == [writer.init_context]
        assert writer.landed == [10, 20]
    finally:
        writer.close()


# -- snapshots and state ---------------------------------------------------------------


def test_unwritten_records_in_the_buffer_are_in_the_snapshot(writers):
    writer = writers(config(max_batch_size=10, max_buffered_requests=20))
    writer.write_all(range(7))
    writer.flush(False)
    [state] = writer.snapshot_state(1)
    assert [w.request_entry for w in state.buffered_request_entries] == list(range(7))
    assert state.get_state_size() == 7


def test_snapshots_before_and_after_an_automatic_flush(writers):
    writer = writers(config(max_batch_size=3))
    writer.write_all(range(2))
    assert writer.buffered() == [0, 1]
    writer.write(2, None)
    writer.flush(False)
    assert writer.buffered() == []
    writer.write_all([3, 4])
    assert writer.buffered() == [3, 4]


def test_snapshot_after_a_manual_flush_is_empty(writers):
    writer = writers(config(max_batch_size=10, max_buffered_requests=20))
    writer.write_all(range(4))
    writer.flush(True)
    assert writer.buffered() == []
    assert writer.landed == [0, 1, 2, 3]


def test_restore_from_multiple_states_requeues_them_all_in_order(writers):
    states = [
        BufferedRequestState([RequestEntryWrapper(i, 1) for i in range(start, start + 3)])
        for start in (0, 10, 20)
    ]
    writer = writers(config(max_batch_size=4), states=states)
    assert writer.buffered() == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    writer.flush(True)
    assert writer.landed == [0, 1, 2, 10, 11, 12, 20, 21, 22]


def test_a_writer_restored_with_state_has_its_buffer_timer_registered(writers):
    clock = ManualClock()
    states = [BufferedRequestState([RequestEntryWrapper(1, 1), RequestEntryWrapper(2, 1)])]
    writer = writers(config(max_time_in_buffer_ms=100), clock=clock, states=states)
    clock.now += 100
    assert writer.timers.fire_due_timers() == 1
    writer.flush(False)
    assert writer.landed == [1, 2]


def test_entries_waiting_for_a_retry_are_in_the_snapshot_before_the_buffer(writers):
    clock = ManualClock()
    backoff = ExponentialBackoff(initial_ms=1_000, max_ms=1_000)
    writer = writers(config(max_batch_size=2, retry_backoff=backoff), clock=clock)
    writer.retry = lambda batch: batch if batch == [0, 1] else []
    writer.write_all(range(3))
    writer.flush(False)
    assert writer.buffered() == [0, 1, 2]
    [state] = writer.snapshot_state(1)
    assert [w.attempts for w in state.buffered_request_entries] == [1, 1, 0]


# -- flush semantics -------------------------------------------------------------------


def test_flush_false_does_not_send_buffered_entries(writers):
    writer = writers(config(max_batch_size=5))
    writer.write_all(range(3))
    writer.flush(False)
    assert writer.batches == []


def test_flush_false_waits_for_requests_in_flight_and_keeps_the_buffer(writers):
    writer = writers(config(max_batch_size=2))
    writer.gate = threading.Event()
    writer.write_all(range(3))
    assert writer.started.wait(WAIT_S)
    done, failure = run_in_thread(lambda: writer.flush(False))
    assert not done.wait(0.2), "flush(False) returned while a request was in flight"
    writer.gate.set()
    assert done.wait(WAIT_S)
    assert not failure
    assert writer.landed == [0, 1]
    assert writer.buffered() == [2]


def test_flushing_an_empty_buffer_is_fine(writers):
    writer = writers()
    writer.flush(False)
    writer.flush(True)
    assert writer.batches == []
    assert writer.snapshot_state(1) == [BufferedRequestState.empty_state()]


# -- retries and ordering --------------------------------------------------------------


def test_retryable_failures_do_not_lose_records(writers):
    writer = writers(config(max_batch_size=4, max_in_flight_requests=3))
    seen = set()

    def fail_every_first_attempt_of_odd_entries(batch):
        retry = [entry for entry in batch if entry % 2 and entry not in seen]
        seen.update(retry)
        return retry

    writer.retry = fail_every_first_attempt_of_odd_entries
    writer.write_all(range(40))
    writer.flush(True)
    assert sorted(writer.landed) == list(range(40))
    assert len(writer.landed) == 40


def test_retried_entries_go_back_to_the_head_in_their_original_order(writers):
    # Flink's testThatIntermittentlyFailingEntriesAreEnqueuedOnToTheBufferWithCorrectOrder
    # asserts [..., 228, 225, ...]: Flink reverses them. We keep input order.
    writer = writers(config(max_batch_size=4))
    writer.retry = lambda batch: [batch[3], batch[0]] if batch == [225, 226, 227, 228] else []
    writer.write_all([225, 226, 227, 228])
    writer.flush(False)
    writer.write_all([1, 2])
    writer.flush(True)
    assert writer.batches == [[225, 226, 227, 228], [225, 228, 1, 2]]


def test_failed_entries_are_retried_in_the_next_request_when_the_buffer_fills(writers):
    writer = writers(config(max_batch_size=3))
    writer.retry = lambda batch: [batch[1]] if batch == [0, 1, 2] else []
    writer.write_all(range(3))
    writer.flush(False)
    writer.write_all([3, 4])
    writer.flush(False)
    assert writer.batches[1] == [1, 3, 4]


def test_failed_entries_count_toward_the_buffer_size_with_their_size(writers):
    writer = writers(config(max_batch_size=3))
    writer.sizes = {0: 7, 1: 11, 2: 13}
    writer.retry = lambda batch: [batch[1]] if batch == [0, 1, 2] else []
    writer.write_all(range(3))
    writer.flush(False)
    [state] = writer.snapshot_state(1)
    assert state.get_state_size() == 11


def test_retries_wait_an_exponential_backoff_by_processing_time(writers):
    clock = ManualClock()
    backoff = ExponentialBackoff(initial_ms=400, max_ms=400)
    writer = writers(config(max_batch_size=2, retry_backoff=backoff), clock=clock)
    writer.retry = lambda batch: batch if len(writer.batches) == 1 else []
    writer.write_all([0, 1])
    writer.flush(False)
    writer.write_all([2, 3])
    writer.flush(False)
    assert writer.batches == [[0, 1], [2, 3]], "retries went out before their backoff"
    clock.now += 400
    writer.flush(True)
    assert writer.batches[-1] == [0, 1]
    assert sorted(writer.landed) == [0, 1, 2, 3]


def test_backoff_is_full_jitter_below_a_growing_cap():
    import random

    backoff = ExponentialBackoff(initial_ms=100, max_ms=1_000, multiplier=2)
    rng = random.Random(7)
    for retry, cap in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1_000), (40, 1_000)]:
        delays = [backoff.delay_ms(retry, rng) for _ in range(200)]
        assert min(delays) >= 0
        assert max(delays) <= cap
        assert max(delays) > cap / 2


def test_an_entry_out_of_retry_budget_is_undeliverable_with_its_story(writers):
    writer = writers(config(max_retries_per_entry=3))
    writer.retry = lambda batch: [entry for entry in batch if entry == 2]
    writer.write_all(range(3))
    with pytest.raises(UndeliverableEntriesError) as raised:
        writer.flush(True)
    [letter] = raised.value.dead_letters
    assert letter.request_entry == 2
    assert letter.attempts == 4
    assert "after 4 failed attempts" in str(raised.value)
    assert "the destination asked to retry it" in str(raised.value)
    assert sorted(writer.landed) == [0, 1]
    with pytest.raises(UndeliverableEntriesError):
        writer.write(5, None)


def test_a_dead_letter_hook_takes_entries_out_of_budget(writers):
    taken: list[DeadLetter[int]] = []

    class Collecting(ScriptedWriter):
        def handle_dead_letters(self, dead_letters):
            taken.extend(dead_letters)

    writer = Collecting(config(max_retries_per_entry=2))
    try:
        writer.errors = [ConnectionResetError("peer went away")] * 3
        writer.write_all(range(2))
        writer.flush(True)
        writer.write_all(range(10, 12))
        writer.flush(True)
    finally:
        writer.close()
    assert [letter.request_entry for letter in taken] == [0, 1]
    assert isinstance(taken[0].error, ConnectionResetError)
    assert writer.landed == [10, 11]


def test_throttling_does_not_spend_the_retry_budget_and_waits_retry_after(writers):
    writer = writers(config(max_batch_size=2, max_retries_per_entry=1), clock=wall_clock)
    writer.errors = [ThrottledError("slow down", retry_after_ms=100) for _ in range(3)]
    started = time.monotonic()
    writer.write_all([0, 1])
    writer.flush(True)
    assert time.monotonic() - started >= 0.3
    assert writer.landed == [0, 1]
    assert writer.metrics()["numRecordsSendErrors"] == 6


def test_per_key_order_holds_across_retries_with_an_ordering_key(writers):
    # Entries are key * 1000 + sequence; the destination fails every entry once.
    writer = writers(
        config(max_batch_size=4, max_in_flight_requests=4, ordering_key=lambda entry: entry // 1000)
    )
    failed_once = set()

    def fail_first_attempts(batch):
        retry = [entry for entry in batch if entry not in failed_once]
        failed_once.update(retry)
        return retry

    writer.retry = fail_first_attempts
    entries = [key * 1000 + seq for seq in range(5) for key in range(3)]
    writer.write_all(entries)
    writer.flush(True)
    for key in range(3):
        assert [e for e in writer.landed if e // 1000 == key] == [key * 1000 + s for s in range(5)]
    for batch in writer.batches:
        keys = [entry // 1000 for entry in batch]
        assert len(keys) == len(set(keys)), f"two entries of one key in a batch: {batch}"


def test_an_ordering_key_keeps_one_entry_per_key_in_flight(writers):
    writer = writers(
        config(max_batch_size=5, max_in_flight_requests=5, ordering_key=lambda e: e % 2)
    )
    writer.gate = threading.Event()
    writer.write_all(range(5))
    assert writer.started.wait(WAIT_S)
    time.sleep(0.05)
    assert writer.batches == [[0, 1]]
    writer.gate.set()
    writer.flush(True)
    assert writer.landed == [0, 1, 2, 3, 4]


# -- errors, timeouts ------------------------------------------------------------------


def test_a_fatal_error_fails_the_writer_with_the_cause_and_keeps_failing(writers):
    writer = writers(config(max_batch_size=2))
    writer.errors = [ValueError("bad payload")]
    writer.write_all([0, 1])
    with pytest.raises(FatalDestinationError, match="bad payload") as raised:
        writer.flush(True)
    assert isinstance(raised.value.__cause__, ValueError)
    assert "first: 0" in str(raised.value)
    with pytest.raises(FatalDestinationError):
        writer.write(2, None)


def test_connection_errors_and_retryable_errors_are_retried(writers):
    writer = writers(config(max_batch_size=2))
    writer.errors = [ConnectionRefusedError("down"), RetryableError("busy"), TimeoutError()]
    writer.write_all([0, 1])
    writer.flush(True)
    assert writer.landed == [0, 1]
    assert len(writer.batches) == 4


def test_classify_error_override_decides(writers):
    class Lenient(ScriptedWriter):
        def classify_error(self, error):
            if isinstance(error, KeyError):
                return ErrorVerdict.RETRYABLE
            return super().classify_error(error)

    writer = Lenient(config(max_batch_size=1))
    try:
        writer.errors = [KeyError("shard moved")]
        writer.write_all([0])
        writer.flush(True)
        assert writer.landed == [0]
    finally:
        writer.close()


def test_default_error_verdicts():
    assert default_error_verdict(ThrottledError("x")) is ErrorVerdict.RETRYABLE
    assert default_error_verdict(RetryableError("x")) is ErrorVerdict.RETRYABLE
    assert default_error_verdict(ConnectionResetError()) is ErrorVerdict.RETRYABLE
    assert default_error_verdict(TimeoutError()) is ErrorVerdict.RETRYABLE
    assert default_error_verdict(FatalDestinationError("x")) is ErrorVerdict.FATAL
    assert default_error_verdict(TypeError("bug")) is ErrorVerdict.FATAL


def test_retrying_an_entry_not_in_the_batch_is_a_definition_error(writers):
    writer = writers(config(max_batch_size=2))
    writer.retry = lambda batch: [99]
    writer.write_all([0, 1])
    with pytest.raises(SinkDefinitionError, match="asked to retry 99 of type int, which is not in"):
        writer.flush(True)


class FirstAttemptHangs(ScriptedWriter):
    """The first request waits until it is cancelled; later ones answer at once.

    An answer that needs no await cannot lose a race with the request timeout, so
    only the hung attempt times out, however loaded the machine.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cancelled = threading.Event()

    async def submit_request_entries(self, request_entries):
        if self.batches:
            return await super().submit_request_entries(request_entries)
        self.batches.append(list(request_entries))
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        self.landed.extend(request_entries)  # never reached: the late answer would land
        return []


def test_a_request_that_times_out_is_retried_and_its_late_result_ignored():
    writer = FirstAttemptHangs(config(max_batch_size=2, request_timeout_ms=50))
    try:
        writer.write_all([0, 1])
        writer.flush(True)
        assert writer.cancelled.wait(WAIT_S), "the timed-out attempt must be cancelled"
        assert writer.landed == [0, 1], "the timed-out attempt must not land"
        assert writer.batches == [[0, 1], [0, 1]]
    finally:
        writer.close()


def test_a_request_that_times_out_fails_the_writer_with_fail_on_timeout(writers):
    writer = writers(config(max_batch_size=2, request_timeout_ms=50, fail_on_timeout=True))
    writer.gate = threading.Event()  # the request is answered only after the test
    writer.write_all([0, 1])
    with pytest.raises(RequestTimeoutError, match="request_timeout_ms=50"):
        writer.flush(True)


def test_a_request_answered_before_the_timeout_is_not_retried(writers):
    # A timeout no loaded machine reaches: the test never waits for it.
    writer = writers(config(max_batch_size=2, request_timeout_ms=600_000))
    writer.latency_s = 0.05
    writer.write_all([0, 1])
    writer.flush(True)
    assert writer.batches == [[0, 1]]


# -- timers ----------------------------------------------------------------------------


def test_a_batch_smaller_than_max_is_flushed_when_the_buffer_timer_expires(writers):
    clock = ManualClock()
    writer = writers(
        config(max_batch_size=10, max_buffered_requests=20, max_time_in_buffer_ms=100), clock=clock
    )
    writer.write_all([0, 1])
    clock.now += 99
    assert writer.timers.fire_due_timers() == 0
    clock.now += 1
    assert writer.timers.fire_due_timers() == 1
    writer.flush(False)
    assert writer.batches == [[0, 1]]


def test_the_time_based_batch_picks_up_everything_buffered_until_expiry(writers):
    clock = ManualClock()
    writer = writers(
        config(max_batch_size=10, max_buffered_requests=20, max_time_in_buffer_ms=100), clock=clock
    )
    writer.write(0, None)
    clock.now += 60
    writer.write_all([1, 2])
    clock.now += 40
    writer.timers.fire_due_timers()
    writer.flush(False)
    assert writer.batches == [[0, 1, 2]]


def test_one_and_only_one_timer_is_registered_per_buffer_fill(writers):
    clock = ManualClock()
    writer = writers(
        config(max_batch_size=10, max_buffered_requests=20, max_time_in_buffer_ms=100), clock=clock
    )
    registered = []
    register = writer.timers.register_timer
    writer.timers.register_timer = lambda ts, cb: registered.append(ts) or register(ts, cb)
    writer.write_all(range(5))
    assert registered == [clock.now + 100]


def test_after_a_timer_expires_a_new_one_is_registered_for_the_next_fill(writers):
    clock = ManualClock()
    writer = writers(
        config(max_batch_size=10, max_buffered_requests=20, max_time_in_buffer_ms=100), clock=clock
    )
    writer.write(0, None)
    clock.now += 100
    writer.timers.fire_due_timers()
    writer.flush(False)
    writer.write(1, None)
    assert writer.timers.next_timer_timestamp() == clock.now + 100
    clock.now += 100
    writer.timers.fire_due_timers()
    writer.flush(False)
    assert writer.batches == [[0], [1]]


def test_a_retry_whose_backoff_ended_goes_out_by_the_buffer_timer_without_new_input(writers):
    # Flink puts failed entries back in the buffer, where the buffer timer sends them
    # within max_time_in_buffer_ms; a retry that waited a backoff first must too.
    clock = ManualClock()
    backoff = ExponentialBackoff(initial_ms=100, max_ms=100)
    writer = writers(config(**TIMED, retry_backoff=backoff), clock=clock)
    writer.retry = lambda batch: batch if len(writer.batches) == 1 else []
    writer.write_all([0, 1, 2])
    clock.now += 100
    writer.timers.fire_due_timers()
    writer.flush(False)
    assert writer.batches == [[0, 1, 2]]
    clock.now += 100
    writer.timers.fire_due_timers()
    assert writer.batches == [[0, 1, 2]], "a retry went out before max_time_in_buffer_ms"
    clock.now += 100
    writer.timers.fire_due_timers()
    writer.flush(False)
    assert writer.batches == [[0, 1, 2], [0, 1, 2]]
    assert writer.landed == [0, 1, 2]


def test_the_buffer_timer_does_not_wait_out_a_retrys_backoff_with_an_ordering_key(writers):
    clock = ManualClock()
    writer = writers(config(**TIMED, ordering_key=lambda entry: entry % 10), clock=clock)
    writer.errors = [ThrottledError("slow down", retry_after_ms=10_000)]
    writer.write_all([0])
    clock.now += 100
    writer.timers.fire_due_timers()
    writer.flush(False)  # 0 waits out its Retry-After; key 0 waits with it
    writer.write_all([10, 1])
    clock.now += 100
    done, failure = run_in_thread(writer.timers.fire_due_timers)
    assert done.wait(WAIT_S), "the buffer timer held the writer until the Retry-After ended"
    assert not failure
    writer.flush(False)
    assert writer.batches == [[0], [1]]
    assert writer.buffered() == [0, 10]
    clock.now += 10_000
    writer.flush(True)
    assert writer.landed == [1, 0, 10]


def test_close_cancels_the_timer_of_a_waiting_retry(writers):
    clock = ManualClock()
    backoff = ExponentialBackoff(initial_ms=100, max_ms=100)
    writer = writers(config(max_batch_size=2, retry_backoff=backoff), clock=clock)
    writer.retry = lambda batch: batch
    writer.write_all([0, 1])
    writer.flush(False)
    writer.close()
    clock.now += 10_000
    assert writer.timers.fire_due_timers() == 0


# -- concurrency, back pressure, rate limiting -----------------------------------------


def test_write_blocks_while_the_buffer_is_full_and_resumes_when_a_request_completes(writers):
    writer = writers(config(max_batch_size=2, max_buffered_requests=4))
    writer.gate = threading.Event()
    done, failure = run_in_thread(lambda: writer.write_all(range(10)))
    assert not done.wait(0.3), "write did not block on a full buffer"
    assert len(writer.buffered()) <= 4
    writer.gate.set()
    assert done.wait(WAIT_S)
    assert not failure
    writer.flush(True)
    assert sorted(writer.landed) == list(range(10))


def test_requests_in_flight_never_exceed_max_in_flight_requests(writers):
    writer = writers(config(max_batch_size=2, max_in_flight_requests=3, max_buffered_requests=100))
    writer.latency_s = 0.01
    writer.write_all(range(200))
    writer.flush(True)
    assert writer.max_concurrent <= 3
    assert sorted(writer.landed) == list(range(200))


def test_failures_halve_the_batch_size_aimd(writers):
    # Flink's AsyncSinkWriterThrottlingTest: a failed request halves the in-flight limit.
    writer = writers(
        config(max_batch_size=8, max_in_flight_requests=1, rate_limiting_strategy=None)
    )
    writer.retry = lambda batch: batch[-1:] if len(writer.batches) == 1 else []
    writer.write_all(range(8))
    writer.flush(False)
    assert writer._rate_limiter.get_max_batch_size() == 4
    writer.write_all(range(8, 16))
    writer.flush(True)
    assert [len(b) for b in writer.batches[:2]] == [8, 4]
    assert sorted(writer.landed) == list(range(16))


def test_a_rate_limiter_that_blocks_with_nothing_in_flight_is_reported_not_a_hang(writers):
    class Never:
        def register_in_flight_request(self, request_info):
            pass

        def register_completed_request(self, result_info):
            pass

        def should_block(self, request_info):
            return True

        def get_max_batch_size(self):
            return 5

    writer = writers(config(rate_limiting_strategy=Never()))
    writer.write_all(range(4))
    with pytest.raises(
        SinkConfigurationError, match="blocks a batch of 4 entries while no request"
    ):
        writer.flush(True)


def test_each_writer_works_on_its_own_copy_of_the_rate_limiting_strategy(writers):
    from sinkv2.asyncsink import AIMDScalingStrategy, CongestionControlRateLimitingStrategy

    strategy = CongestionControlRateLimitingStrategy(
        max_in_flight_requests=1,
        initial_max_in_flight_messages=5,
        scaling_strategy=AIMDScalingStrategy(rate_threshold=50),
    )
    first = writers(config(rate_limiting_strategy=strategy))
    first.write_all(range(5))
    first.flush(False)
    assert strategy.max_in_flight_messages == 5
    assert first._rate_limiter is not strategy


# -- metrics and lifecycle -------------------------------------------------------------


def test_metrics_count_delivered_records_and_bytes_and_failed_attempts(writers):
    writer = writers(config(max_batch_size=5))
    writer.sizes = {i: 10 for i in range(10)}
    writer.retry = lambda batch: [batch[0]] if len(writer.batches) == 1 else []
    writer.write_all(range(10))
    writer.flush(True)
    metrics = writer.metrics()
    assert metrics["numRecordsSend"] == 10  # Flink would say 11: it counts attempts
    assert metrics["numBytesSend"] == 100
    assert metrics["numRecordsSendErrors"] == 1


def test_current_send_time_is_the_last_request_duration(writers):
    writer = writers(config(max_batch_size=2))
    writer.latency_s = 0.05
    writer.write_all([0, 1])
    writer.flush(True)
    assert 40 <= writer.metrics()["currentSendTime"] < 2_000


def test_close_closes_the_client_on_the_loop_and_stops_the_thread():
    writer = ScriptedWriter(config(max_batch_size=2))
    writer.write_all([0, 1])
    writer.flush(True)
    before = {t.name for t in threading.enumerate()}
    assert any(name.startswith("sinkv2-async") for name in before)
    writer.close()
    assert writer.client_events == ["open", "close"]
    assert not any(t.name.startswith("sinkv2-async-ScriptedWriter") for t in threading.enumerate())


def test_close_cancels_requests_still_in_flight():
    writer = ScriptedWriter(config(max_batch_size=2))
    writer.gate = threading.Event()
    writer.write_all([0, 1])
    assert writer.started.wait(WAIT_S)
    writer.close()
    assert writer.landed == []
    assert writer.client_events == ["open", "close"]


def test_a_writer_that_never_sent_starts_no_thread():
    writer = ScriptedWriter()
    writer.close()
    assert writer.client_events == []


def test_a_base_exception_in_a_request_fails_the_writer_instead_of_hanging(writers):
    class Stop(BaseException):
        pass

    writer = writers(config(max_batch_size=1))
    writer.errors = [Stop("not an Exception")]
    writer.write_all([0])
    with pytest.raises(FatalDestinationError, match="Stop: not an Exception"):
        writer.flush(True)


def test_flush_false_leaves_a_retry_that_fell_due_for_the_next_send(writers):
    clock = ManualClock()
    backoff = ExponentialBackoff(initial_ms=100, max_ms=100)
    writer = writers(config(max_batch_size=2, retry_backoff=backoff), clock=clock)
    writer.retry = lambda batch: batch if len(writer.batches) == 1 else []
    writer.write_all([0, 1])
    writer.flush(False)
    clock.now += 100
    writer.flush(False)
    assert writer.batches == [[0, 1]]
    assert writer.buffered() == [0, 1]
    writer.flush(True)
    assert writer.landed == [0, 1]


def test_close_while_the_client_is_still_opening_closes_it():
    opening = threading.Event()

    class SlowOpen(ScriptedWriter):
        async def open_client(self):
            self.client_events.append("open")
            opening.set()
            await asyncio.Event().wait()  # still opening when close() cancels it

    writer = SlowOpen(config(max_batch_size=1))
    writer.write_all([0])
    assert opening.wait(WAIT_S)
    writer.close()
    assert writer.client_events == ["open", "close"]
    assert writer.landed == []


@pytest.mark.parametrize("size", [1.5, None, "3", -1, True])
def test_a_size_that_is_not_an_int_is_a_definition_error(writers, size):
    class BadSize(ScriptedWriter):
        def get_size_in_bytes(self, request_entry):
            return size

    writer = BadSize()
    try:
        with pytest.raises(SinkDefinitionError, match="get_size_in_bytes must return an int"):
            writer.write(0, None)
    finally:
        writer.close()


def test_a_failed_open_client_is_tried_again_by_the_next_request(writers):
    class FlakyOpen(ScriptedWriter):
        async def open_client(self):
            self.client_events.append("open")
            if self.client_events.count("open") == 1:
                raise ConnectionRefusedError("not yet")

    writer = FlakyOpen(config(max_batch_size=1))
    try:
        writer.write_all([0])
        writer.flush(True)
        assert writer.landed == [0]
        assert writer.client_events == ["open", "open"]
    finally:
        writer.close()
    assert writer.client_events == ["open", "open", "close"]
