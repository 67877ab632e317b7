"""What one epoch of a sink did: `SinkResult`, engine-neutral (batch runs, micro-batches)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from sinkv2.metrics import (
    CURRENT_SEND_TIME,
    NUM_BYTES_SEND,
    NUM_RECORDS_SEND,
    NUM_RECORDS_SEND_ERRORS,
)

if TYPE_CHECKING:
    from sinkv2.runtime._seam import EpochCommit, WriterStageOutput

__all__ = ["CommitStatus", "SinkResult", "epoch_result"]


class CommitStatus(enum.Enum):
    """How the epoch of a run ended up committed."""

    COMMITTED = "committed"
    """This run wrote the data and committed it."""
    RECOMMITTED = "recommitted"
    """An earlier run wrote the data and crashed before finishing its commit; this run
    committed the stored committables without writing anything again."""
    ALREADY_COMMITTED = "already committed"
    """The epoch was committed before; this run wrote and committed nothing."""


@attrs.frozen(kw_only=True)
class SinkResult:
    """The outcome of one epoch: a `SinkTopologyTranslator.apply` call, or a micro-batch.

    Attributes:
        sink_id: The commit history the run belongs to.
        epoch: The run's epoch in the commit state store: the explicit checkpoint id,
            or the next free number for a run without one.
        checkpoint_id: The checkpoint id the committables carry: the explicit
            checkpoint id, or ``END_OF_INPUT`` for a run without one. (Writers always
            end with ``snapshot_state(END_OF_INPUT)``: a batch task is a bounded input.)
        status: Whether data was committed now, recommitted, or already committed.
        job_id: This run's id; attempt tokens start with it.
        records_written: Elements handed to writers (0 unless the writer stage ran).
        subtasks: Writer subtasks (Spark partitions) that ran.
        committed: Committables committed by this run.
        already_committed: Committables the committer found committed before.
        failed_with_known_reason: Committables dropped with a known reason.
        retries: Commit retries the committer asked for.
        aborted_epochs: Pending epochs of crashed runs without a checkpoint id that
            this run aborted (their data is written again by whoever re-runs them).
        recommitted_epochs: Pending epochs of crashed runs with a checkpoint id that
            this run committed before its own (other than its own epoch).
        cleaned_jobs: Earlier runs that died or failed, whose staged output this run
            removed.
        stage_seconds: Wall time per stage, in pipeline order.
        writer_metrics: Writer metrics over all subtasks, by Flink's names: counters
            summed, gauges (such as ``currentSendTime``) at their largest. Only what
            some writer measured: a counter no writer incremented (say
            ``numBytesSend`` of a sink that does not count bytes) is absent, not 0.
        native_write: The engine's own file writer wrote the data files
            (`SupportsNativeFileWrite`); ``False`` when the sink's writers did, or
            nothing was written.
        native_write_unavailable: The sink supports native writes, but this run's
            configuration or input did not allow one: why, in the sink's words. The
            sink's own writers wrote the data.
        store_warning: Why the commit state store may not be the one this sink id's
            earlier runs used, or ``None``: set when a run with a checkpoint id finds
            no earlier epoch of the sink id in the store (a new store, or a sink id
            new to it) - expected on a sink id's first run; otherwise the store is
            in the wrong place, and checkpoints committed before can be written
            twice. Also logged as a WARNING (``sinkv2.coordinator``) with the store.
    """

    sink_id: str
    epoch: int
    checkpoint_id: int
    status: CommitStatus
    job_id: str
    records_written: int = 0
    subtasks: int = 0
    committed: int = 0
    already_committed: int = 0
    failed_with_known_reason: int = 0
    retries: int = 0
    aborted_epochs: tuple[int, ...] = ()
    recommitted_epochs: tuple[int, ...] = ()
    cleaned_jobs: tuple[str, ...] = ()
    stage_seconds: Mapping[str, float] = attrs.field(factory=dict)
    writer_metrics: Mapping[str, float] = attrs.field(factory=dict)
    native_write: bool = False
    native_write_unavailable: str | None = None
    store_warning: str | None = None

    def summary(self) -> str:
        """A readable table of everything above."""
        rows: list[tuple[str, str]] = [
            ("sink id", self.sink_id),
            ("epoch", str(self.epoch)),
            ("status", self.status.value),
            ("job id", self.job_id),
            ("records written", f"{self.records_written:,}"),
            ("writer subtasks", str(self.subtasks)),
        ]
        if self.native_write:
            rows.append(("writer", "the engine's native file writer"))
        elif self.native_write_unavailable is not None:
            rows.append(("writer", f"the sink's writers: {self.native_write_unavailable}"))
        if self.store_warning is not None:
            rows.append(("WARNING", self.store_warning))
        rows += [
            ("committables committed", str(self.committed)),
            ("  already committed", str(self.already_committed)),
            ("  dropped (known reason)", str(self.failed_with_known_reason)),
            ("commit retries", str(self.retries)),
        ]
        if self.aborted_epochs:
            rows.append(("aborted stale epochs", ", ".join(map(str, self.aborted_epochs))))
        if self.recommitted_epochs:
            rows.append(("recommitted stale epochs", ", ".join(map(str, self.recommitted_epochs))))
        if self.cleaned_jobs:
            rows.append(("cleaned up earlier jobs", ", ".join(self.cleaned_jobs)))
        rows.extend(
            (f"time: {stage}", _milliseconds(seconds))
            for stage, seconds in self.stage_seconds.items()
        )
        if self.stage_seconds:
            rows.append(("time: total", _milliseconds(sum(self.stage_seconds.values()))))
        # Flink's writer metrics always get a row once writers ran: a sink that never
        # touched one did not measure it, and a 0 would say it did.
        names = set(self.writer_metrics) | (set(_WRITER_METRICS) if self.subtasks else set())
        rows.extend(
            (f"metric: {name}", _number(self.writer_metrics[name]))
            if name in self.writer_metrics
            else (f"metric: {name}", "not measured")
            for name in sorted(names)
        )
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)

    def __str__(self) -> str:
        return self.summary()


def epoch_result(
    base: SinkResult,
    status: CommitStatus,
    commit: EpochCommit,
    written: WriterStageOutput | None,
    stage_seconds: Mapping[str, float],
) -> SinkResult:
    """``base`` completed with what a commit did and, if it wrote, what the writers did.

    The one place a `SinkResult` learns its numbers: batch epochs and streaming
    checkpoints, committed now or recommitted from the store.
    """
    outcome = commit.outcome
    return attrs.evolve(
        base,
        status=status,
        stage_seconds=dict(stage_seconds),
        committed=len(outcome.committed),
        already_committed=len(outcome.already_committed),
        failed_with_known_reason=len(outcome.failed_with_known_reason),
        retries=outcome.retries,
        records_written=written.records if written else 0,
        subtasks=written.subtasks if written else 0,
        writer_metrics=dict(written.metrics) if written else {},
        native_write=written.native_write if written else False,
        native_write_unavailable=written.native_write_unavailable if written else None,
    )


_WRITER_METRICS: tuple[str, ...] = (
    NUM_RECORDS_SEND,
    NUM_BYTES_SEND,
    NUM_RECORDS_SEND_ERRORS,
    CURRENT_SEND_TIME,
)
"""Flink's writer metrics, which `SinkResult.summary` shows measured or not."""


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
