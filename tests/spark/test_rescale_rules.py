"""One stateful sink through both streaming doors, rescaled 2 -> 3 -> 1 across restarts.

The same sink (`DoorStatefulSink`: each writer snapshots the marks it restored plus a
mark of its own, ``(checkpoint, subtask)``) runs through
``SinkTopologyTranslator.apply(streaming_df)`` and through
``writeStream.format("sinkv2")``; each query is restarted from its checkpoint location
with ``df.repartition(n)`` changed: checkpoint 1 has 2 partitions, checkpoint 2 has 3,
checkpoints 3 and 4 have 1 (one run of two micro-batches). Each door must hand out
the states by the rule ``docs/streaming.md`` documents for it ("Writer states on a
rescale"):

- ``apply()``: Flink's rule - all states reach the writers of the very next checkpoint;
- the data source: by subtask id - a writer restores what is recorded under its id;
  the states of subtasks 1 and 2, which checkpoint 3 lacks, are recorded again under
  subtask 0 and arrive at checkpoint 4.

In both, every state is restored exactly once per checkpoint and none is lost.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinkv2.runtime import CommitRetryPolicy
from sinkv2_spark import SinkTopologyTranslator, register
from tests.spark.datasource_stream_sinks import DoorStatefulSink

pytestmark = pytest.mark.spark

SCHEMA = "id long, key string"
ROWS = 10
TIMEOUT_S = 180
RUNS = ((2, [0]), (3, [1]), (1, [2, 3]))
"""Per query run: its partitions, and the files (one micro-batch each) it adds."""

Mark = tuple[int, int]
"""``(checkpoint, subtask)`` of the writer that made a state."""

FLINK: dict[int, dict[int, list[Mark] | None]] = {
    1: {0: None, 1: None},  # created, not restored
    2: {0: [(1, 0)], 1: [(1, 1)], 2: []},  # 2 -> 3: contiguous runs [a], [b], []
    3: {0: [(1, 0), (2, 0), (1, 1), (2, 1), (2, 2)]},  # 3 -> 1: everything, now
    4: {0: [(1, 0), (2, 0), (1, 1), (2, 1), (2, 2), (3, 0)]},
}
BY_SUBTASK_ID: dict[int, dict[int, list[Mark] | None]] = {
    1: {0: None, 1: None},
    2: {0: [(1, 0)], 1: [(1, 1)], 2: []},  # subtask 2 had no state: none
    3: {0: [(1, 0), (2, 0)]},  # 3 -> 1: subtask 0's own; 1's and 2's carried under 0 ...
    4: {0: [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (2, 2)]},  # ... and restored here
}


def rows_of(index: int) -> list[dict]:
    return [{"id": index * 100 + j, "key": f"k{j % 3}"} for j in range(ROWS)]


def stream(spark, files: Path, partitions: int):
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(files))
        .repartition(partitions)
    )


def add_files(files: Path, indices: list[int]) -> None:
    files.mkdir(exist_ok=True)
    for index in indices:
        pq.write_table(pa.Table.from_pylist(rows_of(index)), files / f"part-{index}.parquet")


def wait(query) -> None:
    try:
        ended = query.awaitTermination(TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    assert ended, f"the availableNow query did not end in {TIMEOUT_S} s"


def restored(sink: DoorStatefulSink) -> dict[int, dict[int, list[Mark] | None]]:
    """Checkpoint -> subtask -> the marks its committed writer restored (None: created)."""
    return {
        checkpoint: {
            subtask: None
            if writer["restored"] is None
            else [(m["checkpoint"], m["subtask"]) for m in writer["restored"]]
            for subtask, writer in sorted(writers.items())
        }
        for checkpoint, writers in sorted(sink.committed_checkpoints().items())
    }


def check_exactly_once(sink: DoorStatefulSink, assignment: dict) -> None:
    """No writer of one checkpoint restored a state another did; the last ones hold all."""
    made = [(c, s) for c, writers in assignment.items() for s in writers]
    for writers in assignment.values():
        marks = [m for states in writers.values() for m in states or ()]
        assert len(marks) == len(set(marks))
    newest = sink.committed_checkpoints()[max(assignment)]
    snapshot = [(m["checkpoint"], m["subtask"]) for w in newest.values() for m in w["snapshot"]]
    assert sorted(snapshot) == sorted(made)  # every state once in the newest checkpoint


def committed_ids(sink: DoorStatefulSink) -> list[int]:
    return sorted(r["id"] for r in sink.committed_records())


EXPECTED_IDS = sorted(r["id"] for index in range(4) for r in rows_of(index))


def test_apply_restores_by_flinks_rule(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("SINKV2_STATE_DIR", str(tmp_path / "default-store"))
    translator = SinkTopologyTranslator(
        retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)
    )
    files, sink = tmp_path / "in", DoorStatefulSink(tmp_path / "out")
    for partitions, indices in RUNS:
        add_files(files, indices)
        query = translator.apply(
            stream(spark, files, partitions),
            sink,
            sink_id="rescaled",
            checkpoint_location=str(tmp_path / "checkpoint"),
            trigger={"availableNow": True},
        )
        wait(query)
        assert [r.subtasks for r in query.recent_results] == [partitions] * len(indices)
    assert restored(sink) == FLINK
    check_exactly_once(sink, FLINK)
    assert committed_ids(sink) == EXPECTED_IDS


def test_the_data_source_restores_by_subtask_id(spark, tmp_path):
    register(spark)
    files = tmp_path / "in"
    for partitions, indices in RUNS:
        add_files(files, indices)
        query = (
            stream(spark, files, partitions)
            .writeStream.format("sinkv2")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .option("sink", "tests.spark.datasource_stream_sinks:stateful")
            .option("base", str(tmp_path / "out"))
            .option("sink_id", "rescaled")
            .trigger(availableNow=True)
            .start()
        )
        wait(query)
    sink = DoorStatefulSink(tmp_path / "out")
    assert restored(sink) == BY_SUBTASK_ID
    check_exactly_once(sink, BY_SUBTASK_ID)
    assert committed_ids(sink) == EXPECTED_IDS
