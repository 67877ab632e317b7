"""Flink's ``AsyncSinkBaseITCase``, one test per Java test, on Spark local mode.

Flink's MiniCluster job is a Spark job here (`SinkTopologyTranslator.apply`);
Flink's checkpointing every 20 ms is a stream whose every micro-batch is a
checkpoint (``flush(False)``, the writer state recorded, restored by the next).
``ArrayListAsyncSink`` persists into a list in the writer's process.
"""

from __future__ import annotations

import json

import pytest

from sinkv2.asyncsink import AsyncSinkBase, AsyncSinkWriter, AsyncSinkWriterConfiguration
from sinkv2.errors import SinkV2Error
from sinkv2.runtime import CommitRetryPolicy
from sinkv2_spark import SinkTopologyTranslator

STORE: list[int] = []
"""Flink's ``ArrayListDestination``: one per writer process."""


def put_records(new_records):
    """Flink's ``ArrayListDestination.putRecords``."""
    STORE.extend(record for record in new_records if record <= 1000)
    if 1_000_000 in new_records:
        raise RuntimeError("Intentional error on persisting 1_000_000 to ArrayListDestination")
    return [record for record in new_records if record > 1000]


class ArrayListWriter(AsyncSinkWriter[object, int]):
    async def submit_request_entries(self, request_entries):
        put_records(list(request_entries))
        return []  # Flink's sink accepts every answer as delivered

    def get_size_in_bytes(self, request_entry):
        return 4


class ArrayListAsyncSink(AsyncSinkBase[object, int]):
    """Flink's ``ArrayListAsyncSink``: its hints, ``Integer.parseInt`` of the element."""

    def __init__(  # noqa: PLR0917 - Flink's constructor takes the six hints in order
        self,
        max_batch_size=25,
        max_in_flight_requests=1,
        max_buffered_requests=100,
        max_batch_size_in_bytes=100_000,
        max_time_in_buffer_ms=1000,
        max_record_size_in_bytes=100_000,
    ):
        super().__init__(
            lambda row, context: int(str(row["id"])),
            AsyncSinkWriterConfiguration(
                max_batch_size=max_batch_size,
                max_in_flight_requests=max_in_flight_requests,
                max_buffered_requests=max_buffered_requests,
                max_batch_size_in_bytes=max_batch_size_in_bytes,
                max_time_in_buffer_ms=max_time_in_buffer_ms,
                max_record_size_in_bytes=max_record_size_in_bytes,
            ),
        )

    def restore_writer(self, context, recovered_state):
        return ArrayListWriter(
            self.element_converter, context, self.configuration, list(recovered_state)
        )


def test_write_twenty_thousand_records_to_generic_sink(spark, translator):
    """testWriteTwentyThousandRecordsToGenericSink"""
    result = translator.apply(spark.range(1, 20_001), ArrayListAsyncSink(), sink_id="twenty-k")
    assert result.records_written == 20_000
    assert result.writer_metrics["numRecordsSend"] == 20_000


def test_failures_on_persisting_to_destination_are_caught_and_raised(spark, translator):
    """testFailuresOnPersistingToDestinationAreCaughtAndRaised

    Flink: the job fails and the root cause carries the destination's message;
    here the Spark job fails with `SinkWriterError`, whose message carries it.
    """
    with pytest.raises(SinkV2Error) as raised:
        translator.apply(
            spark.range(999_999, 1_000_101).coalesce(1),
            ArrayListAsyncSink(1, 1, 2, 10, 1000, 10),
            sink_id="fails",
        )
    assert "Intentional error on persisting 1_000_000 to ArrayListDestination" in str(raised.value)


def test_that_no_issues_occur_when_checkpointing_is_enabled(spark, tmp_path, monkeypatch):
    """testThatNoIssuesOccurWhenCheckpointingIsEnabled

    Ten files of 1,000 numbers, one per micro-batch: ten checkpoints.
    """
    monkeypatch.setenv("SINKV2_STATE_DIR", str(tmp_path / "store"))
    source = tmp_path / "in"
    source.mkdir()
    for part in range(10):
        rows = (json.dumps({"id": i}) for i in range(part * 1000 + 1, part * 1000 + 1001))
        (source / f"part-{part:02d}.json").write_text("\n".join(rows) + "\n")
    stream = spark.readStream.schema("id LONG").option("maxFilesPerTrigger", 1).json(str(source))
    streams = SinkTopologyTranslator(
        retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)
    )
    query = streams.apply(
        stream,
        ArrayListAsyncSink(),
        sink_id="checkpointed",
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
    )
    try:
        assert query.awaitTermination(120), "the availableNow query did not end in 120 s"
    finally:
        query.stop()
    assert query.exception() is None
    assert sum(result.records_written for result in query.recent_results) == 10_000
