"""Sink factories for the data source tests: ``.option("sink", f"{module}:recording")``.

Spark's planner and executor workers import this module by name, as they would a
user's factory. Options arrive as strings.
"""

from __future__ import annotations

import json
from typing import Any

from sinkv2 import CommitterInitContext, WriterInitContext
from tests.spark.recording_sink import RecordingSink, RecordingWriter, TopologySink


class _KnownParallelism:
    """A writer context that answers get_number_of_parallel_subtasks() with -1.

    The data source's writers cannot know the parallelism (Spark does not say);
    RecordingWriter logs it, so the door's recording sink answers -1 instead.
    """

    def __init__(self, context: WriterInitContext) -> None:
        self._context = context

    def get_number_of_parallel_subtasks(self) -> int:
        return -1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class DoorRecordingSink(RecordingSink):
    """RecordingSink without the writers' parallelism (unknown in the data source)."""

    def create_writer(self, context):
        return RecordingWriter(self, _KnownParallelism(context))


class DoorTopologySink(TopologySink):
    """TopologySink without a pre-write topology: the data source cannot repartition."""

    def create_writer(self, context):
        return RecordingWriter(self, _KnownParallelism(context))

    def add_pre_write_topology(self, input):
        return input


class PostCommitNeedsSpark(DoorTopologySink):
    """A post-commit topology that calls a DataFrame method."""

    def add_post_commit_topology(self, committables):
        committables.groupBy("checkpoint_id").count().collect()


class PreCommitNeedsSpark(DoorTopologySink):
    """A pre-commit topology that calls a DataFrame method."""

    def add_pre_commit_topology(self, committables):
        return committables.coalesce(1)


class CommitterSpy(DoorRecordingSink):
    """Records the committer's input schema (what the data source hands it)."""

    def create_committer(self, context: CommitterInitContext):
        schema = context.get_input_schema()
        (self.base / "committer_schema.txt").write_text(str(schema))
        return super().create_committer(context)


def _failures(failures: str) -> dict[tuple[int, int], int]:
    return {(s, a): at for s, a, at in json.loads(failures)}


def recording(
    *, base: str, failures: str = "[]", reject_value: str | None = None, commit_script: str = "[]"
):
    """DoorRecordingSink under ``base``; failures: JSON [[subtask, attempt, element], ...];
    commit_script: JSON list of the committer's first actions (see RecordingCommitter)."""
    return DoorRecordingSink(
        base,
        failures=_failures(failures),
        reject_value=None if reject_value is None else float(reject_value),
        commit_script=json.loads(commit_script),
    )


def plain_recording(*, base: str):
    """The translator's RecordingSink as is: its writers ask for the parallelism."""
    return RecordingSink(base)


def topology(*, base: str):
    return DoorTopologySink(base)


def repartitioning(*, base: str):
    return TopologySink(base, partitions=3)


def post_commit_needs_spark(*, base: str):
    return PostCommitNeedsSpark(base)


def pre_commit_needs_spark(*, base: str):
    return PreCommitNeedsSpark(base)


def committer_spy(*, base: str):
    return CommitterSpy(base)


def not_a_sink():
    return object()


NOT_CALLABLE = 42


class Interloper(DoorRecordingSink):
    """Subtask 0's writer takes the sink id and lets it go, as another run would."""

    def __init__(self, base: str, state: str) -> None:
        super().__init__(base)
        self.state = state

    def create_writer(self, context):
        from sinkv2.runtime import SqliteCommitStateStore

        if context.get_subtask_id() == 0:
            SqliteCommitStateStore(self.state).acquire("fenced", job_id="interloper").release()
        return super().create_writer(context)


def interloper(*, base: str, state: str):
    return Interloper(base, state)
