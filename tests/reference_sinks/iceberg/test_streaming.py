"""IcebergSink under Structured Streaming: one snapshot per non-empty micro-batch, exactly once.

Micro-batch ``b`` is checkpoint ``b + 1``, and its snapshot's summary carries it
(``sinkv2.checkpoint-id``). The table's own history is the last word on what was
committed: with the commit state store lost, a micro-batch Spark replays is
written again but its commit is recognised as done, and its files are removed.

Tests taking ``native`` run on both paths: the sink's own writers and Spark's
Parquet writer (``native_write=True``, per micro-batch).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from reference_sinks.iceberg import CHECKPOINT_ID_PROPERTY, SINK_ID_PROPERTY, IcebergSink
from sinkv2.runtime import CommitStatus, SqliteCommitStateStore
from tests.reference_sinks.iceberg.tables import snapshots_of
from tests.reference_sinks.streaming import (
    json_stream,
    rate_stream,
    replay_last_batch,
    run_batches,
    stopped_at_exit,
    write_json_file,
)

pytestmark = pytest.mark.spark

RATE_SCHEMA = Schema(
    NestedField(1, "timestamp", TimestamptzType()), NestedField(2, "value", LongType())
)
EVENTS_SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "key", StringType()))
BY_KEY = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "key"))


def data_files(warehouse: Path) -> set[str]:
    return {p.name for p in warehouse.rglob("*.parquet")}


@pytest.fixture(params=[False, True], ids=["sink-writers", "native"])
def native(request):  # type: ignore[no-untyped-def]
    """IcebergSink's ``native_write``: its own writers, or Spark's Parquet writer."""
    return request.param


def referenced_files(sink: IcebergSink) -> set[str]:
    table = sink.load_table()
    return {Path(f["file_path"]).name for f in table.inspect.files().to_pylist()}


def column(sink: IcebergSink, name: str) -> list[object]:
    return sorted(sink.load_table().scan().to_arrow().column(name).to_pylist())


def test_rate_source_one_snapshot_per_non_empty_micro_batch(spark, translator, tmp_path, native):
    sink = IcebergSink.local(
        tmp_path / "warehouse", "ns.rate", schema=RATE_SCHEMA, native_write=native
    )
    query = translator.apply(
        rate_stream(spark),
        sink,
        sink_id="iceberg-rate",
        checkpoint_location=str(tmp_path / "checkpoint"),
        trigger={"processingTime": "200 milliseconds"},
        decoupled_commit=True,  # clean-ups of micro-batch N + 1 run while N commits
    )
    with stopped_at_exit(query):
        run_batches(query, 3)
        query.stop()
    assert query.exception() is None

    results = query.recent_results
    assert {r.status for r in results} == {CommitStatus.COMMITTED}
    non_empty = [r.checkpoint_id for r in results if r.records_written]
    assert non_empty
    summaries = snapshots_of(sink)
    assert [int(s[CHECKPOINT_ID_PROPERTY]) for s in summaries] == non_empty
    assert {s[SINK_ID_PROPERTY] for s in summaries} == {"ns.rate"}
    values = column(sink, "value")
    assert values == list(range(len(values)))
    assert len(values) == sum(r.records_written for r in results) > 0
    # Every clean-up kept the files snapshots reference; the job's end left no other.
    assert data_files(tmp_path) == referenced_files(sink)


def test_a_lost_commit_state_store_and_a_replayed_micro_batch_add_no_duplicate(
    spark, tmp_path, native
):
    from sinkv2_spark import SinkTopologyTranslator

    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    store_path = tmp_path / "store" / "commit_state.sqlite"
    sink = IcebergSink.local(
        tmp_path / "warehouse",
        "ns.events",
        schema=EVENTS_SCHEMA,
        partition_spec=BY_KEY,
        native_write=native,
    )
    for index in range(3):
        write_json_file(
            source, index, [{"id": index * 10 + i, "key": f"k{i % 2}"} for i in range(10)]
        )

    def run() -> list:
        translator = SinkTopologyTranslator()
        query = translator.apply(
            json_stream(spark, source, "id long, key string"),
            sink,
            sink_id="iceberg-events",
            checkpoint_location=str(checkpoint),
            trigger={"availableNow": True},
            state_store=SqliteCommitStateStore(store_path),
        )
        with stopped_at_exit(query):
            query.awaitTermination()
        return query.recent_results

    first = run()
    assert [(r.checkpoint_id, r.status, r.committed) for r in first] == [
        (1, CommitStatus.COMMITTED, 1),
        (2, CommitStatus.COMMITTED, 1),
        (3, CommitStatus.COMMITTED, 1),
    ]
    assert [s[CHECKPOINT_ID_PROPERTY] for s in snapshots_of(sink)] == ["1", "2", "3"]

    # The commit state store is lost, and the driver "died" in micro-batch 2 after
    # its commit: Spark replays it, and nothing in the store says it was committed.
    shutil.rmtree(store_path.parent)
    assert replay_last_batch(checkpoint) == 2
    write_json_file(source, 3, [{"id": 30 + i, "key": f"k{i % 2}"} for i in range(10)])
    second = run()
    assert [(r.checkpoint_id, r.status, r.committed, r.already_committed) for r in second] == [
        (3, CommitStatus.COMMITTED, 0, 1),  # written again, but the table has checkpoint 3
        (4, CommitStatus.COMMITTED, 1, 0),
    ]
    assert second[0].records_written == 10

    assert [s[CHECKPOINT_ID_PROPERTY] for s in snapshots_of(sink)] == ["1", "2", "3", "4"]
    assert column(sink, "id") == list(range(40))
    # The replay's files were never referenced: removed; no referenced file was.
    assert data_files(tmp_path) == referenced_files(sink)


def test_the_summary_guard_skips_a_recommit_through_a_fresh_store(spark, tmp_path, native):
    """A batch run of the same checkpoint id through an empty store: the table says no.

    The runtime asks the table before writing (`SupportsCommittedCheckpoints`), so the
    run writes nothing at all; the committer's own guard on the snapshot summaries
    (tested in ``test_committer.py``) is behind it.
    """
    from sinkv2_spark import SinkTopologyTranslator

    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    sink = IcebergSink.local(
        tmp_path / "warehouse", "ns.guard", schema=EVENTS_SCHEMA, native_write=native
    )
    write_json_file(source, 0, [{"id": i, "key": "a"} for i in range(5)])
    query = SinkTopologyTranslator().apply(
        json_stream(spark, source, "id long, key string"),
        sink,
        sink_id="iceberg-guard",
        checkpoint_location=str(checkpoint),
        trigger={"availableNow": True},
    )
    with stopped_at_exit(query):
        query.awaitTermination()
    assert [s[CHECKPOINT_ID_PROPERTY] for s in snapshots_of(sink)] == ["1"]

    again = SinkTopologyTranslator(
        state_store=SqliteCommitStateStore(tmp_path / "other" / "commit_state.sqlite")
    ).apply(
        spark.createDataFrame(pa.table({"id": [0, 1, 2, 3, 4], "key": ["a"] * 5})),
        sink,
        sink_id="iceberg-guard",
        checkpoint_id=1,
    )
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert (again.records_written, again.committed, again.already_committed) == (0, 0, 0)
    assert again.store_warning is not None
    assert "the destination already holds checkpoint 1" in again.store_warning
    assert len(snapshots_of(sink)) == 1
    assert column(sink, "id") == [0, 1, 2, 3, 4]
    assert data_files(tmp_path) == referenced_files(sink)


def test_clean_ups_after_each_micro_batch_read_only_the_new_manifests(tmp_path, monkeypatch):
    """Engine-free: a stream's job cleans up after every checkpoint; the cost stays flat."""
    from reference_sinks.iceberg import _sink
    from reference_sinks.iceberg._committer import append_committable
    from tests.reference_sinks.iceberg.tables import make_sink, rows, stage

    sink = make_sink(tmp_path)
    read: list[object] = []
    every_manifest = _sink._manifests_newest_first

    def counted(table):
        for manifest in every_manifest(table):
            read.append(manifest)
            yield manifest

    monkeypatch.setattr(_sink, "_manifests_newest_first", counted)
    for checkpoint in range(1, 9):
        winner = stage(
            sink, [rows(checkpoint * 10, 10)], attempt=checkpoint, checkpoint_id=checkpoint
        )
        if checkpoint == 5:
            stage(sink, [rows(0, 5)], attempt=1000)  # a losing attempt: proven unreferenced
        append_committable(sink.load_table(), winner)
        read.clear()
        sink.clean_up_attempts("job", ())
        assert data_files(tmp_path) == referenced_files(sink)  # the loser is gone, no winner
        if checkpoint != 5:  # only the newest manifest; not every one of the job, again
            assert len(read) == 1

    assert len(snapshots_of(sink)) == 8
    assert column(sink, "id") == list(range(10, 90))
