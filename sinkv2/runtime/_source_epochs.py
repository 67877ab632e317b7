"""The source coordinator: a FLIP-27 source read as a stream of epochs, replayable exactly.

Over 450 lines because the coordinator is one state machine - restore, acknowledge,
plan, cut, record - whose steps keep one invariant together (a recorded epoch is
read exactly as planned); its offsets, limits and slices are in ``_source_slices``.

A micro-batch engine (Spark's ``DataSourceStreamReader``) fixes the end of every
micro-batch on the driver, keeps nothing but a small offset per micro-batch, and
after a crash replays a micro-batch from its logged offsets without asking the
source again. So the split enumerator lives on the driver, for the whole run, and
each micro-batch is an *epoch* decided there and written down before the engine
logs its offset (``shared/research/flip27-sources.md`` section 3.3):

- epoch 0 is the enumerator's first checkpoint, recorded once: the initial offset
  is the same on every call and every run; once the engine plans the micro-batch
  from it (its offsets logged), epoch 0 is marked, and a query that asks for the
  epoch after 0 again (another checkpoint location) is refused;
- epoch ``e + 1`` is planned from epoch ``e``: the splits carried over are cut at
  their end positions (`SupportsEndPositions`), subtasks with nothing left ask the
  enumerator for more, within the read limit; what each subtask reads, the
  enumerator's checkpoint and the splits carried on are recorded as one
  `SourceEpochRecord` (write-once) and only then is the offset returned;
- a micro-batch's tasks load the record of its end epoch and read exactly it, so a
  replay reads the same rows;
- the engine asking for the epoch after ``e`` proves the micro-batch ending at ``e``
  is committed: ``notify_checkpoint_complete(e)`` fires then (or on the engine's
  own late commit, whichever comes first), once, and the epochs below ``e`` are
  pruned;
- the splits read to their end in a committed epoch (a split read whole, or a cut
  with no rest) are then told to an enumerator that asks for them
  (`SupportsFinishedSplits`): at least once, since each record carries the
  finished splits not yet told, so a driver crash repeats a report, never loses one.

The offset is a `SourceOffset` (``_source_slices``): a source id and an epoch, O(1)
however long the history. Engine-neutral: no pyspark here.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import pathlib
import pickle
import shlex
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs
import msgpack

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.errors import (
    CommitStateError,
    CorruptDataError,
    SerializationError,
    SinkConfigurationError,
)
from sinkv2.runtime._enumerator_calls import enumerator_call
from sinkv2.runtime._source_plan import PlanningContext, split_id_of
from sinkv2.runtime._source_slices import EpochSlice, ReadLimit, check_streamable
from sinkv2.runtime._source_store import FIRST_SOURCE_EPOCH, SourceLease, SourceStateStore
from sinkv2.runtime._unreadable import restated
from sinkv2.source import (
    SourceContractError,
    SplitCut,
    SupportsEndPositions,
    SupportsFinishedSplits,
    check_enumerator,
)

__all__ = ["MAX_SPLITS_PER_EPOCH", "SourceEpochCoordinator"]

MAX_SPLITS_PER_EPOCH: Final = 100_000
"""At most this many splits are admitted into one epoch; the rest wait for the next."""

SETTLE_S: Final = 10.0
"""An available-now run runs the enumerator's periodic discoveries a second time after at
most this long (sooner when their period is shorter)."""


@attrs.define
class _State:
    """The driver's live view of the source at one epoch."""

    epoch: int
    enumerator: Any
    context: PlanningContext
    carried: list[list[Any]]  # per subtask: splits assigned and not finished, with positions
    finished: list[tuple[int, list[str]]] = attrs.field(factory=list)
    # (epoch, split ids read to their end in it), not yet told the enumerator


def _frame(serializer: Any, value: Any) -> bytes:
    return SimpleVersionedSerialization.write_version_and_serialize(serializer, value)


