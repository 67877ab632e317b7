"""sinkv2 extensions to Flink's interfaces: columnar writes and cleanup hooks.

None of these exist in Flink. They answer what Spark adds to the picture:
columnar batches that can skip per-row Python entirely, and task attempts whose
staged output must be removed when they lose (retries, speculative execution).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol, TypeVar

from sinkv2._writer import SinkWriter

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "ArrowSinkWriter",
    "SupportsAbort",
    "SupportsAttemptCleanup",
    "SupportsCommittedCheckpoints",
]

CommT_contra = TypeVar("CommT_contra", contravariant=True)


class ArrowSinkWriter(Protocol):
    """A writer that takes whole Arrow record batches (sinkv2 extension).

    Required: `write_arrow_batch`. A writer that has it gets every element of its
    partition as ``pyarrow.RecordBatch``es, with no per-row Python, instead of
    calls to ``write``. The rest of the lifecycle (``flush``, ``prepare_commit``,
    ``snapshot_state``, ``close``) is unchanged.
    """

    def write_arrow_batch(self, batch: pyarrow.RecordBatch, context: SinkWriter.Context) -> None:
        """Add every row of ``batch``; it may be buffered until ``flush``."""


class SupportsAttemptCleanup(Protocol):
    """Mixin: remove what losing task attempts staged (sinkv2 extension).

    Required: `clean_up_attempts`. On Spark several attempts of one subtask may
    write (retries, speculative execution) and only one attempt's committables
    are committed. Writers name their staged output with
    ``WriterInitContext.get_attempt_token()``; this hook then removes the rest.
    """

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Remove everything attempts of job ``job_id`` staged, except the kept attempts'.

        Called on the driver once the writer stage is over: with the winning
        attempts' tokens after success; with none when nothing of the run will be
        committed (the writer stage failed, or the pre-commit step did after it), so
        the same job may be cleaned twice. An attempt
        that is still running (a speculative copy being killed) may stage more after
        this call, so staged output must be invisible to readers until committed.
        Must be idempotent and must never touch committed output.
        """


class SupportsAbort(Protocol[CommT_contra]):
    """Mixin: discard committables that will never be committed (sinkv2 extension).

    Required: `abort`. Called for the committables of an epoch the commit
    coordinator aborts, e.g. a crashed run's pending epoch that the next run
    replaces (RisingWave's ``SinkCommitCoordinator.abort``).
    """

    def abort(self, committables: Collection[CommT_contra]) -> None:
        """Remove the staged output these committables describe.

        Some of them may have been committed already by a run that crashed before
        recording it: abort must leave committed output alone, and be idempotent.
        """


class SupportsCommittedCheckpoints(Protocol):
    """Mixin: the destination knows which checkpoints of a sink id it holds (sinkv2 extension).

    Required: `is_checkpoint_committed` and `mark_checkpoint_committed`. A second line
    of defence behind the commit state store: a batch run with a checkpoint id whose
    store has no record of that checkpoint (a new store - say the default one, under
    another working directory - or a lost one) asks the destination before writing,
    and a checkpoint the destination holds is not written again, whatever the store
    says. Needs `SupportsCommitter`. Streams are not asked: their checkpoint ids are
    the query's, recorded by Spark.
    """

    def is_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> bool:
        """Whether the destination holds checkpoint ``checkpoint_id`` of ``sink_id``.

        Called on the driver before the writers run, only for a checkpoint the
        commit state store has no record of. ``True`` makes the run write nothing:
        it records the checkpoint committed in the store and reports it already
        committed. Must not change anything.
        """

    def mark_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> None:
        """Leave a mark at the destination that ``checkpoint_id`` of ``sink_id`` is in it.

        Called on the driver after the committer committed the checkpoint and
        before the store records it committed, so a crash in between leaves the
        epoch pending in the store and the next run commits (idempotently) and
        marks it again. Must be idempotent. A sink whose committer writes the mark
        atomically with the data (e.g. in the same transaction) may do nothing here.
        """
