"""The translator's native writer stage with a minimal sink of its own (no reference sink).

A sink implementing `SupportsNativeFileWrite` gets one Spark write per epoch, its
committables recorded Pending and committed like any writer's; a plan that is not a
plan, an input that is not a DataFrame, or a partition column the input lacks are
refused before any job; a `NativeWriteUnavailable` runs the sink's writers and is
reported; the stage events and the result are the usual ones.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs
import pyarrow.parquet as pq
import pytest

from sinkv2 import (
    AttrsMsgpackSerializer,
    CommittingSinkWriter,
    NativeFileWrite,
    NativeWriteUnavailable,
    Sink,
    SupportsAttemptCleanup,
    SupportsCommitter,
    SupportsNativeFileWrite,
)
from sinkv2.errors import SinkConfigurationError, SinkDefinitionError
from sinkv2.runtime import CommitStatus

pytestmark = pytest.mark.spark


@attrs.frozen
class Staged:
    staged: str
    final: str


class _Writer(CommittingSinkWriter):
    """The sink's own writer: one Parquet file per attempt (the fallback path)."""

    def __init__(self, sink: DirectorySink, context) -> None:  # type: ignore[no-untyped-def]
        self.sink, self.token, self.rows = sink, context.get_attempt_token(), []

    def write(self, element, context) -> None:  # type: ignore[no-untyped-def]
        self.rows.append(element)

    def flush(self, end_of_input: bool) -> None:
        pass

    def prepare_commit(self) -> list[Staged]:
        import pyarrow as pa

        if not self.rows:
            return []
        staged = self.sink.root / "_staging" / self.token / "part.parquet"
        staged.parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(self.rows), staged)
        return [Staged(str(staged), str(self.sink.root / f"{self.token}.parquet"))]

    def close(self) -> None:
        pass


class _Committer:
    def commit(self, requests) -> None:  # type: ignore[no-untyped-def]
        for request in requests:
            file = request.get_committable()
            if os.path.exists(file.staged):
                os.replace(file.staged, file.final)
            else:
                request.signal_already_committed()

    def close(self) -> None:
        pass


class DirectorySink(
    Sink, SupportsCommitter[Staged], SupportsAttemptCleanup, SupportsNativeFileWrite[Staged]
):
    """Parquet files in one directory; ``plan`` is what ``plan_native_file_write`` returns."""

    def __init__(self, root: Path, plan: object = "native") -> None:
        self.root = root
        self.plan = plan

    def create_writer(self, context):  # type: ignore[no-untyped-def]
        return _Writer(self, context)

    def create_committer(self, context):  # type: ignore[no-untyped-def]
        return _Committer()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Staged]:
        return AttrsMsgpackSerializer(Staged)

    def clean_up_attempts(self, job_id, kept_attempt_tokens) -> None:  # type: ignore[no-untyped-def]
        staging = self.root / "_staging"
        for directory in staging.glob(f"{job_id}-*"):
            if directory.name not in kept_attempt_tokens:
                shutil.rmtree(directory)

    def plan_native_file_write(self, input):  # type: ignore[no-untyped-def]
        if self.plan == "native":
            return NativeFileWrite(format="parquet", location=f"file://{self.root}/_staging")
        if callable(self.plan):
            return self.plan(input)
        return self.plan

    def native_file_committables(self, written):  # type: ignore[no-untyped-def]
        directory = self.root / "_staging" / written.attempt_token
        return [
            Staged(str(path), str(self.root / f"{written.attempt_token}-{path.name}"))
            for path in sorted(directory.glob("part-*.parquet"))
        ]


def frame(spark):  # type: ignore[no-untyped-def]
    return spark.range(0, 1000, numPartitions=3).selectExpr("id", "id % 7 as key")


def committed_ids(root: Path) -> list[int]:
    files = sorted(root.glob("*.parquet"))
    return sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist())


