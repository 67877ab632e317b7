"""What the runtime tells writers and committers about where they run.

The protocols mirror Flink's ``InitContext``, ``WriterInitContext`` and
``CommitterInitContext``. The ``Basic*`` classes are plain-value implementations:
the Spark runtime builds them from Spark's task context, and tests or hand-driven
sinks build them directly.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final, Protocol

import attrs

from sinkv2._metrics import (
    InMemorySinkCommitterMetricGroup,
    InMemorySinkWriterMetricGroup,
    MetricGroup,
    SinkCommitterMetricGroup,
    SinkWriterMetricGroup,
)
from sinkv2._time import CooperativeProcessingTimeService, ProcessingTimeService
from sinkv2._watermark import NO_WATERMARK

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "INITIAL_CHECKPOINT_ID",
    "BasicCommitterInitContext",
    "BasicSinkWriterContext",
    "BasicWriterInitContext",
    "CommitterInitContext",
    "InitContext",
    "WriterInitContext",
]

INITIAL_CHECKPOINT_ID: Final[int] = 1
"""The first checkpoint id of a streaming job (Flink's ``InitContext.INITIAL_CHECKPOINT_ID``)."""


class InitContext(Protocol):
    """Facts about the subtask a writer or committer is created for."""

    def get_subtask_id(self) -> int:
        """This subtask's index, from 0 (on Spark: the partition id)."""
        ...

    def get_number_of_parallel_subtasks(self) -> int:
        """The parallelism (on Spark: the number of partitions of the writer stage)."""
        ...

    def get_attempt_number(self) -> int:
        """How many times this subtask was attempted before, starting at 0."""
        ...

    def get_restored_checkpoint_id(self) -> int | None:
        """The checkpoint the state was restored from, or ``None`` on a fresh start."""
        ...

    def get_job_id(self) -> str:
        """An id of the running job.

        It may change on a manual restart: never use it to name anything that must
        survive one.
        """
        ...

    def metric_group(self) -> MetricGroup:
        """Where to register metrics."""
        ...


class WriterInitContext(InitContext, Protocol):
    """What a writer is created with (Flink's ``WriterInitContext``)."""

    def metric_group(self) -> SinkWriterMetricGroup:
        """The writer's metric group, with Flink's send counters."""
        ...

    def get_processing_time_service(self) -> ProcessingTimeService:
        """Current time and timers, e.g. for time-based flushing."""
        ...

    def get_input_schema(self) -> pyarrow.Schema | None:
        """The schema of the rows this job writes, as Arrow (sinkv2 extension).

        On Spark: the DataFrame's schema after the pre-write topology, converted as
        ``mapInArrow`` converts it, so a table sink can create a typed table before
        its first element. ``None`` where the runtime does not know it.
        """
        ...

    def get_attempt_token(self) -> str:
        """A string unique to this attempt of this subtask (sinkv2 extension).

        Several attempts of one subtask may run at once (retries, speculative
        execution). Name staged output with this token so that attempts never
        overwrite each other and the output of attempts that lost can be found and
        removed.
        """
        ...


class CommitterInitContext(InitContext, Protocol):
    """What a committer is created with (Flink's ``CommitterInitContext``)."""

    def metric_group(self) -> SinkCommitterMetricGroup:
        """The committer's metric group, with Flink's committable counters."""
        ...

    def get_input_schema(self) -> pyarrow.Schema | None:
        """The input's Arrow schema (sinkv2 extension), as `WriterInitContext` has it."""
        ...


def _subtask_fields_are_consistent(
    instance: _BasicInitContext, attribute: attrs.Attribute[int], value: int
) -> None:
    if not 0 <= instance.subtask_id < instance.number_of_parallel_subtasks:
        raise ValueError(
            f"subtask_id must be in [0, number_of_parallel_subtasks) (got subtask_id="
            f"{instance.subtask_id!r}, number_of_parallel_subtasks="
            f"{instance.number_of_parallel_subtasks!r})"
        )
    if instance.attempt_number < 0:
        raise ValueError(f"attempt_number must be >= 0 (got {instance.attempt_number!r})")


@attrs.frozen(kw_only=True)
class _BasicInitContext:
    subtask_id: int = 0
    number_of_parallel_subtasks: int = 1
    attempt_number: int = attrs.field(default=0, validator=_subtask_fields_are_consistent)
    job_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    restored_checkpoint_id: int | None = None
    input_schema: pyarrow.Schema | None = None

    def get_subtask_id(self) -> int:
        """This subtask's index."""
        return self.subtask_id

    def get_number_of_parallel_subtasks(self) -> int:
        """The parallelism."""
        return self.number_of_parallel_subtasks

    def get_attempt_number(self) -> int:
        """The attempt number, from 0."""
        return self.attempt_number

    def get_restored_checkpoint_id(self) -> int | None:
        """The restored checkpoint, or ``None``."""
        return self.restored_checkpoint_id

    def get_job_id(self) -> str:
        """The job id."""
        return self.job_id

    def get_input_schema(self) -> pyarrow.Schema | None:
        """The input's Arrow schema, or ``None``."""
        return self.input_schema


@attrs.frozen(kw_only=True)
class BasicWriterInitContext(_BasicInitContext):
    """A `WriterInitContext` made of plain values (sinkv2 extension).

    The job id defaults to a fresh random one, and the attempt token to one derived
    from the job id, subtask and attempt number, so two hand-driven runs never
    share staging names.
    """

    metrics: InMemorySinkWriterMetricGroup = attrs.field(factory=InMemorySinkWriterMetricGroup)
    processing_time_service: ProcessingTimeService = attrs.field(
        factory=CooperativeProcessingTimeService
    )
    attempt_token: str | None = None

    def metric_group(self) -> InMemorySinkWriterMetricGroup:
        """The writer's metric group."""
        return self.metrics

    def get_processing_time_service(self) -> ProcessingTimeService:
        """The processing-time service."""
        return self.processing_time_service

    def get_attempt_token(self) -> str:
        """The attempt token."""
        if self.attempt_token is not None:
            return self.attempt_token
        return f"{self.job_id}-{self.subtask_id}-{self.attempt_number}"


@attrs.frozen(kw_only=True)
class BasicCommitterInitContext(_BasicInitContext):
    """A `CommitterInitContext` made of plain values (sinkv2 extension)."""

    metrics: InMemorySinkCommitterMetricGroup = attrs.field(
        factory=InMemorySinkCommitterMetricGroup
    )

    def metric_group(self) -> InMemorySinkCommitterMetricGroup:
        """The committer's metric group."""
        return self.metrics


@attrs.define(kw_only=True)
class BasicSinkWriterContext:
    """A mutable `SinkWriter.Context` the runtime updates per element (sinkv2 extension).

    Attributes:
        watermark: The current watermark in ms, `NO_WATERMARK` before the first.
        element_timestamp: The current element's event time in ms, if it has one.
    """

    watermark: int = NO_WATERMARK
    element_timestamp: int | None = None

    def current_watermark(self) -> int:
        """The current watermark in ms."""
        return self.watermark

    def timestamp(self) -> int | None:
        """The current element's event time in ms, or ``None``."""
        return self.element_timestamp
