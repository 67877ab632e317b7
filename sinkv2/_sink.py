"""The sink and its capability mixins (FLIP-372).

A sink is a `Sink` plus any of the independent ``Supports*`` mixins; the runtime
looks at which ones it implements and builds the pipeline to match::

    Sink                          writer only: at-least-once if flush() writes through
    + SupportsWriterState         writers snapshot and restore state
    + SupportsCommitter           two-phase commit: exactly-once is possible
    + SupportsPreWriteTopology    reshape the input before the writers (e.g. repartition)
    + SupportsPreCommitTopology   reshape committables before the committer
    + SupportsPostCommitTopology  act on committed committables (e.g. compaction)

Implement a mixin by subclassing it (as Flink sinks ``implements`` them) and
defining all of its methods; `inspect_sink` checks this before any job runs.
Sinks are shipped to executors with cloudpickle, so keep them plain data: open
connections in writers and committers, not in the sink.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol, TypeVar

from sinkv2._committer import Committer
from sinkv2._context import CommitterInitContext, WriterInitContext
from sinkv2._serialization import SimpleVersionedSerializer
from sinkv2._writer import SinkWriter, StatefulSinkWriter

__all__ = [
    "Sink",
    "SupportsCommitter",
    "SupportsPostCommitTopology",
    "SupportsPreCommitTopology",
    "SupportsPreWriteTopology",
    "SupportsWriterState",
    "WithCompatibleState",
]

InputT_contra = TypeVar("InputT_contra", contravariant=True)
InputT_co = TypeVar("InputT_co", covariant=True)  # SupportsPreWriteTopology only names it
CommT = TypeVar("CommT")
WriterStateT = TypeVar("WriterStateT")
WriteResultT = TypeVar("WriteResultT")


class Sink(Protocol[InputT_contra]):
    """The base of every sink: creates one writer per subtask.

    Required: `create_writer`.
    """

    def create_writer(self, context: WriterInitContext) -> SinkWriter[InputT_contra]:
        """A new writer for the subtask described by ``context``.

        If the sink implements `SupportsCommitter`, the writer must be a
        `CommittingSinkWriter`; if it implements `SupportsWriterState`, a
        `StatefulSinkWriter`.
        """
        ...


class SupportsCommitter(Protocol[CommT]):
    """Mixin: writers emit committables that a committer makes visible (two-phase commit).

    Required: `create_committer`, `get_committable_serializer`.
    """

    def create_committer(self, context: CommitterInitContext) -> Committer[CommT]:
        """A committer. On Spark there is one, on the driver, for all subtasks."""
        ...

    def get_committable_serializer(self) -> SimpleVersionedSerializer[CommT]:
        """How committables are stored and shipped; must read every version ever written."""
        ...


class SupportsWriterState(Protocol[InputT_contra, WriterStateT]):
    """Mixin: writers keep state across checkpoints and restart from it.

    Required: `restore_writer`, `get_writer_state_serializer`.
    """

    class WithCompatibleState(Protocol):
        """Mixin: restore from writer state that another sink wrote.

        Required: `get_compatible_writer_state_names`.
        """

        def get_compatible_writer_state_names(self) -> Collection[str]:
            """Names of other sinks whose writer state this sink's serializer reads."""
            ...

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[WriterStateT]
    ) -> StatefulSinkWriter[InputT_contra, WriterStateT]:
        """A writer that resumes from ``recovered_state``.

        After a rescale, a subtask may receive the states of several old subtasks,
        or none.
        """
        ...

    def get_writer_state_serializer(self) -> SimpleVersionedSerializer[WriterStateT]:
        """How writer states are stored; must read every version ever written."""
        ...


class SupportsPreWriteTopology(Protocol[InputT_co]):
    """Mixin: transform the input before it reaches the writers.

    Required: `add_pre_write_topology`. On Spark the stream is a
    ``pyspark.sql.DataFrame``; typical uses are repartitioning by key or sorting
    within partitions.
    """

    def add_pre_write_topology(self, input: Any) -> Any:
        """The DataFrame the writers should consume, derived from ``input``."""
        ...


class SupportsPreCommitTopology(SupportsCommitter[CommT], Protocol[WriteResultT, CommT]):
    """Mixin: writers emit write results, and a topology turns them into committables.

    Required: `add_pre_commit_topology`, `get_write_result_serializer`, plus the
    `SupportsCommitter` methods. The topology must keep one `CommittableSummary`
    per checkpoint and subtask with the right count; the Spark helpers do that.
    """

    def add_pre_commit_topology(self, committables: Any) -> Any:
        """The committable stream of ``CommT`` derived from the stream of ``WriteResultT``."""
        ...

    def get_write_result_serializer(self) -> SimpleVersionedSerializer[WriteResultT]:
        """How write results are shipped from writers to the pre-commit topology."""
        ...


class SupportsPostCommitTopology(SupportsCommitter[CommT], Protocol[CommT]):
    """Mixin: act on committables after they were committed.

    Required: `add_post_commit_topology`, plus the `SupportsCommitter` methods. The
    topology sees committed (and already-committed) committables only; on recovery
    it may see them again, so it must be idempotent.
    """

    def add_post_commit_topology(self, committables: Any) -> None:
        """Attach work that consumes the committed committable stream."""


WithCompatibleState = SupportsWriterState.WithCompatibleState
"""The same as `SupportsWriterState.WithCompatibleState`."""
