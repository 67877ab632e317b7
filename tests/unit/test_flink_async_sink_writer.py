"""Flink's ``AsyncSinkWriterTest`` (flink-connector-base), one test per Java test.

Each docstring names the Java test; the assertions are Flink's, translated. Where
sinkv2 deliberately differs (docs/howto/async-sink.md, "Differences from Flink's
async sink"), the test asserts sinkv2's behaviour and says which difference.
"""

import threading
import time

import pytest

from sinkv2.asyncsink import BufferedRequestState, RequestEntryWrapper
from sinkv2.errors import FatalDestinationError, SinkConfigurationError, UndeliverableEntriesError
from tests.unit.flink_async_writers import (
    WAIT_S,
    FlinkAsyncSinkWriterImpl,
    FlinkTestContext,
    assert_buffer_states_are_equal,
    flink_configuration,
)


@pytest.fixture
def context():
    return FlinkTestContext()


@pytest.fixture
def res():
    return []


def make(context, res, **hints):
    """``new AsyncSinkWriterImplBuilder().context(sinkInitContext)...build()``."""
    simulate_failures = hints.pop("simulate_failures", False)
    delay_ms = hints.pop("delay_ms", 0)
    states = hints.pop("states", ())
    converter = hints.pop("element_converter", None)
    extra = {"element_converter": converter} if converter is not None else {}
    return FlinkAsyncSinkWriterImpl(
        context,
        flink_configuration(**hints),
        res=res,
        simulate_failures=simulate_failures,
        delay_ms=delay_ms,
        states=states,
        **extra,
    )


def write_values(sink, values):
    for value in values:
        sink.write_value(str(value))


def perform_normal_write_of_eighty_records_to_mock(context, res):
    sink = make(context, res)
    write_values(sink, range(80))
    return sink


class CountingElementConverter:
    """Flink's ``TestElementConverter``: counts ``open`` calls."""

    def __init__(self):
        self.open_call_count = 0

    def open(self, context):
        self.open_call_count += 1

    def apply(self, element, context):
        return int(element)


def test_element_convert_open_is_invoked(context, res):
    """testElementConvertOpenIsInvoked"""
    converter = CountingElementConverter()
    assert converter.open_call_count == 0
    make(context, res, element_converter=converter)
    assert converter.open_call_count == 1


def test_number_of_records_is_a_multiple_of_batch_size_results_in_that_number_being_written(
    context, res
):
    """testNumberOfRecordsIsAMultipleOfBatchSizeResultsInThatNumberOfRecordsBeingWritten"""
    perform_normal_write_of_eighty_records_to_mock(context, res)
    assert len(res) == 80


def test_metrics_group_has_logged_number_of_records_and_number_of_bytes_correctly(context, res):
    """testMetricsGroupHasLoggedNumberOfRecordsAndNumberOfBytesCorrectly

    The last batch's answer is applied by the next writer call, in Flink by the
    next mailbox yield; ``flush(False)`` is that call here (metrics timing).
    """
    sink = perform_normal_write_of_eighty_records_to_mock(context, res)
    sink.flush(False)
    assert context.metric("numRecordsSend") == 80
    assert context.metric("numBytesSend") == 320
    assert context.metric("currentSendTime") >= 0
    assert context.metric("currentSendTime") < 1000


def test_check_logged_send_times_are_within_bounds(context, res):
    """checkLoggedSendTimesAreWithinBounds

    Flink's upper bound (< 120 ms for a 100 ms request) is a wall-clock race on a
    shared machine; the lower bound is what shows the gauge times the request.
    """
    sink = make(context, res, max_batch_size=4, delay_ms=100)
    write_values(sink, range(4))
    sink.flush(True)
    assert context.metric("currentSendTime") >= 99
    assert context.metric("currentSendTime") < 1000


