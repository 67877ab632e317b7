"""The contract-test kit on Spark: a sink through `SinkTopologyTranslator` under task failures.

``sinkv2.testing.check_sink`` checks the lifecycle in process. This runner checks
the same sink where it will run: each hypothesis example makes a fresh destination,
picks a schedule of task failures (which attempt of which subtask fails at which
element), runs ``SinkTopologyTranslator.apply`` with the sink's writers wrapped so
that they raise on schedule, and compares what the destination shows with the
expected elements. Spark retries the failed tasks; the losing attempts' output must
never show up.

The number of examples: the ``examples`` argument (default 5), overridden by
``$SINKV2_KIT_EXAMPLES`` or pytest's ``--sinkv2-examples``. Each example is a few
Spark jobs, so keep it small.
"""

from __future__ import annotations

import copy
import re
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sinkv2 import DeliveryGuarantee, SinkCapabilities, WriterInitContext, inspect_sink
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitRetryPolicy, SqliteCommitStateStore
from sinkv2.testing import Multiset, SinkUnderTest, resolve_examples
from sinkv2_spark._doors.apply import SinkTopologyTranslator
from sinkv2_spark._engine.connect import master, number_of_partitions
from sinkv2_spark._engine.native_faults import with_failing_input

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FailureSchedule", "check_sink_on_spark", "task_retries", "with_task_failures"]

FailureSchedule = Mapping[tuple[int, int], int]
"""(subtask, attempt number) -> the element index at which that attempt's writer raises.

An index at or past the end of the partition fails the attempt at ``flush(True)``,
after everything was staged.
"""

_LOCAL_MASTER: Final = re.compile(r"local\[(\d+|\*),\s*(\d+)\]")
_MAX_FAILURES_PER_EXAMPLE: Final = 3
_LOST_HINT: Final = (
    "a retried task writes its partition again from a fresh writer, so the winning "
    "attempt's writer must hand everything it was given to prepare_commit (flush(True) "
    "writes what is still buffered), clean_up_attempts must keep the attempts it is "
    "told to keep, and the committer must commit every committable"
)


class InjectedTaskFailure(RuntimeError):
    """The failure the runner injects into a writer; Spark retries the task."""


class _FaultInjectingWriter:
    """Delegates to the sink's writer and raises at the scheduled element."""

    def __init__(self, writer: Any, fail_at: int | None, where: str) -> None:
        self._writer = writer
        self._fail_at = fail_at
        self._where = where
        self._written = 0

    def _advance(self, count: int) -> None:
        if self._fail_at is not None and self._written <= self._fail_at < self._written + count:
            raise InjectedTaskFailure(
                f"injected failure at element {self._fail_at} of {self._where}"
            )
        self._written += count

    def write(self, element: Any, context: Any) -> None:
        self._advance(1)
        self._writer.write(element, context)

    def flush(self, end_of_input: bool) -> None:
        if end_of_input and self._fail_at is not None and self._fail_at >= self._written:
            raise InjectedTaskFailure(
                f"injected failure at flush(True) of {self._where}, after {self._written} elements"
            )
        self._writer.flush(end_of_input)

    def write_watermark(self, watermark: Any) -> None:
        self._writer.write_watermark(watermark)

    def prepare_commit(self) -> Collection[Any]:
        return self._writer.prepare_commit()  # type: ignore[no-any-return]

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        return self._writer.snapshot_state(checkpoint_id)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._writer.close()


class _FaultInjectingArrowWriter(_FaultInjectingWriter):
    def write_arrow_batch(self, batch: Any, context: Any) -> None:
        self._advance(batch.num_rows)
        self._writer.write_arrow_batch(batch, context)


def _wrap(writer: Any, schedule: FailureSchedule, context: WriterInitContext) -> Any:
    subtask, attempt = context.get_subtask_id(), context.get_attempt_number()
    where = f"subtask {subtask} attempt {attempt}"
    fail_at = schedule.get((subtask, attempt))
    if SinkCapabilities.is_arrow_writer(writer):
        return _FaultInjectingArrowWriter(writer, fail_at, where)
    return _FaultInjectingWriter(writer, fail_at, where)


def with_task_failures(sink: Any, schedule: FailureSchedule) -> Any:
    """A copy of ``sink`` whose writers raise as ``schedule`` says; otherwise the same sink.

    The copy is an instance of a subclass of the sink's class that only changes
    ``create_writer`` and ``restore_writer``, so it implements the same mixins.
    A writer raises ``InjectedTaskFailure`` (a ``RuntimeError``) before the element at
    its scheduled index, or at ``flush(True)`` if the index is past the end of its
    partition; Spark then retries the task. For a sink whose files Spark writes
    (`sinkv2.SupportsNativeFileWrite`), the copy also changes
    ``plan_native_file_write``: the write's input raises in the same way, inside
    the task that writes, after handing Spark every element before the scheduled
    one (past the end: after all of them, before the task commits).

    Args:
        sink: The sink to copy; it is not changed.
        schedule: (subtask, attempt number) -> the element index at which that
            attempt's writer raises; attempts not in it write normally.

    Returns:
        The copy, to pass to ``SinkTopologyTranslator.apply`` instead of ``sink``.
    """
    base = type(sink)
    frozen = dict(schedule)

    def create_writer(self: Any, context: WriterInitContext) -> Any:
        return _wrap(base.create_writer(self, context), frozen, context)

    namespace: dict[str, Any] = {"__slots__": (), "create_writer": create_writer}
    if callable(getattr(base, "restore_writer", None)):

        def restore_writer(self: Any, context: WriterInitContext, states: Any) -> Any:
            return _wrap(base.restore_writer(self, context, states), frozen, context)

        namespace["restore_writer"] = restore_writer
    if callable(getattr(base, "plan_native_file_write", None)):

        def plan_native_file_write(self: Any, input: Any) -> Any:
            return with_failing_input(base.plan_native_file_write(self, input), input, frozen)

        namespace["plan_native_file_write"] = plan_native_file_write
    faulty_class = type(f"{base.__name__}WithTaskFailures", (base,), namespace)
    faulty_class.__qualname__ = faulty_class.__name__
    faulty = copy.copy(sink)
    object.__setattr__(faulty, "__class__", faulty_class)  # also for frozen attrs classes
    return faulty


