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

__all__ = ["ArrowSinkWriter", "SupportsAbort", "SupportsAttemptCleanup"]

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
