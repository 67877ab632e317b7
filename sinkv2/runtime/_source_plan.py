"""Plan a bounded read: run the enumerator to "no more splits" before any reader starts.

An engine that fixes its tasks before reading (Spark's batch planner: ``partitions()``
runs once, on the driver, and no task can ask for more later) cannot let readers
pull splits as they go, as Flink's batch scheduler does. So the plan does the pulling
up front: every subtask registers, then each subtask that has not been told "no more
splits" asks for a split in turn (``handle_split_request``), round after round, until
every subtask has been told. Round-robin asking gives a lazy enumerator (Flink's file
and sequence sources assign one split per request) an even spread; an eager one
(assign everything in ``start``) is planned as it assigns.

The plan keeps FLIP-27's rules at the moment the enumerator calls: assignments go to
registered subtasks, each split id once, never after ``signal_no_more_splits``; a
bounded enumerator that stops answering is an error naming the subtask, not a hang.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, final

import attrs

from sinkv2._metrics import InMemoryMetricGroup, MetricGroup
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.runtime._enumerator_calls import enumerator_call
from sinkv2.source import (
    Boundedness,
    ReaderInfo,
    SourceContractError,
    SourceEvent,
    SplitsAssignment,
    check_enumerator,
)
from sinkv2.source._context import SOURCE_ID_ATTRIBUTE

__all__ = [
    "DEFAULT_PLANNING_TIMEOUT_S",
    "BoundedPlan",
    "PlanningContext",
    "plan_bounded_read",
    "split_id_of",
]

R = TypeVar("R")

DEFAULT_PLANNING_TIMEOUT_S: Final = 300.0
"""How long a bounded enumerator may wait on its own timers before the plan gives up."""


def split_id_of(split: object, method: str) -> str:
    """The split's id, or a `SourceContractError` naming ``method`` when it has none."""
    get = getattr(split, "split_id", None)
    if not callable(get):
        raise SourceContractError(
            f"{describe(split)} is not a SourceSplit (no split_id() method), found in {method}()",
            method=method,
        )
    split_id = get()
    if not isinstance(split_id, str):
        raise SourceContractError(
            f"split_id() of {short_repr(split)} returned {describe(split_id)}; return a str",
            method=method,
        )
    return split_id


@final
@attrs.frozen
class BoundedPlan:
    """What each reader subtask reads: its splits (framed by the split serializer).

    Attributes:
        parallelism: The number of reader subtasks the enumerator planned for.
        splits: Per subtask, its splits in assignment order, each framed with the
            split serializer's version (Flink's ``SimpleVersionedSerialization``).
        events: Per subtask, the events the enumerator sent it while planning, to be
            handed to its reader before it reads.
    """

    parallelism: int
    splits: tuple[tuple[bytes, ...], ...]
    events: tuple[tuple[SourceEvent, ...], ...]

    @property
    def split_count(self) -> int:
        """The number of splits over all subtasks."""
        return sum(len(part) for part in self.splits)


@attrs.define
class _Timer:
    due: float
    order: int
    callable: Callable[[], Any]
    handler: Callable[[Any, BaseException | None], None]
    period_s: float

    def __lt__(self, other: _Timer) -> bool:
        return (self.due, self.order) < (other.due, other.order)