def test_that_unwritten_records_in_buffer_are_persisted_when_snapshot_is_taken(context, res):
    """testThatUnwrittenRecordsInBufferArePersistedWhenSnapshotIsTaken"""
    sink = make(context, res)
    write_values(sink, range(23))
    assert len(res) == 20
    assert_buffer_states_are_equal(sink.wrap_requests(20, 21, 22), sink.writer_state())


def test_sink_to_allow_batch_sizes_equal_to_byte_wise_limit(context, res):
    """sinkToAllowBatchSizesEqualToByteWiseLimit"""
    sink = make(context, res, max_batch_size_in_bytes=12, max_record_size_in_bytes=4)
    sink.write_value("1")  # 4 bytes per record
    sink.write_value("2")  # to give 12 bytes in final flush
    sink.write_value("3")
    assert len(res) == 3


def test_preparing_commit_at_snapshot_time_ensures_buffered_records_are_persisted(context, res):
    """testPreparingCommitAtSnapshotTimeEnsuresBufferedRecordsArePersistedToDestination"""
    sink = make(context, res)
    write_values(sink, range(23))
    sink.flush(True)
    assert len(res) == 23


def test_that_mailbox_yield_does_not_block_while_a_timer_is_registered_and_has_yet_to_elapse(
    context, res
):
    """testThatMailboxYieldDoesNotBlockWhileATimerIsRegisteredAndHasYetToElapse"""
    sink = make(context, res)
    sink.write_value("0")
    sink.flush(True)
    assert len(res) == 1


def test_that_snapshots_are_taken_of_buffer_correctly_before_and_after_automatic_flush(
    context, res
):
    """testThatSnapshotsAreTakenOfBufferCorrectlyBeforeAndAfterAutomaticFlush"""
    sink = make(context, res, max_batch_size=3)
    sink.write_value("25")
    sink.write_value("55")
    assert_buffer_states_are_equal(sink.wrap_requests(25, 55), sink.writer_state())
    assert len(res) == 0
    sink.write_value("75")
    assert_buffer_states_are_equal(BufferedRequestState.empty_state(), sink.writer_state())
    assert len(res) == 3


def write_five_records_with_one_failing_then_call_prepare_commit_with_flushing(context, res):
    sink = make(context, res, max_batch_size=3)
    write_values(sink, [25, 55, 75, 95, 955])
    assert_buffer_states_are_equal(sink.wrap_requests(95, 955), sink.writer_state())
    sink.flush(True)
    assert_buffer_states_are_equal(BufferedRequestState.empty_state(), sink.writer_state())


def test_that_snapshots_are_taken_of_buffer_correctly_before_and_after_manual_flush(context, res):
    """testThatSnapshotsAreTakenOfBufferCorrectlyBeforeAndAfterManualFlush"""
    write_five_records_with_one_failing_then_call_prepare_commit_with_flushing(context, res)
    assert len(res) == 5


def test_metrics_are_logged_each_time_submit_request_entries_is_called(context, res):
    """metricsAreLoggedEachTimeSubmitRequestEntriesIsCalled"""
    write_five_records_with_one_failing_then_call_prepare_commit_with_flushing(context, res)
    assert context.metric("numRecordsSend") == 5
    assert context.metric("numBytesSend") == 20


def test_runtime_errors_in_submit_request_entries_end_up_as_io_exceptions(context, res):
    """testRuntimeErrorsInSubmitRequestEntriesEndUpAsIOExceptionsWithNumOfFailedRequests

    Differs (fatal error wrapping): the request runs on the writer's event loop, so
    the error surfaces at the writer's next call (here the one after ``135``), as
    `FatalDestinationError` whose cause is the sink's own ``RuntimeError``.
    """
    sink = make(context, res, max_batch_size=3, simulate_failures=True)
    write_values(sink, [25, 55, 75, 95, 35])
    sink.write_value("135")
    with pytest.raises(FatalDestinationError) as raised:
        sink.flush(False)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == (
        "Deliberate runtime exception occurred in SinkWriterImplementation."
    )
    assert len(res) == 3


