"""Flink's ``SimpleBatchCreatorTest``, one test per Java test.

Flink's batch creator and request buffer are pluggable classes; sinkv2's batching
is the writer's own, so each case is driven through a writer: the buffer is
restored from state (entries with their sizes), ``max_batch_size`` plays the
``RequestInfo`` batch size, and one more write of a 1-byte ``"T"`` triggers the
send. With one request in flight, held on a gate, the first batch is the one
the creator made and the snapshot is what stayed in the buffer.
"""

import threading

from sinkv2.asyncsink import (
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    RequestEntryWrapper,
)
from tests.unit.async_writers import FixedLimits
from tests.unit.flink_async_writers import (
    ELEMENT_CONTEXT,
    FLINK_RETRIES_FOREVER,
    RecordingDestination,
)


def create_next_batch(max_batch_size_in_bytes, request_info_batch_size, entries):
    """Buffer ``entries`` (``(entry, size)``), send one batch, return (writer, batch, bytes)."""
    sizes = {**dict(entries), "T": 1}
    writer = RecordingDestination(
        AsyncSinkWriterConfiguration(
            max_batch_size=request_info_batch_size,
            max_buffered_requests=100,
            max_batch_size_in_bytes=max_batch_size_in_bytes,
            max_record_size_in_bytes=max_batch_size_in_bytes,
            max_in_flight_requests=1,
            rate_limiting_strategy=FixedLimits(1, request_info_batch_size),
            **FLINK_RETRIES_FOREVER,
        ),
        sizes=sizes,
        states=[BufferedRequestState([RequestEntryWrapper(e, s) for e, s in entries])],
    )
    writer.gate = threading.Event()
    writer.write("T", ELEMENT_CONTEXT)
    writer.wait_for_batches(1)
    batch = writer.batches[0]
    return writer, batch, sum(sizes[e] for e in batch)


def remaining(writer):
    """The buffer after the batch, without the trigger."""
    return [entry for entry in writer.buffered() if entry != "T"]


def release(writer):
    writer.gate.set()
    writer.flush(True)
    writer.close()


def test_creat_next_batch_with_empty_buffer():
    """testCreatNextBatchWithEmptyBuffer"""
    writer = RecordingDestination(
        AsyncSinkWriterConfiguration(
            max_batch_size=10,
            max_batch_size_in_bytes=100,
            max_record_size_in_bytes=100,
            rate_limiting_strategy=FixedLimits(1, 10),
        )
    )
    writer.flush(True)
    assert writer.batches == []
    assert writer.buffered() == []
    writer.close()


def test_create_next_batch_respects_batch_count_limit():
    """testCreateNextBatchRespectsBatchCountLimit"""
    entries = [(f"elem-{i}", 10) for i in range(10)]
    writer, batch, size = create_next_batch(100, 5, entries)
    # only 5 entries although the bytes would allow more
    assert len(batch) == 5
    assert size == 50
    assert len(remaining(writer)) == 5
    release(writer)


def test_create_next_batch_respect_size_limit():
    """testCreateNextBatchRespectSizeLimit"""
    writer, batch, size = create_next_batch(25, 10, [("A", 10), ("B", 10), ("C", 10), ("D", 1)])
    assert batch == ["A", "B"]
    assert size == 20
    assert remaining(writer) == ["C", "D"]
    release(writer)


def test_create_next_batch_size_limit_fits():
    """testCreateNextBatchSizeLimitFits"""
    writer, batch, size = create_next_batch(20, 10, [("A", 10), ("B", 10), ("C", 10)])
    assert batch == ["A", "B"]
    assert size == 20
    assert remaining(writer) == ["C"]
    release(writer)


def test_create_next_buffer_partially_used():
    """testCreateNextBufferPartiallyUsed"""
    writer, batch, size = create_next_batch(50, 3, [("A", 10), ("B", 20), ("C", 20), ("D", 5)])
    assert batch == ["A", "B", "C"]
    assert size == 50
    assert remaining(writer) == ["D"]
    release(writer)


def test_create_next_stop_when_adding_next_would_exceed_size():
    """testCreateNextStopWhenAddingNextWouldExceedSize"""
    writer, batch, size = create_next_batch(30, 5, [("A", 10), ("B", 20), ("C", 10)])
    assert batch == ["A", "B"]
    assert size == 30
    assert remaining(writer) == ["C"]
    release(writer)