class PlanningContext:
    """The enumerator's context on the driver: every subtask registered, nothing read yet.

    A bounded plan keeps everything assigned in `assigned`; a stream's coordinator
    takes what was assigned (and sent) since it last looked with `take_assigned`
    and `take_events`.
    """

    def __init__(
        self, parallelism: int, metrics: MetricGroup, source_id: str | None = None
    ) -> None:
        setattr(self, SOURCE_ID_ATTRIBUTE, source_id)  # `sinkv2.source.source_id_of`
        self._parallelism = parallelism
        self._readers = {i: ReaderInfo(subtask_id=i, location=None) for i in range(parallelism)}
        self._metrics = metrics
        self.assigned: list[list[Any]] = [[] for _ in range(parallelism)]
        self.events: list[list[SourceEvent]] = [[] for _ in range(parallelism)]
        self.no_more: set[int] = set()
        self.split_ids: dict[str, int] = {}
        self.queued: collections.deque[Callable[[], None]] = collections.deque()
        self.timers: list[_Timer] = []
        self._order = itertools.count()

    def current_parallelism(self) -> int:
        return self._parallelism

    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        return dict(self._readers)

    def _check_subtask(self, subtask_id: object, method: str) -> int:
        if not isinstance(subtask_id, int) or subtask_id not in self._readers:
            raise SourceContractError(
                f"{method}() named subtask {subtask_id!r}, which is not a registered reader "
                f"(registered: 0..{self._parallelism - 1})",
                method=method,
            )
        return subtask_id

    def assign_split(self, split: Any, subtask_id: int) -> None:
        subtask = self._check_subtask(subtask_id, "assign_split")
        split_id = split_id_of(split, "assign_split")
        if subtask in self.no_more:
            raise SourceContractError(
                f"split {split_id!r} was assigned to subtask {subtask} after "
                "signal_no_more_splits() was sent to it; assign every split first",
                method="assign_split",
                split_id=split_id,
            )
        if split_id in self.split_ids:
            raise SourceContractError(
                f"split {split_id!r} was assigned twice (to subtask {self.split_ids[split_id]} "
                f"and to subtask {subtask}); a split is read by one reader, once",
                method="assign_split",
                split_id=split_id,
            )
        self.split_ids[split_id] = subtask
        self.assigned[subtask].append(split)

    def assign_splits(self, new_split_assignments: SplitsAssignment[Any]) -> None:
        for subtask, splits in new_split_assignments.assignment.items():
            for split in splits:
                self.assign_split(split, subtask)

    def signal_no_more_splits(self, subtask_id: int) -> None:
        self.no_more.add(self._check_subtask(subtask_id, "signal_no_more_splits"))

    def call_async(
        self,
        callable: Callable[[], R],
        handler: Callable[[R | None, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> None:
        due = time.monotonic() + max(initial_delay_ms, 0) / 1000
        timer = _Timer(due, next(self._order), callable, handler, max(period_ms, 0) / 1000)
        heapq.heappush(self.timers, timer)

    def send_event_to_source_reader(self, subtask_id: int, event: SourceEvent) -> None:
        self.events[self._check_subtask(subtask_id, "send_event_to_source_reader")].append(event)

    def run_in_coordinator_thread(self, runnable: Callable[[], None]) -> None:
        self.queued.append(runnable)

    def metric_group(self) -> MetricGroup:
        return self._metrics

    def take_assigned(self) -> list[list[Any]]:
        """Per subtask, the splits assigned since the last call."""
        taken = self.assigned
        self.assigned = [[] for _ in range(self._parallelism)]
        return taken

    def take_events(self) -> list[list[SourceEvent]]:
        """Per subtask, the events sent since the last call."""
        taken = self.events
        self.events = [[] for _ in range(self._parallelism)]
        return taken

    def run_due(self, *, wait: bool, timers: bool = True) -> bool:
        """Run queued runnables and due timers; with ``wait``, sleep until the next is due.

        ``timers=False`` runs only the queued runnables: an available-now read
        discovers nothing after its start.
        """
        ran = False
        while self.queued:
            self.queued.popleft()()
            ran = True
        if not timers:
            return ran
        if wait and self.timers and not ran:
            time.sleep(max(self.timers[0].due - time.monotonic(), 0))
        while self.timers and self.timers[0].due <= time.monotonic():
            timer = heapq.heappop(self.timers)
            try:
                result, error = timer.callable(), None
            except Exception as raised:  # noqa: BLE001  # the handler gets it, as in Flink
                result, error = None, raised
            timer.handler(result, error)
            if timer.period_s > 0:
                timer.due = time.monotonic() + timer.period_s
                heapq.heappush(self.timers, timer)
            ran = True
        return ran


def _check_bounded(source: Any) -> None:
    boundedness = source.get_boundedness()
    if boundedness is not Boundedness.BOUNDED:
        raise SourceContractError(
            f"{describe(source)} is {getattr(boundedness, 'name', boundedness)}; a bounded read "
            "plans every split before reading, which only a BOUNDED source allows. Read an "
            "unbounded source as a stream",
            method="get_boundedness",
        )


def plan_bounded_read(
    source: Any,
    parallelism: int,
    *,
    timeout_s: float = DEFAULT_PLANNING_TIMEOUT_S,
) -> BoundedPlan:
    """Run ``source``'s enumerator until every subtask was told "no more splits".

    Args:
        source: A BOUNDED FLIP-27 `Source`.
        parallelism: The number of reader subtasks to plan for (>= 1).
        timeout_s: How long the enumerator's own timers (``call_async`` with a delay
            or a period) may keep the plan waiting.

    Raises:
        SourceContractError: The source is not bounded, or its enumerator broke an
            assignment rule, or stopped answering split requests without telling a
            subtask that no more splits come.
        ValueError: ``parallelism`` is not a positive int.
    """
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise ValueError(f"parallelism must be a positive int (got {parallelism!r})")
    _check_bounded(source)
    context = PlanningContext(parallelism, InMemoryMetricGroup())
    enumerator = source.create_enumerator(context)
    check_enumerator(enumerator)
    deadline = time.monotonic() + timeout_s
    try:
        with enumerator_call("start() or add_reader()", None):
            enumerator.start()
            for subtask in range(parallelism):
                enumerator.add_reader(subtask)
        _pump(enumerator, context, deadline, timeout_s)
    finally:
        enumerator.close()
    serializer = source.get_split_serializer()
    framed = tuple(
        tuple(SimpleVersionedSerialization.write_version_and_serialize(serializer, s) for s in part)
        for part in context.assigned
    )
    return BoundedPlan(parallelism, framed, tuple(tuple(e) for e in context.events))


def _pump(enumerator: Any, context: PlanningContext, deadline: float, timeout_s: float) -> None:
    """Ask for splits round-robin until every subtask heard "no more splits"."""
    while len(context.no_more) < context.current_parallelism():
        before = len(context.split_ids), len(context.no_more)
        context.run_due(wait=False)
        for subtask in range(context.current_parallelism()):
            if subtask not in context.no_more:
                with enumerator_call("handle_split_request()", None):
                    enumerator.handle_split_request(subtask, None)
                context.run_due(wait=False)
        if (len(context.split_ids), len(context.no_more)) != before:
            continue
        if context.timers and time.monotonic() < deadline:
            context.run_due(wait=True)
            continue
        waiting = sorted(set(range(context.current_parallelism())) - context.no_more)
        why = (
            f"its timers ran for {timeout_s:g} s" if context.timers else "it has nothing scheduled"
        )
        raise SourceContractError(
            f"the enumerator of a BOUNDED source answered a split request of subtask(s) "
            f"{waiting} with neither a split nor signal_no_more_splits(), and {why}; a bounded "
            "enumerator must end every reader with signal_no_more_splits() once its splits "
            "are assigned",
            method="handle_split_request",
        )