def write_x_assert_destination_is_y_and_buffer_has_z(sink, res, x, y, z):
    sink.write_value(x)
    assert res == y
    assert_buffer_states_are_equal(sink.wrap_requests(*z), sink.writer_state())


def test_retryable_errors_do_not_violate_at_least_once_semantics_due_to_requeue_of_failures(
    context, res
):
    """testRetryableErrorsDoNotViolateAtLeastOnceSemanticsDueToRequeueOfFailures"""
    sink = make(
        context, res, max_batch_size=3, max_batch_size_in_bytes=10_000_000, simulate_failures=True
    )
    step = write_x_assert_destination_is_y_and_buffer_has_z
    step(sink, res, "25", [], [25])
    step(sink, res, "55", [], [25, 55])
    # 25, 55 persisted; 965 failed and in flight
    step(sink, res, "965", [25, 55], [])
    step(sink, res, "75", [25, 55, 965, 75], [])
    step(sink, res, "95", [25, 55, 965, 75], [95])
    step(sink, res, "955", [25, 55, 965, 75], [95, 955])
    step(sink, res, "550", [25, 55, 965, 75, 95], [])
    step(sink, res, "45", [25, 55, 965, 75, 95, 955, 550], [45])
    step(sink, res, "35", [25, 55, 965, 75, 95, 955, 550], [45, 35])
    step(sink, res, "535", [25, 55, 965, 75, 95, 955, 550, 45, 35], [])
    # Checkpoint occurs
    sink.flush(True)
    # Everything is saved
    assert res == [25, 55, 965, 75, 95, 955, 550, 45, 35, 535]
    assert sink.writer_state().get_state_size() == 0


def failed_entries_are_retried_in_the_next_possible_persist_request_and_no_later(sink, res):
    write_values(sink, [25, 55, 965, 75, 95, 955, 550, 645, 545, 535, 515, 505])
    sink.flush(True)
    assert res == [25, 55, 965, 75, 95, 955, 550, 645, 545, 535, 515, 505]


def test_failed_entries_are_retried_in_the_next_possible_persist_request_if_prepare_commit(
    context, res
):
    """testFailedEntriesAreRetriedInTheNextPossiblePersistRequestIfPrepareCommitIsTriggered"""
    sink = make(context, res, max_batch_size=3, simulate_failures=True)
    failed_entries_are_retried_in_the_next_possible_persist_request_and_no_later(sink, res)


def test_failed_entries_are_retried_in_the_next_possible_persist_request_if_buffer_fills(
    context, res
):
    """testFailedEntriesAreRetriedInTheNextPossiblePersistRequestIfBufferFillsToFull"""
    sink = make(
        context,
        res,
        max_batch_size=3,
        max_in_flight_requests=1,
        max_buffered_requests=8,
        simulate_failures=True,
    )
    failed_entries_are_retried_in_the_next_possible_persist_request_and_no_later(sink, res)


def test_that_max_buffer_size_of_sink_should_be_strictly_greater_than_max_size_of_each_batch(
    context, res
):
    """testThatMaxBufferSizeOfSinkShouldBeStrictlyGreaterThanMaxSizeOfEachBatch

    Same check; the message uses the Python names.
    """
    with pytest.raises(SinkConfigurationError) as raised:
        make(context, res, max_buffered_requests=10)
    assert isinstance(raised.value, ValueError)
    assert "'max_buffered_requests' must be greater than 'max_batch_size'" in str(raised.value)


def test_max_record_size_set_must_be_smaller_than_or_equal_to_max_batch_size(context, res):
    """maxRecordSizeSetMustBeSmallerThanOrEqualToMaxBatchSize"""
    with pytest.raises(SinkConfigurationError) as raised:
        make(
            context,
            res,
            max_buffered_requests=11,
            max_batch_size_in_bytes=10_000,
            max_record_size_in_bytes=10_001,
        )
    assert isinstance(raised.value, ValueError)
    assert "'max_batch_size_in_bytes' must be >= 'max_record_size_in_bytes'" in str(raised.value)