def task_retries(master: str, max_failures: str | None) -> int:
    """How often Spark retries a failed task, from the master URL and ``spark.task.maxFailures``.

    Args:
        master: The master URL: ``local[N,F]`` gives F attempts per task, other
            ``local`` masters one; a cluster master takes ``max_failures``.
        max_failures: The session's ``spark.task.maxFailures`` (Spark's default, 4,
            if ``None``).

    Returns:
        The number of retries after a task's first attempt (attempts minus one).

    Raises:
        SinkConfigurationError: Failed tasks are not retried (e.g. master ``local[2]``).
    """
    match = _LOCAL_MASTER.fullmatch(master.replace(" ", ""))
    if match:
        attempts = int(match.group(2))
    elif master.startswith("local"):
        attempts = 1
    else:
        attempts = int(max_failures or 4)
    if attempts < 2:
        raise SinkConfigurationError(
            f"check_sink_on_spark needs a master that retries failed tasks (got {master!r}, "
            "which fails the job at the first task failure); use e.g. local[2,4] (2 cores, "
            "4 attempts per task) or set spark.task.maxFailures"
        )
    return attempts - 1


def check_sink_on_spark(
    spark: SparkSession,
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    data: DataFrame,
    expected: Iterable[object],
    examples: int = 5,
    always: Iterable[FailureSchedule] = (),
    sink_id: str = "sinkv2-kit",
) -> None:
    """Run the sink through `SinkTopologyTranslator` with random task failures; check the output.

    Each example: ``make()`` a fresh destination, pick a failure schedule (up to three
    (subtask, attempt) -> element entries; attempts stay below Spark's retry budget so
    the job succeeds), ``apply(data, sink)`` with a fresh commit state store, then
    compare ``read_back()`` with ``expected``: the same multiset for
    ``EXACTLY_ONCE``, a superset for ``AT_LEAST_ONCE``, nothing for ``NONE``.

    Args:
        spark: A session whose master retries tasks, e.g. ``local[2,4]``; a classic
            or a Spark Connect one (whose server's master counts).
        make: Returns a `SinkUnderTest` on a fresh destination.
        guarantee: The guarantee the sink declares.
        data: The input DataFrame; its partitions are the writer subtasks.
        expected: What the destination must show afterwards (e.g. the input rows as
            dicts, the way ``read_back`` returns them).
        examples: Failure schedules to try; ``$SINKV2_KIT_EXAMPLES`` or
            ``--sinkv2-examples`` override it.
        always: Failure schedules to run first, every time, before the random ones.
        sink_id: The sink id the runs are recorded under.

    Raises:
        AssertionError: The destination does not match; the message names the
            schedule and the elements lost or duplicated.
        SinkConfigurationError: The master does not retry failed tasks.
    """
    retries = task_retries(master(spark), spark.conf.get("spark.task.maxFailures", None))
    wanted = Multiset(expected)
    partitions = max(1, number_of_partitions(data))
    probe = make()
    try:
        inspect_sink(probe.sink)  # fail fast on a half-implemented sink
    finally:
        probe.close()

    schedules = st.dictionaries(
        st.tuples(st.integers(0, partitions - 1), st.integers(0, min(retries, 3) - 1)),
        st.integers(0, max(1, len(wanted))),
        max_size=_MAX_FAILURES_PER_EXAMPLE,
    )

    def survives(schedule: FailureSchedule) -> None:
        sut = make()
        state_dir = Path(tempfile.mkdtemp(prefix="sinkv2-kit-state-"))
        try:
            translator = SinkTopologyTranslator(
                state_store=SqliteCommitStateStore(state_dir / "commit_state.sqlite"),
                retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0),
            )
            result = translator.apply(data, with_task_failures(sut.sink, schedule), sink_id=sink_id)
            if guarantee is DeliveryGuarantee.NONE:
                return
            visible = Multiset(sut.read_back())
            described = (
                f"after apply() with task failures {schedule or 'none'} "
                f"(subtask, attempt) -> element; {result.committed} committed"
            )
            again = (
                "\n\nTo run this schedule first every time: check_sink_on_spark(..., "
                f"always=[{dict(schedule)!r}])"
            )
            changed = visible.describe_value_changes(wanted)
            if changed:
                raise AssertionError(f"{guarantee.name} violated {described}: {changed}{again}")
            lost = wanted.describe_excess(visible, "expected", "visible")
            if lost:
                raise AssertionError(
                    f"{guarantee.name} violated {described}: expected elements are missing: "
                    f"{lost}; {_LOST_HINT}{again}"
                )
            extra = visible.describe_excess(wanted, "visible", "expected")
            if guarantee is DeliveryGuarantee.EXACTLY_ONCE and extra:
                raise AssertionError(
                    f"EXACTLY_ONCE violated {described}: the destination shows more than "
                    f"expected: {extra}; a failed attempt's output became visible{again}"
                )
        finally:
            sut.close()
            shutil.rmtree(state_dir, ignore_errors=True)

    for schedule in always:
        survives(schedule)

    @settings(
        max_examples=resolve_examples(examples),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        database=None,
    )
    @given(schedule=schedules)
    def survives_task_failures(schedule: dict[tuple[int, int], int]) -> None:
        survives(schedule)

    survives_task_failures()
