"""``sinkv2 state abort`` and ``sinkv2 state release``: an operator's two repairs.

Each takes the sink id's lease for the repair, so each is refused while a live
driver holds the sink id (`ConcurrentCommitError`, naming the holder), and each
write is fenced like a driver's.
"""

from __future__ import annotations

import uuid
from typing import Any, Final, Protocol, runtime_checkable

from sinkv2._cli._errors import CliError
from sinkv2._cli._inspect import holder_data, holder_text
from sinkv2._cli._render import Report, checkpoint_text, key_values
from sinkv2._cli._sinks import (
    LoadedSink,
    decode_committables,
    load_sink,
    recorded_class,
    sink_from_class_path,
)
from sinkv2._cli._stores import HolderInfo, OperatorStore, driver_state, store_location
from sinkv2.errors import ConcurrentCommitError, SerializationError
from sinkv2.runtime import EpochRecord, EpochStatus, SinkLease

__all__ = ["abort_epoch", "release_sink"]


@runtime_checkable
class _TerminatesHolders(Protocol):
    """A store whose holders can outlive their drivers (PostgreSQL sessions)."""

    def terminate_holder(self, sink_id: str, *, backend_pid: int | None = None) -> Any:
        """End the session holding ``sink_id``."""
        ...


_VISIBLE_WARNING: Final = (
    "Some of its data may already be visible at the destination: a driver that died while "
    "committing the epoch leaves what it committed in place, and an abort hook never removes "
    "committed output. Re-running the job writes all of the epoch's data again, so rows "
    "already visible would then be there twice: look at the destination before re-running, "
    "and remove what the epoch committed, or re-run only what is missing"
)
"""What ``abort`` says after aborting: a pending epoch may be partly committed."""


def _job_id() -> str:
    return f"sinkv2-state-{uuid.uuid4().hex[:12]}"


def _known(store: OperatorStore, sink_id: str) -> None:
    known = store.sink_ids()
    if sink_id not in known:
        raise CliError(
            f"{store_location(store)} has no record of sink id {sink_id!r}; it knows "
            + (", ".join(repr(k) for k in known) if known else "no sink ids")
            + " (see: sinkv2 state list)"
        )


def _acquire(store: OperatorStore, sink_id: str, action: str) -> SinkLease:
    try:
        return store.acquire(sink_id, job_id=_job_id())
    except ConcurrentCommitError as error:
        raise CliError(f"refusing to {action}: {error}") from error


def _check_abortable(record: EpochRecord | None, sink_id: str, epoch: int, force: bool) -> None:
    if record is None:
        raise CliError(f"sink id {sink_id!r} has no epoch {epoch}; see: sinkv2 state show")
    if record.status is EpochStatus.COMMITTED:
        raise CliError(
            f"epoch {epoch} of sink {sink_id!r} is committed; it cannot be aborted, because "
            "its committables are visible at the destination"
        )
    if record.status is EpochStatus.PENDING and record.explicit and not force:
        raise CliError(
            f"epoch {epoch} of sink {sink_id!r} has a checkpoint id "
            f"({checkpoint_text(record.checkpoint_id)}): the next run commits it from the "
            "store, because its data is not written again. Aborting it loses that data unless "
            "it is replayed (a batch job re-run with the same checkpoint id, or a stream "
            "whose checkpoint was rolled back); if so, pass --force"
        )


def _sink_for_abort(
    records: list[EpochRecord], sink_spec: str | None, without_hook: bool
) -> LoadedSink | None:
    if without_hook:
        return None
    if sink_spec is not None:
        return load_sink(sink_spec)
    class_path = recorded_class(records)
    hint = (
        "pass --sink module:factory so that its abort hook removes what the epoch staged, "
        "or --without-abort-hook to only mark the epoch aborted (its staged output stays)"
    )
    if class_path is None:
        raise CliError(f"the store does not record which sink wrote the epoch; {hint}")
    try:
        return sink_from_class_path(class_path)
    except CliError as error:
        raise CliError(f"{error}; {hint}") from error