def test_records_written_to_the_sink_must_be_smaller_or_equal_to_max_record_size_in_bytes(
    context, res
):
    """recordsWrittenToTheSinkMustBeSmallerOrEqualToMaxRecordSizeInBytes

    Differs (dead letters): an oversized record is undeliverable and goes to
    ``handle_dead_letters``, whose default raises `UndeliverableEntriesError`
    (Flink: ``IllegalArgumentException``); an override may route it and go on.
    """
    sink = make(
        context,
        res,
        max_batch_size=3,
        max_buffered_requests=11,
        max_batch_size_in_bytes=10_000,
        max_record_size_in_bytes=3,
    )
    with pytest.raises(UndeliverableEntriesError) as raised:
        sink.write_value("3")
    assert "4 bytes, larger than max_record_size_in_bytes=3" in str(raised.value)
    assert [letter.request_entry for letter in raised.value.dead_letters] == [3]


def test_flush_threshold_met_before_batch_limit_will_create_a_smaller_batch_above_threshold(
    context, res
):
    """testFlushThresholdMetBeforeBatchLimitWillCreateASmallerBatchOfSizeAboveThreshold"""
    sink = make(context, res, max_batch_size_in_bytes=30, max_record_size_in_bytes=30)
    # A flush threshold of 30 bytes at 4 bytes an entry: a batch of 7 (28 bytes) goes
    # out once an 8th entry would make 32.
    for i in range(100):
        sink.write_value(str(i))
        assert len(res) == (i // 7) * 7


def test_prepare_commit_does_not_flush_elements_if_flush_is_set_to_false(context, res):
    """prepareCommitDoesNotFlushElementsIfFlushIsSetToFalse"""
    sink = make(context, res)
    write_values(sink, [0, 1, 2])
    sink.flush(False)
    assert len(res) == 0


def test_that_when_number_of_item_and_size_of_record_thresholds_are_met_simultaneously(
    context, res
):
    """testThatWhenNumberOfItemAndSizeOfRecordThresholdsAreMetSimultaneouslyAFlushOccurs"""
    sink = make(
        context, res, max_batch_size=7, max_batch_size_in_bytes=32, max_record_size_in_bytes=32
    )
    write_values(sink, range(7))
    assert len(res) == 7
    write_values(sink, range(7, 14))
    assert len(res) == 14


def test_that_intermittently_failing_entries_are_enqueued_on_to_the_buffer_with_correct_size(
    context, res
):
    """testThatIntermittentlyFailingEntriesAreEnqueuedOnToTheBufferWithCorrectSize"""
    sink = make(context, res, max_record_size_in_bytes=110, simulate_failures=True)
    sink.write_value("225")  # buffer: 100/110 B; 1/10 entries; 0 in flight
    sink.write_value("1")  # 104/110 B
    sink.write_value("2")  # 108/110 B
    sink.write_value("3")  # 112/110 B -- flushing
    assert len(res) == 2  # the request was [225, 1, 2]; 225 failed its first attempt
    sink.write_value("4")  # 8/110 B; 2/10 entries; 1 in flight
    sink.write_value("5")
    sink.write_value("6")
    sink.write_value("325")  # 116/110 B -- flushing
    # the request in flight is processed, buffer: [225, 3, 4, 5, 6, 325]
    assert res == [1, 2, 225, 3, 4]


def test_that_intermittently_failing_entries_are_enqueued_on_to_the_buffer_with_correct_order(
    context, res
):
    """testThatIntermittentlyFailingEntriesAreEnqueuedOnToTheBufferWithCorrectOrder"""
    sink = make(
        context,
        res,
        max_batch_size_in_bytes=210,
        max_record_size_in_bytes=110,
        simulate_failures=True,
    )
    sink.write_value("228")  # 100/210 B
    sink.write_value("225")  # 200/210 B
    sink.write_value("1")  # 204/210 B
    sink.write_value("2")  # 208/210 B
    sink.write_value("3")  # 212/210 B -- flushing
    assert len(res) == 2  # the request was [228, 225, 1, 2]; 228 and 225 failed
    sink.write_value("4")
    sink.write_value("5")
    sink.write_value("6")
    sink.write_value("328")  # 116/210 B
    sink.write_value("325")  # 216/210 B -- flushing
    # the requests in flight are processed, buffer: [228, 225, 3, 4, 5, 6, 328, 325]
    assert res == [1, 2, 228, 225, 3, 4]


def timed_sink(context, res, **hints):
    return make(
        context,
        res,
        **{
            "max_batch_size": 10,
            "max_in_flight_requests": 20,
            "max_batch_size_in_bytes": 10_000,
            "max_time_in_buffer_ms": 100,
            "max_record_size_in_bytes": 10_000,
            "simulate_failures": True,
            **hints,
        },
    )


def test_that_a_batch_with_size_smaller_than_max_batch_size_is_flushed_on_timeout_expiry(
    context, res
):
    """testThatABatchWithSizeSmallerThanMaxBatchSizeIsFlushedOnTimeoutExpiry"""
    sink = timed_sink(context, res)
    context.set_current_time(0, sink)
    write_values(sink, range(8))
    context.set_current_time(99, sink)
    assert len(res) == 0
    context.set_current_time(100, sink)
    assert len(res) == 8


def test_that_time_based_batch_picks_up_all_relevant_items_up_until_expiry_of_timer(context, res):
    """testThatTimeBasedBatchPicksUpAllRelevantItemsUpUntilExpiryOfTimer"""
    sink = timed_sink(context, res)
    for i in range(98):
        context.set_current_time(i, sink)
        sink.write_value(str(i))
    context.set_current_time(99, sink)
    assert len(res) == 90
    context.set_current_time(100, sink)
    assert len(res) == 98


def test_prepare_commit_flushes_inflight_elements_and_does_not_flush_if_flush_is_false(
    context, res
):
    """prepareCommitFlushesInflightElementsAndDoesNotFlushIfFlushIsSetToFalse"""
    sink = make(context, res, max_batch_size=8, max_buffered_requests=10, simulate_failures=True)
    sink.write_value("225")  # buffer: [225]
    sink.write_value("0")  # buffer: [225, 0]
    sink.write_value("1")  # buffer: [225, 0, 1]
    sink.write_value("2")  # buffer: [2], in flight: [225], destination: [0, 1]
    assert res == [0, 1]
    assert_buffer_states_are_equal(sink.wrap_requests(2), sink.writer_state())
    sink.flush(False)  # buffer: [225, 2], in flight: [], destination: [0, 1]
    assert res == [0, 1]
    assert_buffer_states_are_equal(sink.wrap_requests(225, 2), sink.writer_state())
    sink.flush(True)  # buffer: [], destination: [0, 1, 225, 2]
    assert res == [0, 1, 225, 2]


def test_that_intermittently_failing_entries_are_enqueued_on_to_the_buffer_after_snapshot(
    context, res
):
    """testThatIntermittentlyFailingEntriesAreEnqueuedOnToTheBufferAfterSnapshot"""
    sink = make(context, res, max_record_size_in_bytes=110, simulate_failures=True)
    write_values(sink, [225, 1, 2, 3])  # 112/110 B -- flushing
    assert len(res) == 2  # the request was [225, 1, 2]; 225 failed
    # buffer [3], [225] in flight
    sink.flush(False)  # buffer [225, 3]
    assert len(res) == 2
    states = sink.snapshot_state(1)
    new_sink = make(context, res, max_record_size_in_bytes=110, states=states)
    new_sink.write_value("4")  # 12 B in the new writer's sizes; 3/10 entries
    new_sink.write_value("5")
    assert res == [1, 2, 225, 3, 4]


def test_that_record_of_size_bigger_than_maximum_fails_sink_initialization(context, res):
    """testThatRecordOfSizeBiggerThanMaximumFailsSinkInitialization"""
    sink = make(context, res, max_record_size_in_bytes=110, simulate_failures=True)
    sink.write_value("225")  # buffer: 100/110 B
    sink.flush(False)
    states = sink.snapshot_state(1)
    with pytest.raises(SinkConfigurationError) as raised:
        make(context, res, max_record_size_in_bytes=15, states=states)
    assert isinstance(raised.value, ValueError)
    assert "size [100], when the max_record_size_in_bytes was set to [15]" in str(raised.value)


def test_restore_from_multiple_states(context, res):
    """testRestoreFromMultipleStates"""
    states = [
        BufferedRequestState([RequestEntryWrapper(i, 1) for i in (1, 2, 3)]),
        BufferedRequestState([RequestEntryWrapper(i, 1) for i in (4, 5)]),
        BufferedRequestState([RequestEntryWrapper(6, 1)]),
    ]
    sink = make(context, res, states=states)
    buffered_request_states = sink.snapshot_state(1)
    # after a snapshot, all entries are merged into a single BufferedRequestState
    assert len(buffered_request_states) == 1
    snapshot = buffered_request_states[0]
    assert len(snapshot.get_buffered_request_entries()) == 6
    assert snapshot.get_state_size() == 6
    assert sorted(w.get_request_entry() for w in snapshot.get_buffered_request_entries()) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]


