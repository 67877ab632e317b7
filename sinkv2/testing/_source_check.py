"""`check_source`: Flink's ``SourceTestSuiteBase`` for a Python FLIP-27 source, on the local engine.

Fixed cases first, with Flink's names (one reader; several readers; more readers
than splits; stop and restart from a checkpoint; scale up; scale down; a reader
failure; the readers' ``numRecordsIn``), and three of sinkv2's (a late checkpoint
notification; a checkpoint before every reader registered; an aborted checkpoint),
then random schedules chosen by hypothesis:
checkpoints (notified at once or late), aborted checkpoints, reader failures and
restores with another parallelism at random points. After each, the committed
records are checked as Flink's ``CollectIteratorAssert`` checks them. A failure
names the case, its schedule, the problem (with a hint when late or aborted
checkpoints were in it), the engine's last steps, and Python that runs the case
alone. A source with `SupportsEndPositions` also has its cuts checked
(``_source_end_check``): deterministic, counted, and covering exactly up to the end
position. Each case runs in a thread of its own (``_source_watch``), so that a call
into the source that never returns fails the case instead of hanging it.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import cloudpickle
from hypothesis import HealthCheck, Phase, given, settings

from sinkv2._delivery import DeliveryGuarantee
from sinkv2._pickling import find_unpicklable
from sinkv2._text import describe, short_repr
from sinkv2.source import Boundedness, SourceContractError, inspect_source
from sinkv2.testing._settings import resolve_examples
from sinkv2.testing._source_end_check import check_end_positions
from sinkv2.testing._source_engine import (
    EmittedRecord,
    EngineStep,
    LocalSourceEngine,
    SourceCheckpoint,
)
from sinkv2.testing._source_golden import check_source_golden_samples
from sinkv2.testing._source_plans import (
    FINAL_CHECKPOINT_EVERY,
    MAX_IDLE_STEPS,
    WAIT_FOR_AN_ASSIGNMENT,
    Op,
    Plan,
    fixed_plans,
    hints,
    reproduction,
    schedules,
)
from sinkv2.testing._source_verify import verify_bounded, verify_unbounded
from sinkv2.testing._source_watch import Blocked, Stall, last_step, run_watched

__all__ = ["check_source"]

BLOCKED_IDLE_TIMEOUTS: Final = 30  # a minute by default: a slow call only slows the kit

Row = Mapping[str, Any]
_LOG_SHOWN: Final = 40
_LOG_BEFORE: Final = 20


@attrs.define
class _Expectation:
    bounded: bool
    expected: Sequence[Row] | None
    split_records: Callable[[str], Iterable[Row]] | None
    records_to_read: int
    guarantee: DeliveryGuarantee
    idle_timeout: float = 2.0


class _Run:
    """Carries a plan out: one engine after another, the committed records of each kept."""

    def __init__(self, factory: Callable[[], Any], plan: Plan, want: _Expectation) -> None:
        self.factory = factory
        self.plan = plan
        self.want = want
        self.committed: list[EmittedRecord] = []
        self.split_ids: set[str] = set()
        self.before: list[str] = []  # the last steps of the engine before a restore
        self.last: SourceCheckpoint | None = None
        # One source for the whole run: a restore reads the same storage the run before
        # it read (and acknowledged, or cleaned), as a restored Flink job does.
        self.source = factory()
        self.engine = LocalSourceEngine(
            _shipped(self.source), plan.parallelism, seed=plan.seed, idle_timeout=want.idle_timeout
        )

    def total(self) -> int:
        return len(self.committed) + len(self.engine.committed)

    def apply(self, op: Op, index: int) -> None:
        engine = self.engine
        if op.kind == "steps":
            for _ in range(op.value):
                if engine.step() is not EngineStep.PROGRESS:
                    self._idle_is_a_problem()
                    return
        elif op.kind in ("checkpoint", "checkpoint-late"):
            self.last = engine.checkpoint(notify=op.kind == "checkpoint")
        elif op.kind == "abort":
            engine.abort_checkpoint()
        elif op.kind == "fail":
            engine.fail_reader(op.value % engine.parallelism)
        elif op.kind == "fail-assigned":
            for _ in range(WAIT_FOR_AN_ASSIGNMENT):
                if engine.assigned_since_checkpoint() or engine.step() is not EngineStep.PROGRESS:
                    break
            fresh = engine.assigned_since_checkpoint()
            engine.fail_reader(fresh[0] if fresh else 0)
        else:
            self.committed.extend(engine.committed)
            self.split_ids |= engine.split_ids
            self.before = [*list(engine.log)[-_LOG_BEFORE:], "(restore)"]
            engine.close()
            self.engine = LocalSourceEngine(
                _shipped(self.source),
                op.value,
                seed=self.plan.seed + index + 1,
                checkpoint=self.last,
                idle_timeout=self.want.idle_timeout,
            )

    def _idle_is_a_problem(self) -> None:
        engine = self.engine
        if not self.want.bounded or engine.finished:
            return
        waiting = engine.waiting()
        if never_woke := engine.poll_anyway(waiting):
            raise SourceContractError(never_woke, method="is_available")
        if waiting:
            never = [s for s in waiting if not engine.readers[s].no_more_delivered]
            idle = [s for s in never if not engine.readers[s].given]
            raise SourceContractError(
                f"a bounded source went idle before every reader reached END_OF_INPUT: "
                f"reader(s) {waiting} returned NOTHING_AVAILABLE and their is_available() "
                f"future did not complete within {engine.idle_timeout} s, and nothing else "
                "could happen; "
                + (
                    f"reader(s) {never} never got notify_no_more_splits()"
                    + (f" (reader(s) {idle} got no split at all)" if idle else "")
                    + ": once a bounded source's enumerator has no more splits for a "
                    "reader it must call signal_no_more_splits(subtask) for it, also for a "
                    "reader it assigns nothing (more readers than splits, Flink's "
                    "testIdleReader) and for a reader that registers again after a failure "
                    "or a restore. If the reader waits for data instead, "
                    if never
                    else ""
                )
                + "complete the future when data arrives (or when the reader gets splits or "
                "notify_no_more_splits()), and if the reader's data takes longer to arrive, "
                "pass check_source(..., idle_timeout=<seconds>)",
                method="signal_no_more_splits" if never else "is_available",
            )
        raise SourceContractError(
            "a bounded source went idle before every reader reached END_OF_INPUT: no "
            "reader has data, no split request is unanswered, and no timer is due; an "
            "enumerator must answer every split request with a split or "
            "signal_no_more_splits()",
            method="handle_split_request",
        )

    def finish(self) -> None:
        engine = self.engine
        if self.want.bounded:
            if engine.run() is not EngineStep.FINISHED:
                self._idle_is_a_problem()
            engine.finish()
        else:
            target = self.want.records_to_read
            progress = Stall()
            engine.run(
                # Emitted records count: the checkpoint below commits them, so a source
                # holding just ``target`` records does not wait idle for the next one.
                until=lambda e: (
                    len(self.committed)
                    + len(e.committed)
                    + sum(len(slot.pending) for slot in e.readers)
                    >= target
                    or progress.stalled(sum(seen for seen, _ in e.records_in().values()))
                ),
                checkpoint_every=FINAL_CHECKPOINT_EVERY,
                max_idle=MAX_IDLE_STEPS,
            )
            engine.checkpoint()
            engine.close()
        self.committed.extend(engine.committed)
        self.split_ids |= engine.split_ids

    def problem(self) -> str | None:
        want = self.want
        if want.bounded:
            assert want.expected is not None
            return verify_bounded(self.committed, want.expected, want.guarantee)
        assert want.split_records is not None
        if len(self.committed) < want.records_to_read:
            stopped = self._stopped_splits()
            return (
                f"only {len(self.committed)} records were committed, fewer than the "
                f"{want.records_to_read} asked for, before the source went idle; "
                + (
                    f"these splits hold records that were never committed: {stopped}; a "
                    "reader stopped reading them (one that reads its splits one after "
                    "another never gets past an unbounded one)"
                    if stopped
                    else f"each of the {len(self.split_ids)} splits assigned in the run was "
                    "read to the end of its records: either the source holds fewer records "
                    "than that (pass records_to_read=<at most what it holds>), or splits were "
                    "never assigned (a reader stopped asking for splits, or the enumerator "
                    "stopped assigning them)"
                )
            )
        return verify_unbounded(self.committed, want.split_records, want.guarantee)

    def _stopped_splits(self) -> str:
        """The splits whose ``split_records`` go on past what was committed of them."""
        assert self.want.split_records is not None
        counts = collections.Counter(record.split_id for record in self.committed)
        stopped = []
        for split_id in sorted(self.split_ids):
            done = counts[split_id]
            following = list(itertools.islice(self.want.split_records(split_id), done, done + 1))
            if following:
                stopped.append(
                    f"{split_id!r} ({done} committed, next {short_repr(following[0], 60)})"
                )
        shown = "; ".join(stopped[:5])
        return shown + (f"; and {len(stopped) - 5} more" if len(stopped) > 5 else "")

    def metrics_problem(self) -> str | None:
        for subtask, (seen, counted) in self.engine.records_in().items():
            if counted is not None and counted != seen:
                return (
                    f"reader {subtask} counted numRecordsIn = {counted} but emitted {seen} records"
                )
        return None


def _shipped(source: Any) -> Any:
    """``source`` after the round trip through cloudpickle an engine would make."""
    return cloudpickle.loads(cloudpickle.dumps(source))


def _carry_out(factory: Callable[[], Any], plan: Plan, want: _Expectation) -> frozenset[str]:
    """Run ``plan``; the ids of the splits it saw, or AssertionError naming the problem.

    The case runs in a task thread of its own (`run_watched`): a call into the source
    that blocks fails the case after ``BLOCKED_IDLE_TIMEOUTS`` idle timeouts without a step.
    """
    runs: list[_Run] = []
    try:
        return run_watched(
            lambda: _carry_out_here(factory, plan, want, runs),
            lambda: last_step(runs[0].engine) if runs else None,
            BLOCKED_IDLE_TIMEOUTS * want.idle_timeout,
        )
    except Blocked as blocked:
        if not runs:
            raise AssertionError(f"check_source: case {plan} failed:\n{blocked}") from None
        raise AssertionError(_report(plan, str(blocked), runs[0])) from None


def _carry_out_here(
    factory: Callable[[], Any], plan: Plan, want: _Expectation, runs: list[_Run]
) -> frozenset[str]:
    run = _Run(factory, plan, want)
    runs.append(run)
    try:
        for index, op in enumerate(plan.ops):
            run.apply(op, index)
        run.finish()
        problem = run.problem() or (run.metrics_problem() if plan.name == "metrics" else None)
    except SourceContractError as error:
        raise AssertionError(_report(plan, f"{type(error).__name__}: {error}", run)) from error
    except Exception as error:
        # The source's own exception keeps its type; the note says where the kit was.
        add_note = getattr(error, "add_note", None)  # Python 3.11+
        if callable(add_note):
            add_note(_report(plan, f"the source raised {type(error).__name__}", run))
        raise
    finally:
        run.engine.close()
    if problem is not None:
        raise AssertionError(_report(plan, problem, run))
    return frozenset(run.split_ids)


def _report(plan: Plan, problem: str, run: _Run) -> str:
    steps = list(run.engine.log)[-_LOG_SHOWN:]
    before = (
        "The last steps before the last restore:\n" + "\n".join(run.before) + "\n\n"
        if run.before
        else ""
    )
    return (
        f"check_source: case {plan} failed:\n{problem.rstrip()}\n"
        + "".join(f"\n{hint}\n" for hint in hints(plan, problem))
        + f"\n{before}The engine's last steps:\n"
        + "\n".join(steps)
        + "\n\nTo run this case alone (the same seed gives the same order of steps for a "
        "source without threads of its own):\n"
        + reproduction(plan, bounded=run.want.bounded, records_to_read=run.want.records_to_read)
    )


def _check_definition(factory: Callable[[], Any]) -> bool:
    if not callable(factory):
        raise TypeError(
            f"source_factory must be a callable that returns a new source (got "
            f"{describe(factory)}); pass e.g. lambda: MySource(...)"
        )
    source = factory()
    capabilities = inspect_source(source)
    culprit = find_unpicklable(source, cloudpickle.dumps, "source")
    if culprit is not None:
        path, value = culprit
        raise AssertionError(
            f"check_source: the source does not pickle, so no engine can ship it to its "
            f"readers: {path} is {describe(value)}; keep connections and locks out of the "
            "source (open them in the enumerator and the readers)"
        )
    return capabilities.boundedness is Boundedness.BOUNDED


def check_source(
    source_factory: Callable[[], Any],
    *,
    expected: Iterable[Row] | None = None,
    split_records: Callable[[str], Iterable[Row]] | None = None,
    records_to_read: int = 300,
    guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE,
    max_parallelism: int = 4,
    max_examples: int = 40,
    idle_timeout: float = 2.0,
    golden_samples: Mapping[str, Mapping[int, tuple[bytes, object]]] | None = None,
) -> None:
    """Check that a FLIP-27 source reads every record once (or at least once) through anything.

    Each case makes one source with ``source_factory`` and ships copies of it (through
    cloudpickle) to its engines: a restore within the case reads the same storage.
    Besides Flink's ``SourceTestSuiteBase`` cases, the schedules notify some completed
    checkpoints late (after the readers read on; a later notification subsumes an
    earlier one not yet delivered) and abort some after every snapshot, as Flink's
    best-effort ``notify_checkpoint_complete`` and checkpoint timeouts do.

    A source that implements `sinkv2.source.SupportsEndPositions` also has its cuts
    checked on the splits a short run leaves: the same split and end give the same
    cut, a cut's read part ends at its stop with the records it told, and read and
    rest meet exactly at the end position, capped by ``max_records`` or not.

    Args:
        source_factory: Makes a new source holding the same data each time (a source
            that deletes or acknowledges what it read: over fresh storage each call).
        expected: A bounded source's records, each split's in its order (a record is a
            dict keyed by column). Records of one split must come in this order.
        split_records: An unbounded source's records by split id, each split's in
            order (an iterator may be endless); the kit reads ``records_to_read`` records
            and checks each split's committed records are a prefix of its records.
            Readers must emit through ``output.create_output_for_split``.
        records_to_read: How many records an unbounded run reads.
        guarantee: ``EXACTLY_ONCE`` (each record committed once) or ``AT_LEAST_ONCE``.
        max_parallelism: The most readers a case uses.
        max_examples: Random schedules to try (see `resolve_examples`), in the loaded
            hypothesis profile's phases (without ``Phase.generate``: none).
        idle_timeout: Seconds the engine waits for a reader's ``is_available()`` future
            when nothing else can happen, before it calls the source idle (a bounded
            source idle before its end fails; an unbounded one has stopped). Raise it for
            a reader whose fetches take longer (a slow query); an unbounded run waits up
            to 14 such periods for more data. A call into the source that does not
            return for 30 times this long fails the case (a reader blocking in
            ``poll_next``), showing where it is stuck.
        golden_samples: Bytes older versions of the serializers wrote, which must
            still read: ``{"split" | "enumerator_checkpoint": {version: (payload bytes
            serialize() wrote, the object they stand for)}}``, as ``check_sink``'s.

    Raises:
        SourceDefinitionError: The source is half implemented.
        AssertionError: A case failed; the message names it, the problem, and the
            engine's last steps. Or a golden sample no longer reads as its object.
        TypeError: A bad argument.
        ValueError: A golden sample under an unknown name, or not ``(bytes, object)``.
    """
    if guarantee not in (DeliveryGuarantee.EXACTLY_ONCE, DeliveryGuarantee.AT_LEAST_ONCE):
        raise TypeError(
            f"guarantee must be DeliveryGuarantee.EXACTLY_ONCE or AT_LEAST_ONCE (got "
            f"{describe(guarantee)})"
        )
    for name, value in (("records_to_read", records_to_read), ("max_parallelism", max_parallelism)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TypeError(f"{name} must be a positive int (got {describe(value)})")
    if (
        not isinstance(idle_timeout, int | float)
        or isinstance(idle_timeout, bool)
        or not (idle_timeout > 0)
    ):
        raise TypeError(
            f"idle_timeout must be a positive number of seconds (got {describe(idle_timeout)})"
        )
    bounded = _check_definition(source_factory)
    if golden_samples:
        check_source_golden_samples(source_factory(), golden_samples)
    if bounded and expected is None:
        raise TypeError("a bounded source needs expected=[...]: every record it holds")
    if not bounded and split_records is None:
        raise TypeError(
            "an unbounded source needs split_records=lambda split_id: <its records in order>"
        )
    rows = None if expected is None else list(expected)
    for row in rows or ():
        if not isinstance(row, Mapping):
            raise TypeError(
                f"expected must hold records as dicts keyed by column (got {describe(row)}); "
                "e.g. expected=[{'value': 0}, {'value': 1}]"
            )
    want = _Expectation(
        bounded,
        None if rows is None else [dict(row) for row in rows],
        split_records,
        records_to_read,
        guarantee,
        float(idle_timeout),
    )
    first = fixed_plans(max_parallelism)[0]
    splits = len(_carry_out(source_factory, first, want))
    for plan in fixed_plans(max_parallelism, splits=splits)[1:]:
        _carry_out(source_factory, plan, want)
    check_end_positions(source_factory, split_records)
    # As check_sink's: a profile without Phase.shrink reports the first failing schedule.
    phases = [p for p in (settings.default or settings()).phases if p is not Phase.explain]
    if Phase.generate not in phases:
        return

    @settings(
        max_examples=resolve_examples(max_examples),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=phases,
    )
    @given(plan=schedules(max_parallelism))
    def random_schedules(plan: Plan) -> None:
        _carry_out(source_factory, plan, want)

    random_schedules()
