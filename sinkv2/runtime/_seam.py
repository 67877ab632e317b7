"""The seam between the commit coordinator and an engine, and what crosses it.

An engine (Spark, the contract kit's local engine) gives the coordinator its
committable streams (`CommittableStreams`) and its writer stage (`WriterStage`);
the coordinator reports progress (`StageListener`) and results (`EpochCommit`,
`Recovery`). Like httpx's transport seam: the engine is swappable, the protocol
is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import attrs

from sinkv2.runtime._commit import CommitOutcome
from sinkv2.runtime._writer_states import WriterStates

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "STAGE_EVENTS",
    "CommittableStreams",
    "EpochCommit",
    "Recovery",
    "Restore",
    "StageListener",
    "StreamWriterStage",
    "WriterStage",
    "WriterStageOutput",
]

StageListener = Callable[[str, int], None]
"""Called with (event, epoch) as a job progresses; see `STAGE_EVENTS`. For progress
reporting, and how tests stop a driver at an exact point. ``"job-recorded"`` carries
epoch 0: it comes before any epoch is chosen."""

STAGE_EVENTS: Final = (
    "job-recorded",
    "writers-finished",
    "pending-recorded",
    "committer-finished",
    "post-commit-finished",
    "committed-recorded",
)
"""Every `StageListener` event, in the order they happen (``"post-commit-finished"``
only for sinks with a post-commit topology)."""


class CommittableStreams(Protocol):
    """How an engine hands committables to topologies: the coordinator's engine seam.

    Required: both methods. Spark wraps the table in a DataFrame; the kit's local
    engine in a ``LocalCommittableStream``.
    """

    def to_stream(self, table: pa.Table) -> Any:
        """The engine's committable stream holding ``table`` (`COMMITTABLE_SCHEMA` rows)."""
        ...

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        """The rows of ``stream`` as a table in `COMMITTABLE_SCHEMA`.

        Raises:
            SinkConfigurationError: ``stream`` is not this engine's committable stream,
                or lacks committable columns; name ``produced_by`` in the message.
        """
        ...


@final
@attrs.frozen(kw_only=True)
class WriterStageOutput:
    """What an engine's writer stage returned for one epoch.

    Attributes:
        table: One row per committable or write result, in `COMMITTABLE_SCHEMA`,
            framed by the serializer of its kind; lineage ``"subtask:index"``.
        attempt_tokens: The attempts whose output counts (one per subtask).
        records: Elements handed to writers.
        subtasks: Writer subtasks that ran.
        metrics: Writer metrics over all subtasks, by Flink's names.
        stage_seconds: Wall time of engine stages (e.g. the pre-write topology).
        states: The writers' ``snapshot_state(checkpoint_id)`` (streaming), with
            every subtask present; ``None`` for batch runs and stateless sinks.
        final_committables: ``table`` holds the sink's committables, not writer
            outputs: the engine wrote the files natively and the sink turned them
            into committables (`SupportsNativeFileWrite`), so no pre-commit
            topology runs.
        native_write: The engine's own file writer wrote the data
            (`SupportsNativeFileWrite`), not the sink's writers.
        native_write_unavailable: Why the sink's writers ran although the sink
            supports native writes, as its `NativeWriteUnavailable` said.
    """

    table: pa.Table
    attempt_tokens: frozenset[str]
    records: int = 0
    subtasks: int = 0
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    stage_seconds: Mapping[str, float] = attrs.field(factory=dict)
    states: WriterStates | None = None
    final_committables: bool = False
    native_write: bool = False
    native_write_unavailable: str | None = None


WriterStage = Callable[[str, int], WriterStageOutput]
"""Runs every writer of one epoch: called with (job id, checkpoint id)."""


@final
@attrs.frozen(kw_only=True)
class Restore:
    """What a checkpoint's writers resume from: the checkpoint before it.

    Attributes:
        checkpoint_id: The restored checkpoint; writers report it as
            ``get_restored_checkpoint_id()``.
        states: Its writer states, checked readable; ``None`` if the sink keeps no
            writer state. Redistribute them with `WriterStates.redistribute` once
            the number of writers is known.
    """

    checkpoint_id: int
    states: WriterStates | None = None


StreamWriterStage = Callable[[str, int, "Restore | None"], WriterStageOutput]
"""Runs every writer of one streaming checkpoint: called with (job id, checkpoint id,
what to restore or ``None`` for a stream's first checkpoint). Each writer ends the
checkpoint with ``flush(False)`` -> ``prepare_commit()`` -> ``snapshot_state(id)``."""


@final
@attrs.frozen(kw_only=True)
class EpochCommit:
    """One epoch committed: which, and what the committer did."""

    epoch: int
    checkpoint_id: int
    outcome: CommitOutcome[Any]


@final
@attrs.frozen(kw_only=True)
class Recovery:
    """What `CommitCoordinator.open` found and finished of dead jobs.

    Attributes:
        recommitted: Pending epochs it committed, by epoch.
        aborted: Pending epochs of runs without a checkpoint id it aborted.
        cleaned_jobs: Dead jobs whose staged output it removed.
    """

    recommitted: Mapping[int, EpochCommit] = attrs.field(factory=dict)
    aborted: tuple[int, ...] = ()
    cleaned_jobs: tuple[str, ...] = ()