def test_writer_initialized_with_state_has_callback_registered(context, res):
    """testWriterInitializedWithStateHasCallbackRegistered"""
    initial = timed_sink(context, res)
    assert len(res) == 0
    context.set_current_time(0, initial)
    write_values(initial, [1, 2, 3])
    context.set_current_time(10, initial)
    restored = timed_sink(context, res, max_time_in_buffer_ms=10, states=initial.snapshot_state(1))
    restored.write_value("4")
    context.set_current_time(30, restored)
    assert len(res) == 4


def test_that_one_and_only_one_callback_is_ever_registered(context, res):
    """testThatOneAndOnlyOneCallbackIsEverRegistered"""
    sink = timed_sink(context, res)
    context.set_current_time(0, sink)
    sink.write_value("1")  # a timer is registered here to elapse at t=100
    assert len(res) == 0
    context.set_current_time(10, sink)
    sink.flush(True)
    assert len(res) == 1
    context.set_current_time(20, sink)  # "2" must not register another timer
    sink.write_value("2")  # (which would elapse at t=120)
    assert len(res) == 1
    context.set_current_time(100, sink)
    assert len(res) == 2
    sink.write_value("3")
    context.set_current_time(199, sink)  # the third element is not written at 199:
    assert len(res) == 2  # no timer fired at 120
    context.set_current_time(200, sink)
    assert len(res) == 3


