"""The PostgreSQL commit state store behind the translator, batch and streaming.

The same exactly-once rules as with the default SQLite store: a batch run of a
committed checkpoint id writes nothing again, a run that died after recording its
committables is finished by the next one, and a replayed micro-batch is found
committed. The sink is a real FileSink; the store is a fresh PostgreSQL database.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_sinks.files import FileSink
from sinkv2.runtime import CommitRetryPolicy, CommitStatus, EpochStatus, PostgresCommitStateStore
from sinkv2_spark import SinkTopologyTranslator
from tests.reference_sinks.streaming import (
    json_stream,
    replay_last_batch,
    stopped_at_exit,
    write_json_file,
)

pytestmark = pytest.mark.spark

NO_BACKOFF = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)


def staged_files(out: Path) -> list[Path]:
    return [p for p in (out / "_staging").rglob("*") if p.is_file()]


def test_a_batch_checkpoint_is_committed_once_and_a_dead_runs_commit_is_finished(
    spark, postgres_url, tmp_path
):
    store = PostgresCommitStateStore(postgres_url)
    translator = SinkTopologyTranslator(state_store=store, retry_policy=NO_BACKOFF)
    assert translator.state_store is store
    out = tmp_path / "out"
    sink = FileSink(str(out), "parquet")
    df = spark.range(0, 500, numPartitions=3)

    first = translator.apply(df, sink, sink_id="orders", checkpoint_id=1)
    assert (first.status, first.records_written) == (CommitStatus.COMMITTED, 500)
    again = translator.apply(df, sink, sink_id="orders", checkpoint_id=1)
    assert (again.status, again.records_written) == (CommitStatus.ALREADY_COMMITTED, 0)

    def die_before_committing(event: str, epoch: int) -> None:
        if event == "pending-recorded":
            raise RuntimeError("the driver dies before committing checkpoint 2")

    more = spark.range(500, 800, numPartitions=2)
    with pytest.raises(RuntimeError, match="before committing checkpoint 2"):
        translator.apply(
            more, sink, sink_id="orders", checkpoint_id=2, on_stage=die_before_committing
        )
    assert [r.status for r in store.epochs("orders")] == [
        EpochStatus.COMMITTED,
        EpochStatus.PENDING,
    ]
    finished = translator.apply(more, sink, sink_id="orders", checkpoint_id=2)
    assert (finished.status, finished.records_written) == (CommitStatus.RECOMMITTED, 0)

    ids = sorted(row.id for row in spark.read.parquet(str(out)).collect())
    assert ids == list(range(800))
    assert staged_files(out) == []
    assert [(r.epoch, r.status) for r in store.epochs("orders")] == [
        (1, EpochStatus.COMMITTED),
        (2, EpochStatus.COMMITTED),
    ]
    assert store.holder("orders") is None  # every run released the sink id
    assert store.jobs("orders") == []


def test_a_stream_commits_each_micro_batch_once_and_a_replay_writes_nothing(
    spark, postgres_url, tmp_path
):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    for index in range(3):
        write_json_file(source, index, [{"id": index * 10 + i} for i in range(10)])
    sink = FileSink(str(out), "jsonl")
    translator = SinkTopologyTranslator(retry_policy=NO_BACKOFF)

    def run() -> list:
        query = translator.apply(
            json_stream(spark, source, "id long"),
            sink,
            sink_id="events",
            checkpoint_location=str(checkpoint),
            trigger={"availableNow": True},
            state_store=PostgresCommitStateStore(postgres_url),
        )
        with stopped_at_exit(query):
            query.awaitTermination()
        assert query.exception() is None
        return [(r.checkpoint_id, r.status, r.records_written) for r in query.recent_results]

    assert run() == [
        (1, CommitStatus.COMMITTED, 10),
        (2, CommitStatus.COMMITTED, 10),
        (3, CommitStatus.COMMITTED, 10),
    ]
    # Spark runs its last micro-batch again, as after a driver death right after the
    # commit: the PostgreSQL store knows checkpoint 3 is committed.
    assert replay_last_batch(checkpoint) == 2
    write_json_file(source, 3, [{"id": 30 + i} for i in range(10)])
    assert run() == [
        (3, CommitStatus.ALREADY_COMMITTED, 0),
        (4, CommitStatus.COMMITTED, 10),
    ]

    assert sorted(row.id for row in spark.read.json(str(out)).collect()) == list(range(40))
    assert staged_files(out) == []
    store = PostgresCommitStateStore(postgres_url)
    assert {r.status for r in store.epochs("events")} == {EpochStatus.COMMITTED}
    assert store.origin("events").startswith("spark query ")
    assert store.holder("events") is None
    # nothing was kept next to the checkpoint: the stream's state is in PostgreSQL
    assert not (checkpoint / "sinkv2" / "commit_state.sqlite").exists()