def _unframe(serializer: Any, data: bytes) -> Any:
    return SimpleVersionedSerialization.read_version_and_deserialize(serializer, data)


def _default_job_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class SourceEpochCoordinator:
    """One source id's epochs for one run of a streaming query, on the driver.

    Holds the source id's lease from the first call until `close`: a second query
    on the same source id is refused (`ConcurrentCommitError`) before it plans.
    Calls come from one thread, in the engine's order; the methods map onto
    Spark's ``initialOffset``, ``latestOffset``, ``partitions``, ``commit``,
    ``prepareForTriggerAvailableNow`` and ``stop``.
    """

    def __init__(
        self,
        source: Any,
        store: SourceStateStore,
        source_id: str,
        *,
        parallelism: int,
        job_id: str | None = None,
    ) -> None:
        if not isinstance(source_id, str) or not source_id.strip():
            raise SinkConfigurationError(
                f"a streaming read needs a source_id: a non-empty str naming the source's "
                f"position history (got {describe(source_id)})"
            )
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise SinkConfigurationError(
                f"parallelism must be a positive int (got {describe(parallelism)})"
            )
        check_streamable(source)
        self._source = source
        self._store = store
        self.source_id = source_id
        self.parallelism = parallelism
        self._job_id = job_id or _default_job_id()
        self._lease: SourceLease | None = None
        self._state: _State | None = None
        self._frozen = False  # available-now: no discovery, ends fixed at the start
        self._settled = True  # available-now: the discovery of the start has run
        self._targets: dict[str, object] = {}
        self._slices: tuple[int, list[EpochSlice]] | None = None
        self._split_serializer = source.get_split_serializer()
        self._checkpoint_serializer = source.get_enumerator_checkpoint_serializer()
        self._cuts = isinstance(source, SupportsEndPositions)

    # -- the engine's calls ---------------------------------------------------------

    def initial_epoch(self) -> int:
        """Epoch 0, recorded once: the same initial offset on every call and every run.

        Raises:
            CommitStateError: The source id has later epochs but no epoch 0 (an
                earlier query read it, and its early epochs are pruned), while the
                engine starts without a checkpoint.
        """
        lease = self._lease_now()
        if lease.get(FIRST_SOURCE_EPOCH) is not None:
            return FIRST_SOURCE_EPOCH
        latest = lease.latest()
        if latest is not None:
            raise CommitStateError(self._read_before(latest.epoch, latest.job_id))
        state = self._start_fresh()
        self._record(FIRST_SOURCE_EPOCH, state, slices=[])
        self._state = state
        return FIRST_SOURCE_EPOCH

    def next_epoch(self, start: int, limit: ReadLimit) -> int:
        """Plan the epoch after ``start`` within ``limit``; ``start`` when nothing is new.

        ``start`` being asked proves every epoch up to it is committed by the
        engine: it is acknowledged first (`acknowledge`) and older epochs pruned.

        Raises:
            CommitStateError: The engine committed the epoch after ``start`` already
                (its checkpoint went back), or ``start`` has no record.
            CorruptDataError: The record of ``start`` does not read.
        """
        lease = self._lease_now()
        planned = lease.get(start + 1)
        if planned is not None:  # planned before a crash, never logged
            if start == FIRST_SOURCE_EPOCH:
                self._refuse_a_new_checkpoint(lease)
            elif planned.acknowledged:
                raise CommitStateError(self._went_back(start, planned.job_id))
            if self._state is not None:  # restored from the record when it is needed
                self._state.enumerator.close()
                self._state = None
            return start + 1
        state = self._state_at(start)
        self.acknowledge(start)
        lease.prune(start)
        if not self._settled:
            self._discover_once(state)
        state.context.run_due(wait=False, timers=not self._frozen)
        slices = self._plan(state, limit)
        if not slices:
            return start
        self._record(start + 1, state, slices=slices)
        state.epoch = start + 1
        self._slices = (start + 1, slices)
        return start + 1

    def slices(self, epoch: int, *, start: int | None = None) -> list[EpochSlice]:
        """What each subtask reads in ``epoch``, exactly as it was planned.

        ``start`` is where the engine's micro-batch starts, when the engine tells
        it: an engine plans the tasks of a micro-batch only once its offsets are
        logged, so the micro-batch from epoch 0 being planned marks epoch 0 (as
        acknowledged: nothing is notified for epoch 0). From then on the history
        belongs to a checkpoint that logged epoch 1, and a query that asks for the
        epoch after 0 again starts from another checkpoint (`next_epoch` refuses it).

        Raises:
            CommitStateError: The store has no record of ``epoch`` (lost or pruned)
                although the engine logged it.
        """
        if start == FIRST_SOURCE_EPOCH:
            lease = self._lease_now()
            first = lease.get(FIRST_SOURCE_EPOCH)
            if first is not None and not first.acknowledged:
                lease.mark_acknowledged(FIRST_SOURCE_EPOCH)
        if self._slices is not None and self._slices[0] == epoch:
            return self._slices[1]
        record = self._lease_now().get(epoch)
        if record is None:
            raise self._missing(epoch)
        with self._decoding(epoch, "assignment"):
            decoded = msgpack.unpackb(record.assignment)
            slices = [
                EpochSlice(
                    epoch, subtask, decoded["parallelism"], tuple(splits), records, tuple(evs)
                )
                for subtask, splits, records, evs in decoded["slices"]
            ]
        self._slices = (epoch, slices)
        return slices

    def _refuse_a_new_checkpoint(self, lease: SourceLease) -> None:
        """Refuse a query that asks for epoch 1 again after a checkpoint logged it.

        Epoch 0 is marked when the micro-batch from it was planned (`slices`), which
        the engine does only after logging its offsets: a query with that checkpoint
        never asks for the epoch after 0 again, so this one started from another
        checkpoint (a deleted or new checkpoint location: a run under ``once`` ends
        before epoch 0 is pruned, so `initial_epoch` cannot tell).
        """
        first = lease.get(FIRST_SOURCE_EPOCH)
        if first is not None and first.acknowledged:
            raise CommitStateError(self._read_before(FIRST_SOURCE_EPOCH + 1, first.job_id))

    def _read_before(self, epoch: int, job_id: str) -> str:
        return (
            f"source id {self.source_id!r} was read before, up to epoch {epoch} "
            f"(job {job_id}), and this query starts without a checkpoint: a new "
            "checkpoint location cannot go on from a history Spark does not know. Restart "
            "from the checkpoint location that read it, or read under a new source_id, or "
            "forget the old history first: "
            f"`sinkv2 state forget-source {self._store_argument()} {self.source_id}`"
        )

    def _went_back(self, start: int, job_id: str) -> str:
        return (
            f"source id {self.source_id!r}: the engine committed epoch {start + 1} (job "
            f"{job_id}), and now asks for the epoch after {start} again: its checkpoint went "
            "back (restored from an older copy?), and reading epoch "
            f"{start + 1} again would read committed records twice, so nothing was read. "
            "Restart from the checkpoint location as it was, or read under a new source_id"
        )

    def _store_argument(self) -> str:
        """How ``sinkv2 state`` names this coordinator's store: a SQLite path, else a stand-in."""
        path = getattr(self._store, "path", None)
        if isinstance(path, pathlib.Path):
            return shlex.quote(str(path))
        return "<the state store's SQLite path or postgresql:// URL>"

    def acknowledge(self, epoch: int) -> None:
        """The engine committed ``epoch``: fire ``notify_checkpoint_complete`` once.

        Marked in the store first, then notified: across a crash between the two a
        notification can be missed, never doubled; as in Flink, a later epoch's
        notification covers the earlier ones.

        Then an enumerator that implements `SupportsFinishedSplits` is told the
        splits read to their end in the epochs up to ``epoch`` and not told yet.
        Those are kept in every epoch record until a later record is written after
        the report, so a crash between the report and that record repeats the
        report on the restart (at least once), and none is lost.
        """
        if epoch <= FIRST_SOURCE_EPOCH:
            return
        lease = self._lease_now()
        record = lease.get(epoch)
        if record is None:
            return
        if record.acknowledged and self._state is None and not self._reports_finished(record):
            return  # notified before, and nothing left to tell: no enumerator to restore
        state = self._state if self._state is not None else self._state_at(epoch)
        if not record.acknowledged and lease.mark_acknowledged(epoch):
            notify = getattr(state.enumerator, "notify_checkpoint_complete", None)
            if callable(notify):
                notify(epoch)
        self._report_finished(state, epoch)

    def _reports_finished(self, record: Any) -> bool:
        """Whether ``record`` holds finished splits not yet told the enumerator."""
        if record.end_positions is None:
            return False
        with self._decoding(record.epoch, "end_positions"):
            return bool(msgpack.unpackb(record.end_positions).get("finished"))

    def _report_finished(self, state: _State, epoch: int) -> None:
        due = [ids for finished_in, ids in state.finished if finished_in <= epoch]
        if not due:
            return
        state.finished = [entry for entry in state.finished if entry[0] > epoch]
        enumerator = state.enumerator
        if isinstance(enumerator, SupportsFinishedSplits):
            enumerator.notify_splits_finished(epoch, [i for ids in due for i in ids])

    def prepare_available_now(self) -> None:
        """Fix what "available now" is: discover once, then fix every split's end.

        The discovery of the start runs the enumerator's timers for one period
        (at most `SETTLE_S`): each periodic timer runs now and once more when
        next due, so a source that must look twice before it trusts what it
        found (FileSource reads a file two listings saw unchanged) finds what
        was there at the start. Later epochs read up to the ends fixed then
        (within the read limit) and discover nothing new, so an available-now
        run ends once they are read.
        """
        self._frozen = True
        self._settled = False

    def _discover_once(self, state: _State) -> None:
        """Run the due timers, and each periodic one once more after at most `SETTLE_S`.

        A discovery period longer than `SETTLE_S` is cut short for its second run: a
        FileSource monitoring every minute still reads, in an available-now run, a
        file written a moment before it started (two listings saw it unchanged).
        """
        self._settled = True
        context = state.context
        context.run_due(wait=False)
        # Wait only for what runs after the wait: a periodic timer (brought forward) or
        # a one-shot one due within SETTLE_S. A later one-shot timer would not run (it
        # is not due, and an available-now run runs no timers after this): no wait.
        now = time.monotonic()
        waits = [
            timer.due - now
            for timer in context.timers
            if timer.period_s > 0 or timer.due - now <= SETTLE_S
        ]
        if not waits:
            return
        time.sleep(max(min(*waits, SETTLE_S), 0))
        now = time.monotonic()
        for timer in context.timers:
            if timer.period_s > 0:
                timer.due = min(timer.due, now)
        heapq.heapify(context.timers)
        context.run_due(wait=False)

    def close(self) -> None:
        """Close the enumerator and release the source id."""
        try:
            if self._state is not None:
                self._state.enumerator.close()
        finally:
            self._state = None
            if self._lease is not None:
                lease, self._lease = self._lease, None
                lease.release()

    # -- state ----------------------------------------------------------------------

    def _lease_now(self) -> SourceLease:
        if self._lease is None:
            self._lease = self._store.acquire_source(self.source_id, job_id=self._job_id)
        return self._lease

    def _missing(self, epoch: int) -> CommitStateError:
        return CommitStateError(
            f"the state store has no record of epoch {epoch} of source id {self.source_id!r}, "
            "which the query's checkpoint logged: the store is not the one this checkpoint "
            "was written with (another state_store, or its file was deleted), or the source "
            "id's history was forgotten. Point state_store at the original store, or start "
            "from a new checkpoint location under a new source_id; nothing is read from "
            "scratch silently"
        )

    def _context(self) -> PlanningContext:
        return PlanningContext(self.parallelism, InMemoryMetricGroup(), self.source_id)

    def _start_fresh(self) -> _State:
        context = self._context()
        enumerator = self._source.create_enumerator(context)
        check_enumerator(enumerator)
        with enumerator_call("start() or add_reader()", self.source_id):
            enumerator.start()
            for subtask in range(self.parallelism):
                enumerator.add_reader(subtask)
        context.run_due(wait=False)
        state = _State(FIRST_SOURCE_EPOCH, enumerator, context, self._empty())
        self._take_assigned(state)
        return state

    def _empty(self) -> list[list[Any]]:
        return [[] for _ in range(self.parallelism)]

    def _state_at(self, epoch: int) -> _State:
        if self._state is not None and self._state.epoch == epoch:
            return self._state
        record = self._lease_now().get(epoch)
        if record is None:
            raise self._missing(epoch)
        if self._state is not None:
            self._state.enumerator.close()
            self._state = None
        with self._decoding(epoch, "enumerator_checkpoint"):
            checkpoint = _unframe(self._checkpoint_serializer, record.enumerator_checkpoint)
        context = self._context()
        carried, finished, no_more = self._carried(epoch, record.end_positions)
        for subtask, part in enumerate(carried):  # readers hold them: assigning one is a repeat
            for split in part:
                context.split_ids[split_id_of(split, "snapshot_state")] = subtask
        enumerator = self._source.restore_enumerator(context, checkpoint)
        check_enumerator(enumerator)
        with enumerator_call("start() or add_reader()", self.source_id):
            enumerator.start()
            for subtask in range(self.parallelism):
                enumerator.add_reader(subtask)
        context.no_more.update(no_more)
        state = _State(epoch, enumerator, context, carried, finished)
        context.run_due(wait=False)
        self._take_assigned(state)
        self._state = state
        return state

    def _carried(
        self, epoch: int, end_positions: bytes | None
    ) -> tuple[list[list[Any]], list[tuple[int, list[str]]], list[int]]:
        """What ``epoch`` recorded: splits carried on, finished ones, subtasks with no more."""
        carried = self._empty()
        if end_positions is None:
            return carried, [], []
        with self._decoding(epoch, "end_positions"):
            kept = msgpack.unpackb(end_positions)
            finished = [(e, list(ids)) for e, ids in kept.get("finished", [])]
            flat = [
                _unframe(self._split_serializer, framed)
                for subtask in kept["carried"]
                for framed in subtask
            ]
            if kept["parallelism"] == self.parallelism:
                carried = [
                    [_unframe(self._split_serializer, f) for f in subtask]
                    for subtask in kept["carried"]
                ]
                return carried, finished, list(kept["no_more"])
        for index, split in enumerate(flat):  # rescaled: positions are per split, dealt round-robin
            carried[index % self.parallelism].append(split)
        return carried, finished, []

    @contextlib.contextmanager
    def _decoding(self, epoch: int, column: str) -> Iterator[None]:
        """Turn what a damaged record raises into a `CorruptDataError` naming it."""
        try:
            yield
        except (ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException) as error:
            message = (
                f"the record of epoch {epoch} of source id {self.source_id!r} in "
                f"{self._store!r} does not read ({column}: {type(error).__name__}: {error}). "
                "The store was damaged or changed by something other than sinkv2, or by a "
                "source release that frames its splits or checkpoints differently; nothing "
                "was read. Restore the store from a backup, or run the source release that "
                "wrote it; or forget the source id's history (`sinkv2 state forget-source "
                f"{self._store_argument()} {shlex.quote(self.source_id)}`) and start from a "
                "new checkpoint location"
            )
            if isinstance(error, SerializationError):
                raise restated(error, message) from error
            raise CorruptDataError(message, serializer="sinkv2 source epoch record") from error

    def _take_assigned(self, state: _State) -> None:
        for subtask, splits in enumerate(state.context.take_assigned()):
            state.carried[subtask].extend(splits)

    # -- planning -------------------------------------------------------------------

    def _plan(self, state: _State, limit: ReadLimit) -> list[EpochSlice]:
        budget = _Budget(limit)
        reads: list[list[tuple[bytes, int | None]]] = self._empty()
        finished: list[str] = []
        self._take_assigned(state)  # pushed by the enumerator on its own (a discovery timer)
        self._admit(state, reads, budget, finished)
        for _ in range(MAX_SPLITS_PER_EPOCH):
            if budget.spent():
                break
            idle = [
                subtask
                for subtask in range(self.parallelism)
                if not state.carried[subtask] and subtask not in state.context.no_more
            ]
            if not idle:
                break
            for subtask in idle:
                with enumerator_call("handle_split_request()", self.source_id):
                    state.enumerator.handle_split_request(subtask, None)
                state.context.run_due(wait=False, timers=not self._frozen)
            before = sum(len(part) for part in state.carried)
            self._take_assigned(state)
            if sum(len(part) for part in state.carried) == before:
                break
            self._admit(state, reads, budget, finished)
        if finished and isinstance(state.enumerator, SupportsFinishedSplits):
            # told once the epoch that reads them is committed (or a later one, when
            # nothing else is read now and this epoch is never recorded)
            state.finished.append((state.epoch + 1, finished))
        events = state.context.take_events()
        slices = []
        for subtask in range(self.parallelism):
            if not reads[subtask] and not events[subtask]:
                continue
            counts = [records for _, records in reads[subtask]]
            total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
            slices.append(
                EpochSlice(
                    state.epoch + 1,
                    subtask,
                    self.parallelism,
                    tuple(framed for framed, _ in reads[subtask]),
                    total,
                    tuple(pickle.dumps(event) for event in events[subtask]),
                )
            )
        return slices

    def _admit(
        self,
        state: _State,
        reads: list[list[tuple[bytes, int | None]]],
        budget: _Budget,
        finished: list[str],
    ) -> None:
        """Move what the budget allows from the carried splits into this epoch's reads.

        The ids of the splits this epoch reads to their end (read whole, or cut
        with no rest) are added to ``finished``.

        Fair under a limit: the splits are visited from a place that moves on by one
        every epoch, so each split comes first in turn and a busy split cannot keep
        the others waiting for more than one round.
        """
        pending = [(subtask, split) for subtask, part in enumerate(state.carried) for split in part]
        if not pending or budget.spent():
            return
        ends = self._ends([split for _, split in pending])
        first = state.epoch % len(pending)
        order = list(range(first, len(pending))) + list(range(first))
        rests: list[Any] = [None] * len(pending)
        for index in order:
            subtask, split = pending[index]
            end = ends[index]
            if budget.spent():
                rests[index] = split
                continue
            if end is None:  # ends by itself: read whole
                reads[subtask].append((_frame(self._split_serializer, split), None))
                budget.take(None)
                finished.append(split_id_of(split, "end_positions"))
                continue
            cut = self._cut(split, end, budget.records_left)
            if cut.read is not None:
                reads[subtask].append((_frame(self._split_serializer, cut.read), cut.records))
                budget.take(cut.records)
            if cut.rest is None:
                finished.append(split_id_of(split, "cut_split"))
            rests[index] = cut.rest
        kept = self._empty()
        for (subtask, _), rest in zip(pending, rests, strict=True):
            if rest is not None:
                kept[subtask].append(rest)
        state.carried = kept

    def _ends(self, splits: list[Any]) -> Sequence[object | None]:
        if not self._cuts:
            return [None] * len(splits)
        if self._frozen:
            missing = [s for s in splits if split_id_of(s, "end_positions") not in self._targets]
            if missing:
                for split, end in zip(missing, self._ask_ends(missing), strict=True):
                    self._targets[split_id_of(split, "end_positions")] = end
            return [self._targets[split_id_of(s, "end_positions")] for s in splits]
        return self._ask_ends(splits)

    def _ask_ends(self, splits: list[Any]) -> Sequence[object | None]:
        ends = self._source.end_positions(splits)
        if not isinstance(ends, Sequence) or len(ends) != len(splits):
            raise SourceContractError(
                f"end_positions() of {describe(self._source)} returned {short_repr(ends)} for "
                f"{len(splits)} split(s); return one position (or None) per split, in order",
                method="end_positions",
            )
        return ends

    def _cut(self, split: Any, end: object, max_records: int | None) -> SplitCut[Any]:
        cut = self._source.cut_split(split, end, max_records)
        split_id = split_id_of(split, "cut_split")
        if not isinstance(cut, SplitCut):
            raise SourceContractError(
                f"cut_split() of split {split_id!r} returned {describe(cut)}; return a "
                "sinkv2.source.SplitCut",
                method="cut_split",
                split_id=split_id,
            )
        for part, piece in (("read", cut.read), ("rest", cut.rest)):
            if piece is not None and split_id_of(piece, "cut_split") != split_id:
                raise SourceContractError(
                    f"cut_split() of split {split_id!r} returned a SplitCut whose {part} is "
                    f"split {split_id_of(piece, 'cut_split')!r}; both parts of a cut are the "
                    "same split (its id unchanged), before and after the end position, or "
                    "another split's records would be read twice or never",
                    method="cut_split",
                    split_id=split_id,
                )
        told = "an untold number" if cut.records is None else str(cut.records)
        over = (
            cut.records is None or cut.records > max_records if max_records is not None else False
        )
        if cut.read is not None and over:
            raise SourceContractError(
                f"cut_split() of split {split_id!r} was asked for at most {max_records} "
                f"record(s) and cut {told}; when max_records is given, cut no more and tell "
                "SplitCut.records",
                method="cut_split",
                split_id=split_id,
            )
        return cut

    def _record(self, epoch: int, state: _State, *, slices: list[EpochSlice]) -> None:
        with enumerator_call("snapshot_state()", self.source_id):
            checkpoint = state.enumerator.snapshot_state(epoch)
        assignment = msgpack.packb(
            {
                "parallelism": self.parallelism,
                "slices": [
                    [piece.subtask, list(piece.splits), piece.records, list(piece.events)]
                    for piece in slices
                ],
            }
        )
        carried = msgpack.packb(
            {
                "parallelism": self.parallelism,
                "carried": [
                    [_frame(self._split_serializer, split) for split in part]
                    for part in state.carried
                ],
                "no_more": sorted(state.context.no_more),
                "finished": [[e, ids] for e, ids in state.finished],
            }
        )
        self._lease_now().record_epoch(
            epoch,
            enumerator_checkpoint=_frame(self._checkpoint_serializer, checkpoint),
            assignment=assignment,
            end_positions=carried,
        )


@attrs.define
class _Budget:
    """What is left of one epoch's read limit."""

    limit: ReadLimit
    records: int = 0
    splits: int = 0

    @property
    def records_left(self) -> int | None:
        if self.limit.max_records is None:
            return None
        return max(self.limit.max_records - self.records, 0)

    def spent(self) -> bool:
        """Whether the epoch may admit no more reads."""
        if self.splits >= MAX_SPLITS_PER_EPOCH:
            return True
        if self.splits == 0:
            return False  # at least one read per epoch
        if self.limit.max_splits is not None and self.splits >= self.limit.max_splits:
            return True
        return self.limit.max_records is not None and self.records >= self.limit.max_records

    def take(self, records: int | None) -> None:
        self.splits += 1
        self.records += records or 0
