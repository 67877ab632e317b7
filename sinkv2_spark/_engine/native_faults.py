"""Task failures for native writes: the contract kit's faults, injected into Spark's write.

A sink that lets Spark write its files (`sinkv2.SupportsNativeFileWrite`) runs no
writer of its own to raise from, so the kit puts the failure into the input
instead: a pass-through ``mapInArrow`` in the same stage as Spark's write, which
hands the write every row before the scheduled element and then raises. The task
fails with part of its partition written by Spark's file writer (a half-written
attempt file under ``_temporary``), exactly as a task that dies mid-write; an
element index past the end of the partition fails the task after all its rows were
written, before its commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import pyarrow as pa

from sinkv2 import NativeFileWrite, NativeWriteUnavailable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["NativeTaskFailure", "with_failing_input"]


class NativeTaskFailure(RuntimeError):
    """The failure injected into a native write's task; Spark retries the task."""


@attrs.frozen
class _FailOnSchedule:
    """``mapInArrow`` pass-through that raises at the scheduled element (picklable)."""

    schedule: Mapping[tuple[int, int], int]

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415  # only exists inside a task

        task = TaskContext.get()
        if task is None:
            raise RuntimeError("the failing input must run inside a Spark task")
        where = f"partition {task.partitionId()} attempt {task.attemptNumber()}"
        fail_at = self.schedule.get((task.partitionId(), task.attemptNumber()))
        seen = 0
        for batch in batches:
            if fail_at is not None and seen <= fail_at < seen + batch.num_rows:
                if fail_at > seen:
                    yield batch.slice(0, fail_at - seen)  # written before the failure
                raise NativeTaskFailure(f"injected failure at element {fail_at} of {where}")
            seen += batch.num_rows
            yield batch
        if fail_at is not None:
            raise NativeTaskFailure(
                f"injected failure after all {seen} elements of {where}, before its commit"
            )


def _failing(df: DataFrame, schedule: Mapping[tuple[int, int], int]) -> DataFrame:
    """``df`` through `_FailOnSchedule`, columns renamed by position around it."""
    names = list(df.columns)
    positional = df.toDF(*(f"_c{i}" for i in range(len(names))))
    return positional.mapInArrow(_FailOnSchedule(dict(schedule)), positional.schema).toDF(*names)


def with_failing_input(
    plan: NativeFileWrite | NativeWriteUnavailable,
    input: Any,
    schedule: Mapping[tuple[int, int], int],
) -> NativeFileWrite | NativeWriteUnavailable:
    """``plan`` with its input failing tasks on ``schedule`` ((partition, attempt) -> element)."""
    if not isinstance(plan, NativeFileWrite) or not schedule:
        return plan
    source = plan.input if plan.input is not None else input
    return attrs.evolve(plan, input=_failing(source, schedule))
