"""FileSink under Structured Streaming: exactly once per micro-batch, across restarts.

Micro-batch ``b`` is checkpoint ``b + 1``; its files are renamed into place when it
commits, so a reader sees each row once whether the query is stopped, replays its
last micro-batch, or died between recording a micro-batch and committing it.

Each test runs on both paths: FileSink's own writers and Spark's writer staging the
files (``native_write=True``, per micro-batch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_sinks.files import FileSink, RollingPolicy
from sinkv2.runtime import CommitStatus
from tests.reference_sinks.streaming import (
    json_stream,
    rate_stream,
    replay_last_batch,
    run_batches,
    stopped_at_exit,
    write_json_file,
)

pytestmark = pytest.mark.spark

SCHEMA = "id long, key string"


@pytest.fixture(params=[False, True], ids=["sink-writers", "native"])
def file_sink(request):  # type: ignore[no-untyped-def]
    """Makes FileSinks on one path: their own writers, or Spark's (native) writer."""

    def make(out: Path, fmt: str, **options: object) -> FileSink:
        if request.param:
            options["rolling_policy"] = RollingPolicy(max_bytes=None)
        return FileSink(str(out), fmt, native_write=request.param, **options)  # type: ignore[arg-type]

    return make


def staged_files(out: Path) -> list[Path]:
    return [p for p in (out / "_staging").rglob("*") if p.is_file()]


def id_rows(start: int, count: int) -> list[dict[str, object]]:
    return [{"id": i, "key": f"k{i % 3}"} for i in range(start, start + count)]


def test_rate_source_parquet_every_value_once_across_a_restart(
    spark, translator, tmp_path, file_sink
):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sink = file_sink(out, "parquet")
    results = []
    for decoupled in (False, True):  # the restart commits on the commit thread
        query = translator.apply(
            rate_stream(spark),
            sink,
            sink_id="files-rate",
            checkpoint_location=str(checkpoint),
            trigger={"processingTime": "200 milliseconds"},
            decoupled_commit=decoupled,
        )
        with stopped_at_exit(query):
            run_batches(query, 2 if decoupled else 3)
            query.stop()
        assert query.exception() is None
        results += query.recent_results
        assert staged_files(out) == []

    # Each checkpoint committed once; a micro-batch whose commit Spark had not logged
    # when the query stopped is replayed by the restart and found committed.
    committed = [r.checkpoint_id for r in results if r.status is CommitStatus.COMMITTED]
    assert committed == list(range(1, len(committed) + 1))
    replayed = [r for r in results if r.status is not CommitStatus.COMMITTED]
    assert all(r.status is CommitStatus.ALREADY_COMMITTED for r in replayed)
    assert len(replayed) <= 1
    values = sorted(row.value for row in spark.read.parquet(str(out)).select("value").collect())
    assert values == list(range(len(values)))  # every value once, none skipped
    assert len(values) == sum(r.records_written for r in results)
    assert len(values) > 0


def test_file_source_jsonl_a_replayed_micro_batch_is_not_written_twice(
    spark, translator, tmp_path, file_sink
):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    for index in range(3):
        write_json_file(source, index, id_rows(index * 100, 100))
    sink = file_sink(out, "jsonl", partition_by=["key"])

    def run() -> list:
        query = translator.apply(
            json_stream(spark, source, SCHEMA),
            sink,
            sink_id="files-json",
            checkpoint_location=str(checkpoint),
            trigger={"availableNow": True},
            decoupled_commit=True,
        )
        with stopped_at_exit(query):
            query.awaitTermination()
        query.processAllAvailable()  # the query ended: nothing to wait for
        return query.recent_results

    first = run()
    assert [(r.checkpoint_id, r.status, r.records_written) for r in first] == [
        (1, CommitStatus.COMMITTED, 100),
        (2, CommitStatus.COMMITTED, 100),
        (3, CommitStatus.COMMITTED, 100),
    ]
    # The driver "died" inside foreachBatch of micro-batch 2 after its commit: Spark
    # runs it again; the commit state store knows checkpoint 3 is committed.
    assert replay_last_batch(checkpoint) == 2
    write_json_file(source, 3, id_rows(300, 100))
    second = run()
    assert [(r.checkpoint_id, r.status, r.records_written) for r in second] == [
        (3, CommitStatus.ALREADY_COMMITTED, 0),
        (4, CommitStatus.COMMITTED, 100),
    ]

    written = spark.read.json(str(out)).collect()
    assert sorted(row.id for row in written) == list(range(400))
    assert all(row.key == f"k{row.id % 3}" for row in written)
    assert sorted(p.name for p in out.iterdir()) == ["_staging", "key=k0", "key=k1", "key=k2"]
    assert staged_files(out) == []


def test_a_micro_batch_recorded_but_not_committed_at_a_crash_is_committed_once(
    spark, translator, tmp_path, file_sink
):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    for index in range(2):
        write_json_file(source, index, id_rows(index * 50, 50))
    sink = file_sink(out, "parquet")

    def crash_after_recording_checkpoint_2(event: str, epoch: int) -> None:
        if event == "pending-recorded" and epoch == 2:
            raise RuntimeError("the driver dies before committing checkpoint 2")

    def start(on_stage=None):
        return translator.apply(
            json_stream(spark, source, SCHEMA),
            sink,
            sink_id="files-crash",
            checkpoint_location=str(checkpoint),
            trigger={"availableNow": True},
            on_stage=on_stage,
        )

    query = start(crash_after_recording_checkpoint_2)
    with pytest.raises(RuntimeError, match="before committing checkpoint 2"):
        query.awaitTermination()
    assert sorted(row.id for row in spark.read.parquet(str(out)).collect()) == list(range(50))
    assert staged_files(out)  # checkpoint 2's files wait, staged, for the next run

    write_json_file(source, 2, id_rows(100, 50))
    query = start()
    with stopped_at_exit(query):
        query.awaitTermination()
    statuses = [(r.checkpoint_id, r.status) for r in query.recent_results]
    # The restart commits the pending checkpoint from its stored committables when
    # it opens (nothing is rewritten); Spark's replay of it reports that recommit.
    assert statuses == [(2, CommitStatus.RECOMMITTED), (3, CommitStatus.COMMITTED)]
    assert sorted(row.id for row in spark.read.parquet(str(out)).collect()) == list(range(150))
    assert staged_files(out) == []