def test_an_epoch_is_one_spark_write_then_the_usual_commit(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    events: list[str] = []
    sink = DirectorySink(tmp_path / "out")
    result = translator.apply(
        frame(spark), sink, sink_id="dir", checkpoint_id=5, on_stage=lambda e, _: events.append(e)
    )
    assert result.native_write
    assert (result.status, result.records_written, result.subtasks) == (
        CommitStatus.COMMITTED,
        1000,
        3,
    )
    assert result.committed == 3  # one committable per file Spark wrote
    assert events == [
        "job-recorded",
        "writers-finished",
        "pending-recorded",
        "committer-finished",
        "committed-recorded",
    ]
    assert committed_ids(tmp_path / "out") == list(range(1000))
    assert all("-native-5-part-" in p.name for p in (tmp_path / "out").glob("*.parquet"))
    assert list((tmp_path / "out" / "_staging").iterdir()) == []
    again = translator.apply(frame(spark), sink, sink_id="dir", checkpoint_id=5)
    assert again.status is CommitStatus.ALREADY_COMMITTED


def test_unavailable_runs_the_sinks_writers_and_says_why(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    sink = DirectorySink(tmp_path / "out", NativeWriteUnavailable("no, because"))
    result = translator.apply(frame(spark), sink, sink_id="dir")
    assert not result.native_write
    assert result.native_write_unavailable == "no, because"
    assert "the sink's writers: no, because" in result.summary()
    assert committed_ids(tmp_path / "out") == list(range(1000))


@pytest.mark.parametrize(
    ("plan", "error", "message"),
    [
        (
            "garbage",
            SinkDefinitionError,
            "must return a NativeFileWrite or a NativeWriteUnavailable",
        ),
        (
            lambda df: NativeFileWrite(format="parquet", location="file:///x", input=42),
            SinkConfigurationError,
            "whose input is 42",
        ),
        (
            lambda df: NativeFileWrite(
                format="parquet", location="file:///x", partition_by=["nope"]
            ),
            SinkConfigurationError,
            r"partitions by \['nope'\], which the DataFrame to write does not have",
        ),
    ],
    ids=["not-a-plan", "input-not-a-dataframe", "unknown-partition-column"],
)
def test_a_bad_plan_is_refused_before_any_job(spark, translator, tmp_path, plan, error, message):  # type: ignore[no-untyped-def]  # noqa: PLR0917  # fixtures and parameters
    sink = DirectorySink(tmp_path / "out", plan)
    with pytest.raises(error, match=message):
        translator.apply(frame(spark), sink, sink_id="bad")
    assert not (tmp_path / "out").exists()


def test_the_plans_input_is_what_spark_writes(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    root = tmp_path / "out"

    def plan(df):  # type: ignore[no-untyped-def]
        return NativeFileWrite(
            format="parquet",
            location=f"file://{root}/_staging",
            input=df.where("key = 3").selectExpr("id", "key * 10 as key"),
        )

    result = translator.apply(frame(spark), DirectorySink(root, plan), sink_id="derived")
    assert result.records_written == len([i for i in range(1000) if i % 7 == 3])
    assert committed_ids(root) == [i for i in range(1000) if i % 7 == 3]


@pytest.mark.parametrize("file_format", ["parquet", "json"])
def test_rows_and_tasks_are_counted_for_every_format(spark, translator, tmp_path, file_format):  # type: ignore[no-untyped-def]
    """Parquet's from the footers Spark wrote, JSON's by an Observation: the same numbers."""
    root = tmp_path / "out"

    def plan(_input):  # type: ignore[no-untyped-def]
        return NativeFileWrite(
            format=file_format, location=f"file://{root}/_staging", partition_by=("key",)
        )

    class Counted(DirectorySink):
        def native_file_committables(self, written):  # type: ignore[no-untyped-def]
            directory = self.root / "_staging" / written.attempt_token
            return [
                Staged(str(path), str(self.root / f"{path.parent.name}-{path.name}"))
                for path in sorted(directory.glob("*/part-*"))
            ]

    # Three partitions, the last one empty: two tasks wrote rows.
    df = spark.range(0, 1500, numPartitions=3).where("id < 1000").selectExpr("id", "id % 7 as key")
    result = translator.apply(df, Counted(root, plan), sink_id=f"count-{file_format}")
    assert (result.records_written, result.subtasks) == (1000, 2)
    assert result.committed == len(list(root.glob("key=*-part-*")))


def test_parquet_counts_read_data_files_only(tmp_path):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    from sinkv2_spark._engine.native_write import parquet_counts

    def parquet(relative: str, rows: int) -> None:
        path = tmp_path / "epoch" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": list(range(rows))}), path)

    parquet("k=1/part-00004-a.c000.snappy.parquet", 3)
    parquet("k=2/part-00001-b.c000.snappy.parquet", 4)
    parquet("_temporary/0/_temporary/attempt_1/part-00009-c.parquet", 5)  # unfinished
    parquet("k=1/.hidden.parquet", 6)
    (tmp_path / "epoch" / "k=1" / ".part-00004-a.c000.snappy.parquet.crc").write_bytes(b"crc")
    (tmp_path / "epoch" / "_SUCCESS").write_bytes(b"")
    assert parquet_counts((tmp_path / "epoch").as_uri()) == (7, 5)
    assert parquet_counts((tmp_path / "missing").as_uri()) == (0, 0)