def abort_epoch(
    store: OperatorStore,
    sink_id: str,
    epoch: int,
    *,
    sink_spec: str | None,
    without_hook: bool,
    force: bool,
) -> Report:
    """Abort pending ``epoch``: the sink's abort hook with its committables, then mark it.

    Its committables are never committed afterwards. An epoch aborted already is
    left alone.

    Raises:
        CliError: No such sink id or epoch; the epoch is committed, or has a
            checkpoint id and ``force`` is not set; no sink to call; a driver holds
            the sink id; the committables do not decode; the hook raised (the
            epoch then stays pending).
    """
    _known(store, sink_id)
    records = store.epochs(sink_id)
    record = next((r for r in records if r.epoch == epoch), None)
    _check_abortable(record, sink_id, epoch, force)
    assert record is not None  # _check_abortable refuses a missing one
    base = {"store": store_location(store), "sink_id": sink_id, "epoch": epoch}
    if record.status is EpochStatus.ABORTED:
        return Report(
            text=f"epoch {epoch} of sink {sink_id!r} is aborted already; nothing was done",
            data={**base, "action": "none", "status": "aborted"},
        )
    holder = store.holder(sink_id)
    if holder is not None:
        raise CliError(
            f"refusing to abort epoch {epoch} of sink {sink_id!r}: it is held by "
            f"{holder_text(holder)}; a running driver decides its own epochs. Wait for it "
            "to finish, or stop it"
        )
    loaded = _sink_for_abort(records, sink_spec, without_hook)
    with _acquire(store, sink_id, f"abort epoch {epoch} of sink {sink_id!r}") as lease:
        current = lease.get(epoch)  # what it is now, under the lease
        _check_abortable(current, sink_id, epoch, force)
        assert current is not None
        if current.status is EpochStatus.ABORTED:
            return Report(
                text=f"epoch {epoch} of sink {sink_id!r} is aborted already; nothing was done",
                data={**base, "action": "none", "status": "aborted"},
            )
        hooked, count = _run_hook(loaded, current, sink_id)
        lease.mark_aborted(epoch)
    if loaded is None:
        done = "no abort hook was called (--without-abort-hook): what it staged stays behind"
    elif hooked:
        done = f"{loaded.source}'s abort hook was called with its {count} committable(s)"
    else:
        done = f"{loaded.source} has no abort hook (SupportsAbort), so nothing was removed"
    text = (
        f"epoch {epoch} of sink {sink_id!r} (checkpoint {checkpoint_text(current.checkpoint_id)}) "
        f"is aborted; {done}. Its committables will never be committed from the store. "
        f"{_VISIBLE_WARNING}"
    )
    data = {
        **base,
        "action": "aborted",
        "status": "aborted",
        "warning": _VISIBLE_WARNING,
        "abort_hook": None if loaded is None else loaded.source if hooked else None,
        "committables": count,
    }
    return Report(text=text, data=data)


def _run_hook(loaded: LoadedSink | None, record: EpochRecord, sink_id: str) -> tuple[bool, int]:
    """Call the sink's abort hook with the epoch's committables; (called?, how many)."""
    if loaded is None or not loaded.capabilities.abort:
        return False, 0
    try:
        committables = decode_committables(loaded, record)
    except SerializationError as error:
        raise CliError(
            f"the committables of epoch {record.epoch} of sink {sink_id!r} do not read with "
            f"{loaded.source}'s committable serializer: {error}; nothing was changed. Pass "
            "--sink with the sink that wrote them, or --without-abort-hook"
        ) from error
    try:
        loaded.sink.abort(list(committables))
    except Exception as error:
        raise CliError(
            f"{loaded.source}'s abort hook raised {type(error).__name__}: {error}; epoch "
            f"{record.epoch} of sink {sink_id!r} stays pending. Fix the cause and run the "
            "abort again (abort hooks are idempotent)"
        ) from error
    return True, len(committables)


def release_sink(store: OperatorStore, sink_id: str, *, force: bool) -> Report:
    """Free ``sink_id`` from a dead driver and fence off every earlier lease.

    A live holder is refused. A PostgreSQL session whose driver process is gone
    (on this host; elsewhere only with ``force``) is terminated. Then the sink id
    is acquired and released once, which advances its fencing token, so no lease
    of an earlier driver can write again.

    Raises:
        CliError: No such sink id; a live driver holds it, or one whose state cannot
            be seen from here and ``force`` is not set.
    """
    _known(store, sink_id)
    holder = store.holder(sink_id)
    location = store_location(store)
    terminated: HolderInfo | None = None
    if holder is not None:
        _check_releasable(store, sink_id, holder, force)
        assert isinstance(store, _TerminatesHolders)  # _check_releasable refuses others
        backend_pid = getattr(holder, "backend_pid", None)
        terminated = store.terminate_holder(sink_id, backend_pid=backend_pid)
    lease = _acquire(store, sink_id, f"release sink {sink_id!r}")
    with lease:
        token = lease.fencing_token
        jobs = lease.unfinished_jobs()
    before = (
        f"ended the session of {terminated}"
        if terminated is not None
        else "no driver holds it (a dead driver's lock died with its process or connection)"
    )
    text = key_values(
        [
            ("store", location),
            ("sink id", sink_id),
            ("released", before),
            ("fencing token", f"{token} (every earlier lease is fenced off)"),
            (
                "unfinished jobs",
                ", ".join(jobs) + " (the next run of the sink cleans up after them)"
                if jobs
                else "-",
            ),
        ]
    )
    data = {
        "store": location,
        "sink_id": sink_id,
        "terminated": holder_data(terminated),
        "fencing_token": token,
        "unfinished_jobs": jobs,
    }
    return Report(text=text, data=data)


def _check_releasable(store: OperatorStore, sink_id: str, holder: HolderInfo, force: bool) -> None:
    if not isinstance(store, _TerminatesHolders):
        raise CliError(
            f"refusing to release sink {sink_id!r}: it is held by {holder_text(holder)}. A "
            "process holding its lock is alive (the lock dies with its process); stop that "
            "job, or wait for it to finish"
        )
    state = driver_state(holder)
    if holder.job_id is None:
        raise CliError(
            f"refusing to release sink {sink_id!r}: {holder} is acquiring it right now; "
            "look again with: sinkv2 state show"
        )
    if state == "running":
        raise CliError(
            f"refusing to release sink {sink_id!r}: it is held by {holder}, and that driver "
            "process is running; stop that job, or wait for it to finish"
        )
    if state == "unknown" and not force:
        raise CliError(
            f"refusing to release sink {sink_id!r}: it is held by {holder}; whether that "
            f"driver runs cannot be seen from this host. If you know it is gone, pass --force "
            "to end its session"
        )