def test_that_intermittently_failing_entries_should_be_flushed_with_main_batch_in_time_flush(
    context, res
):
    """testThatIntermittentlyFailingEntriesShouldBeFlushedWithMainBatchInTimeBasedFlush"""
    sink = make(
        context,
        res,
        max_batch_size_in_bytes=10_000,
        max_time_in_buffer_ms=100,
        max_record_size_in_bytes=10_000,
        simulate_failures=True,
    )
    context.set_current_time(0, sink)
    write_values(sink, [1, 2, 225])
    context.set_current_time(100, sink)
    assert len(res) == 2
    write_values(sink, [3, 4])
    context.set_current_time(199, sink)
    assert len(res) == 2
    context.set_current_time(200, sink)
    assert len(res) == 5


def test_that_flushing_an_empty_buffer_does_not_result_in_error_or_failure(context, res):
    """testThatFlushingAnEmptyBufferDoesNotResultInErrorOrFailure"""
    sink = timed_sink(context, res)
    context.set_current_time(0, sink)
    sink.write_value("1")
    context.set_current_time(50, sink)
    sink.flush(True)
    assert len(res) == 1
    context.set_current_time(200, sink)


def test_that_on_expiry_of_an_old_timeout_a_new_one_may_be_registered_immediately(context, res):
    """testThatOnExpiryOfAnOldTimeoutANewOneMayBeRegisteredImmediately"""
    sink = timed_sink(context, res)
    context.set_current_time(0, sink)
    sink.write_value("1")
    context.set_current_time(100, sink)
    assert len(res) == 1
    sink.write_value("2")
    context.set_current_time(200, sink)
    assert len(res) == 2


