"""`CheckpointRunner`: a stream's checkpoints on the commit coordinator.

The streaming flavour of the epoch protocol (seed 002), for any engine that cuts
its input into numbered, replayable checkpoints (Spark's micro-batches). Per
checkpoint N, in this order:

1. a commit of an earlier checkpoint that failed on the commit thread fails the
   stream here, at the boundary (decoupled commits only);
2. every Pending epoch below N that is not being committed right now is committed,
   in epoch order (a driver died after recording it; the engine will not replay it);
3. N Committed: nothing is written (a replay of a checkpoint that was committed);
4. N Pending: its stored committables are committed, nothing is rewritten;
5. otherwise: writers restored from the checkpoint before N (its writer states,
   redistributed if the number of writers changed) write N and end it with
   ``flush(False)`` -> ``prepare_commit()`` -> ``snapshot_state(N)``; committables
   and states are recorded Pending in one transaction; then N is committed -
   inline, or on the commit thread while N + 1 writes (``decoupled``), always
   strictly in epoch order.

Committed epochs older than the newest ``retain`` are pruned from the store, so
its size stays flat over any number of checkpoints: an engine replays at most its
latest checkpoints, and the newest epoch keeps the states to restore.

Steps 3 to 5 are the coordinator's epoch procedure (`CommitCoordinator.plan_checkpoint`,
``settle``, ``write_epoch``, ``commit_epoch``), not a copy of it: the runner adds
only what a stream needs around it - ordering (1, 2, in-flight commits first), the
restore point and its writer states, decoupled commits, pruning, the draining stop.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, final

import attrs

from sinkv2._context import INITIAL_CHECKPOINT_ID
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime._commit import CommitOutcome
from sinkv2.runtime._coordinator import CommitCoordinator
from sinkv2.runtime._epoch import EpochNeed, PendingEpoch
from sinkv2.runtime._result import SinkResult
from sinkv2.runtime._seam import (
    Recovery,
    Restore,
    StreamWriterStage,
)
from sinkv2.runtime._store import EpochRecord, EpochStatus
from sinkv2.runtime._writer_states import WriterStates

__all__ = ["DEFAULT_RETAIN", "CheckpointRunner", "state_name"]

logger = logging.getLogger("sinkv2.coordinator")

DEFAULT_RETAIN: Final = 100
"""Committed epochs kept per streaming sink id (as Spark's ``minBatchesToRetain``)."""

_PRUNE_EVERY: Final = 10


def state_name(sink: object) -> str:
    """The name a sink's writer states are recorded under: its class path.

    Flink records writer states under a state name, and a sink restores states
    of another name only if `WithCompatibleState` lists it.
    """
    cls = type(sink)
    return f"{cls.__module__}.{cls.__qualname__}"


ResultListener = Callable[[SinkResult], None]


class _KeyCollisionError(SinkConfigurationError):
    """A destination reported a fresh checkpoint committed: its key is another history's."""


@final
class CheckpointRunner:
    """Runs a stream's checkpoints on an open `CommitCoordinator`.

    Args:
        coordinator: Opened with the stream's origin (``open(origin=...,
            keep_restorable=True)``); the runner does not close it.
        decoupled: Commit checkpoint N on a commit thread while N + 1 writes.
        retain: Committed epochs kept in the store (the rest are pruned).
        on_result: Called with each checkpoint's `SinkResult` once it is committed
            (on the commit thread when ``decoupled``).
        recovery: What ``open()`` finished of earlier runs; the first checkpoint's
            result reports it (its ``recommitted_epochs``, ``aborted_epochs`` and
            ``cleaned_jobs``, and ``RECOMMITTED`` if that checkpoint is one of them),
            so a restarted stream's first result says what the restart did.
    """

    def __init__(
        self,
        coordinator: CommitCoordinator,
        *,
        decoupled: bool = False,
        retain: int = DEFAULT_RETAIN,
        on_result: ResultListener | None = None,
        recovery: Recovery | None = None,
    ) -> None:
        if not isinstance(retain, int) or isinstance(retain, bool) or retain < 1:
            raise SinkConfigurationError(
                f"retain must be a positive int (got {retain!r}); it is how many committed "
                "checkpoints the commit state store keeps"
            )
        self._coordinator = coordinator
        self._decoupled = decoupled
        self._retain = retain
        self._on_result = on_result or (lambda result: None)
        self._state_name = state_name(coordinator.sink)
        self._lock = threading.Lock()
        self._in_flight: dict[int, frozenset[str]] = {}
        self._failure: BaseException | None = None
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"sinkv2-commit-{coordinator.sink_id}"
            )
            if decoupled
            else None
        )
        self._last_restore: Restore | None = None
        self._recovery = recovery  # reported by the first result, then dropped
        self._closed = False

    @property
    def decoupled(self) -> bool:
        """Whether commits run on the commit thread."""
        return self._decoupled

    @property
    def last_restore(self) -> Restore | None:
        """What the last checkpoint that wrote restored (its attempts are still needed)."""
        return self._last_restore

    # --- one checkpoint ---------------------------------------------------------------------

    def run(self, write: StreamWriterStage, checkpoint_id: int) -> SinkResult | None:
        """Skip, finish, or write and commit checkpoint ``checkpoint_id`` (see module doc).

        Returns:
            The checkpoint's result; ``None`` when its commit was handed to the
            commit thread (the result then goes to ``on_result``).

        Raises:
            CommitError: This checkpoint's commit failed (it stays pending), or, when
                decoupled, an earlier one's did.
            SinkWriterError: A writer failed; nothing of the checkpoint is recorded.
            SerializationError: A recorded writer state does not read.
            SinkConfigurationError: The recorded states belong to another sink.
            CommitStateError: The checkpoint is not recorded but a later one is: it
                was pruned, or the stream's checkpoint ids went back. Nothing is written.
        """
        self.raise_commit_failure()
        coordinator = self._coordinator
        epoch = checkpoint_id
        coordinator.reset_stage_seconds()
        recovery, self._recovery = self._recovery, None
        recommitted = self._finish_pending_below(epoch)
        plan = coordinator.plan_checkpoint(epoch, recovery=recovery, recommitted=recommitted)
        if plan.need is EpochNeed.RECOMMIT and self._executor is not None:
            self._settle()  # epochs on the commit thread commit first: strictly in order
            plan = coordinator.plan_checkpoint(epoch, recovery=recovery, recommitted=recommitted)
        if plan.need is not EpochNeed.WRITE:
            result = coordinator.settle(plan)
            self._on_result(result)
            return result

        guarded = epoch == INITIAL_CHECKPOINT_ID or self._recorded(epoch - 1)
        restore = self.restore_point(epoch)
        self._last_restore = restore
        pending = coordinator.write_epoch(
            plan,
            lambda: write(coordinator.job_id, checkpoint_id, restore),
            kept=self._kept(restore),
            state_name=self._state_name,
        )
        if self._executor is None:
            return self._commit(pending, guarded=guarded)
        with self._lock:
            self._in_flight[epoch] = pending.written.attempt_tokens
        self._executor.submit(self._commit, pending, guarded=guarded)
        return None

    def _commit(self, pending: PendingEpoch, *, guarded: bool = False) -> SinkResult | None:
        """Commit a Pending checkpoint; on the commit thread when decoupled.

        ``guarded``: this store holds the stream's whole history up to the epoch, so
        the destination cannot have committed these freshly written committables
        before; if it says so on the first commit call, its idempotency key
        belongs to another history (see `_collision`).
        """
        coordinator = self._coordinator
        epoch = pending.plan.epoch
        try:
            if self._failure is not None:
                return None  # an earlier epoch failed: this one stays pending, in order
            try:
                result = coordinator.commit_epoch(
                    pending,
                    check_outcome=(lambda outcome: self._collision(epoch, outcome))
                    if guarded
                    else None,
                    after_commit=lambda: self._prune(epoch),
                )
            except _KeyCollisionError:
                coordinator.abort_pending(epoch, pending.committables)  # nothing made visible
                raise
        except BaseException as error:
            if self._executor is None:
                raise
            logger.error(
                "sink %r job %s: the commit of checkpoint %d failed on the commit thread; "
                "it stays pending, and the stream fails at its next checkpoint: %s",
                coordinator.sink_id,
                coordinator.job_id,
                epoch,
                error,
            )
            self._failure = error
            return None
        finally:
            with self._lock:
                self._in_flight.pop(epoch, None)
        self._on_result(result)
        return result

    def _finish_pending_below(self, epoch: int) -> tuple[int, ...]:
        coordinator = self._coordinator
        with self._lock:
            in_flight = set(self._in_flight)
        stranded = [
            record
            for record in coordinator.pending_records()
            if record.epoch < epoch and record.epoch not in in_flight
        ]
        if stranded and self._executor is not None:
            # Not this runner's normal flow (a checkpoint failed after recording it, or a
            # commit failed just now): the commit thread's epochs go first, in order.
            self._settle()
            stranded = [r for r in coordinator.pending_records() if r.epoch < epoch]
        done = []
        for record in stranded:
            coordinator.commit_pending(
                record.epoch,
                record.checkpoint_id,
                coordinator.stored_committables(record),
                recovering=True,
            )
            done.append(record.epoch)
        return tuple(done)

    def _recorded(self, epoch: int) -> bool:
        record = self._coordinator.record(epoch)
        return record is not None and record.status is not EpochStatus.ABORTED

    def _collision(self, epoch: int, outcome: CommitOutcome[Any]) -> None:
        """Refuse a fresh checkpoint the destination says it committed before.

        The committables were written by this checkpoint's writers just now, and
        this store recorded every checkpoint of the stream before it, so no run of
        this stream committed them. A destination that still reports them
        committed (on the first commit call: a retry may find its own lost
        success) keys its idempotency guard by something another history used too
        - say an Iceberg table's ``sink_id`` reused by a new stream whose
        checkpoint ids start again at 1. Recording the checkpoint committed would
        drop its data silently.
        """
        if outcome.already_committed and not outcome.committed and outcome.commit_calls == 1:
            sink = self._coordinator.capabilities.sink_type
            raise _KeyCollisionError(
                f"sink {self._coordinator.sink_id!r} checkpoint {epoch}: {sink}'s committer "
                f"reports the {len(outcome.already_committed)} committable(s) this checkpoint "
                "just wrote as already committed, but no run of this stream committed them: "
                "the destination's own idempotency key (e.g. IcebergSink's sink_id) is shared "
                "with another history whose checkpoint ids this stream repeats. Nothing was "
                "made visible and the checkpoint was aborted. Give the sink's destination key "
                "a name of its own for this stream (and a new sink_id)"
            )

    def _settle(self) -> None:
        """Wait for the commit thread's epochs; raise if one of them failed."""
        if self._executor is not None:
            self.wait()
            self.raise_commit_failure()

    def _kept(self, restore: Restore | None) -> frozenset[str]:
        """Attempts of this job whose staged output must survive a clean-up now."""
        with self._lock:
            kept = frozenset().union(*self._in_flight.values())
        if restore is not None and restore.states is not None:
            kept |= restore.states.referenced_attempts()
        return kept

    def _prune(self, epoch: int) -> None:
        below = epoch - self._retain + 1
        if below > 1 and epoch % _PRUNE_EVERY == 0:
            self._coordinator.prune(below)

    # --- restoring --------------------------------------------------------------------------

    def restore_point(self, epoch: int) -> Restore | None:
        """What checkpoint ``epoch``'s writers restore: the latest recorded epoch below it.

        Raises:
            SerializationError: A recorded writer state does not read with the sink's
                serializer (named with sink id, epoch and subtask).
            CorruptDataError: The recorded states are not sinkv2's.
            SinkConfigurationError: The states were written by another sink that this
                one does not declare compatible.
        """
        record = self._latest_below(epoch)
        if record is None:
            return None
        return Restore(checkpoint_id=record.checkpoint_id, states=self._states_of(record))

    def _latest_below(self, epoch: int) -> EpochRecord | None:
        coordinator = self._coordinator
        if epoch > 1:
            record = coordinator.record(epoch - 1)
            if record is not None and record.status is not EpochStatus.ABORTED:
                return record
        return coordinator.latest_record(below=epoch)

    def _states_of(self, record: EpochRecord) -> WriterStates | None:
        coordinator = self._coordinator
        what = f"sink {coordinator.sink_id!r} epoch {record.epoch}"
        states = WriterStates.decode(record.writer_states, what=what)
        capabilities = coordinator.capabilities
        if states is None or states.count == 0:
            return states if capabilities.writer_state else None
        if not capabilities.writer_state:
            raise SinkConfigurationError(
                f"{what} recorded {states.count} writer state(s) of {states.state_name}, but "
                f"{capabilities.sink_type} does not implement SupportsWriterState: restoring "
                "would drop them. Deploy a sink that restores them, or start over under a "
                "new sink id"
            )
        if states.state_name != self._state_name:
            compatible: frozenset[str] = frozenset()
            if capabilities.compatible_state:
                compatible = frozenset(coordinator.sink.get_compatible_writer_state_names())
            if states.state_name not in compatible:
                raise SinkConfigurationError(
                    f"{what} recorded writer states of {states.state_name}, but the sink is "
                    f"{self._state_name}; it restores them only if it reads them: implement "
                    "SupportsWriterState.WithCompatibleState and return "
                    f"[{states.state_name!r}] from get_compatible_writer_state_names(), or "
                    "start over under a new sink id"
                )
        states.check_readable(coordinator.sink.get_writer_state_serializer(), what=what)
        return states

    def latest(self) -> EpochRecord | None:
        """The newest pending or committed epoch (what a restart would restore from)."""
        return self._coordinator.latest_record()

    # --- ending -----------------------------------------------------------------------------

    def drain(self, drain_writers: Callable[[str, Restore], WriterStates | None]) -> int:
        """Send what the newest checkpoint's writer states still hold (a draining stop).

        The newest epoch is committed first if it is pending. ``drain_writers`` restores
        a writer per recorded subtask, ends its input (``flush(True)``) and returns
        what is left (states of what could not be sent, or ``None``); those replace the
        epoch's states, so a later run restores only what was not sent.

        Returns:
            How many states were drained.

        Raises:
            SinkConfigurationError: The sink has a committer: what its writers emit at
                end of input would need a checkpoint of its own; stop without draining,
                and the next run of the stream restores the states.
        """
        self.wait()
        self.raise_commit_failure()
        record = self.latest()
        if record is None:
            return 0
        self._finish_pending_below(record.epoch + 1)
        restore = self.restore_point(record.epoch + 1)
        if restore is None or restore.states is None or restore.states.count == 0:
            return 0
        coordinator = self._coordinator
        if coordinator.capabilities.committer:
            raise SinkConfigurationError(
                f"a draining stop sends buffered writer states of sinks without a committer "
                f"(such as async sinks); {coordinator.capabilities.sink_type} has one, so what "
                "its writers emit at end of input would need a checkpoint of its own. Stop "
                "without drain: the next run of the stream restores the states"
            )
        left = drain_writers(coordinator.job_id, restore)
        encoded = (
            attrs.evolve(left, state_name=self._state_name).encode() if left is not None else b""
        )
        coordinator.replace_writer_states(record.epoch, encoded)
        return restore.states.count - (left.count if left is not None else 0)

    def raise_commit_failure(self) -> None:
        """Raise the error of a commit that failed on the commit thread, if one did."""
        if self._failure is not None:
            raise self._failure

    def wait(self) -> None:
        """Wait for every commit handed to the commit thread.

        After `close` there is nothing to wait for (``close`` waited): returns at
        once, rather than failing to hand the stopped thread a marker task.
        """
        if self._executor is None or self._closed:
            return
        try:
            self._executor.submit(lambda: None).result()
        except RuntimeError:  # closed meanwhile, and close() waited
            if not self._closed:
                raise

    def close(self) -> None:
        """Wait for the commit thread and stop it. Idempotent; does not raise failures."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def referenced_attempts(self) -> frozenset[str]:
        """Attempts the newest epoch's writer states refer to (kept when a stream stops)."""
        record = self.latest()
        if record is None:
            return frozenset()
        states = WriterStates.decode(
            record.writer_states, what=f"sink {self._coordinator.sink_id!r} epoch {record.epoch}"
        )
        return states.referenced_attempts() if states is not None else frozenset()