def release_and_block_writer(context, res, max_in_flight_requests):
    """Flink's ``AsyncSinkReleaseAndBlockWriterImpl``: batches of 3 wait for a gate."""
    sink = make(
        context,
        res,
        max_batch_size=3,
        max_in_flight_requests=max_in_flight_requests,
        max_buffered_requests=20,
        max_batch_size_in_bytes=100,
        max_time_in_buffer_ms=100,
        max_record_size_in_bytes=100,
    )
    sink.gate = threading.Event()
    sink.block_batches_of = 3
    return sink


def write_two_elements_and_interleave_the_next_two(context, sink):
    """Flink's ``writeTwoElementsAndInterleaveTheNextTwoElements``.

    sinkv2's writer is called from one thread (Flink's mailbox thread): the batch
    ``[1, 2, 3]`` blocked in ``submit_request_entries`` plays Flink's blocked
    second thread, and the buffer timer at t=100 flushes ``4``.
    """
    context.set_current_time(0)
    for value in "123":
        sink.write_as_non_mailbox_thread(value)
    assert sink.request_started.wait(WAIT_S)  # [1, 2, 3] is in flight, blocked
    sink.write_as_non_mailbox_thread("4")
    context.clock.now = 100
    context.timers.fire_due_timers()


def test_that_interleaving_threads_may_block_each_other_but_do_not_cause_race_conditions(
    context, res
):
    """testThatInterleavingThreadsMayBlockEachOtherButDoNotCauseRaceConditions

    One request in flight at most: the timer's flush of ``4`` waits until the
    blocked batch returns (released 0.5 s later), so 1, 2, 3 land before 4.
    """
    sink = release_and_block_writer(context, res, 1)
    release = threading.Timer(0.5, sink.gate.set)
    release.start()
    write_two_elements_and_interleave_the_next_two(context, sink)
    release.join()
    sink.flush(True)
    assert res == [1, 2, 3, 4]


def test_that_if_one_interleaved_thread_is_blocked_the_other_will_continue_and_correctly_write(
    context, res
):
    """testThatIfOneInterleavedThreadIsBlockedTheOtherThreadWillContinueAndCorrectlyWrite

    Two requests in flight: the timer's flush sends ``[4]`` beside the blocked
    ``[1, 2, 3]``, which is released only once 4 landed, so 4 lands first.
    """
    sink = release_and_block_writer(context, res, 2)
    write_two_elements_and_interleave_the_next_two(context, sink)
    deadline = time.monotonic() + WAIT_S
    while res != [4] and time.monotonic() < deadline:
        time.sleep(0.001)
    sink.gate.set()
    sink.flush(True)
    assert res == [4, 1, 2, 3]


def test_if_the_number_of_uncompleted_in_flight_requests_is_too_many_then_block_in_flush(
    context, res
):
    """ifTheNumberOfUncompletedInFlightRequestsIsTooManyThenBlockInFlushMethod"""
    sink = release_and_block_writer(context, res, 1)
    for value in "123":
        sink.write_as_non_mailbox_thread(value)
    assert sink.request_started.wait(WAIT_S)
    flushed = threading.Event()
    flusher = threading.Thread(target=lambda: (sink.flush(True), flushed.set()))
    flusher.start()
    time.sleep(0.3)
    assert not flushed.is_set()  # flush blocks while the request is in flight
    sink.gate.set()
    flusher.join(WAIT_S)
    assert flushed.is_set()
    assert res == [1, 2, 3]
