"""``sinkv2 state show-source`` and ``forget-source``: a source id's epochs, and forgetting them.

A streaming read keeps one record per epoch under its source id (what each task
read, the enumerator's checkpoint, the splits carried on); ``show-source`` lists
them without taking anything. ``forget-source`` deletes them all under the source
id's lease - refused while a query reads it - so that a query started from a new
checkpoint location can read the source id from the start again.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgpack

from sinkv2._cli._errors import CliError
from sinkv2._cli._render import Report, iso, iso_json, key_values, table
from sinkv2._cli._stores import OperatorStore, store_location
from sinkv2.errors import ConcurrentCommitError
from sinkv2.runtime import SourceEpochRecord

__all__ = ["forget_source", "show_source"]

_EVERY_EPOCH = 2**63 - 1
_FRAME = 8  # a framed checkpoint's version and length (SimpleVersionedSerialization)


def _known(store: OperatorStore, source_id: str) -> list[SourceEpochRecord]:
    if source_id not in store.source_ids():
        known = store.source_ids()
        raise CliError(
            f"{store_location(store)} has no record of source id {source_id!r}; it knows "
            + (", ".join(repr(k) for k in known) if known else "no source ids")
            + " (see: sinkv2 state list)"
        )
    return store.source_epochs(source_id)


def _reads(record: SourceEpochRecord) -> tuple[int, int]:
    """How many split reads the epoch has, and how many splits it carries on."""
    try:
        slices = msgpack.unpackb(record.assignment)["slices"]
        carried = msgpack.unpackb(record.end_positions or msgpack.packb({"carried": []}))
    except (ValueError, KeyError, TypeError, msgpack.UnpackException):
        return -1, -1
    return sum(len(piece[1]) for piece in slices), sum(len(c) for c in carried["carried"])


def _replication_slot(record: SourceEpochRecord) -> str | None:
    """The replication slot a source's enumerator checkpoint names, if it names one.

    A change-data-capture source (``PostgresCdcSource``) keeps its slot's name under
    ``replication_slot`` in a msgpack map; a stopped query's slot holds WAL on the
    server, so the operator is told its name. Any other checkpoint: ``None``.
    """
    data = record.enumerator_checkpoint
    if len(data) < _FRAME:
        return None
    try:
        state = msgpack.unpackb(data[_FRAME:])
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    slot = state.get("replication_slot") if isinstance(state, dict) else None
    return slot if isinstance(slot, str) else None


def show_source(store: OperatorStore, source_id: str) -> Report:
    """One source id's epochs: acknowledged or not, split reads, splits carried on.

    Raises:
        CliError: The store has no record of ``source_id``.
    """
    records = _known(store, source_id)
    rows, epochs = [], []
    for record in records:
        reads, carried = _reads(record)
        rows.append(
            [
                str(record.epoch),
                "yes" if record.acknowledged else "no",
                "?" if reads < 0 else str(reads),
                "?" if carried < 0 else str(carried),
                iso(record.created_at),
                record.job_id,
            ]
        )
        epochs.append(
            {
                "epoch": record.epoch,
                "acknowledged": record.acknowledged,
                "split_reads": reads,
                "splits_carried": carried,
                "recorded": iso_json(record.created_at),
                "job_id": record.job_id,
                "fencing_token": record.fencing_token,
            }
        )
    location = store_location(store)
    slot = _replication_slot(records[-1]) if records else None
    headers = ["EPOCH", "ACKNOWLEDGED", "SPLIT READS", "CARRIED ON", "RECORDED (UTC)", "JOB"]
    facts = [("store", location), ("source id", source_id)]
    if slot is not None:
        facts.append(
            (
                "replication slot",
                f"{slot} (it keeps WAL on the server while no query reads it; drop a slot no "
                f"query will read again: SELECT pg_drop_replication_slot('{slot}'))",
            )
        )
    text = key_values(facts)
    text += f"\n\n{table(headers, rows)}"
    data: dict[str, Any] = {
        "store": location,
        "source_id": source_id,
        "replication_slot": slot,
        "epochs": epochs,
    }
    return Report(text=text, data=data)


def forget_source(store: OperatorStore, source_id: str) -> Report:
    """Delete every epoch of ``source_id``; refused while a query reads it.

    Raises:
        CliError: No such source id, or a live query holds it.
    """
    _known(store, source_id)
    try:
        lease = store.acquire_source(source_id, job_id=f"sinkv2-state-{uuid.uuid4().hex[:12]}")
    except ConcurrentCommitError as error:
        raise CliError(f"refusing to forget source {source_id!r}: {error}") from error
    with lease:
        forgotten = lease.prune(_EVERY_EPOCH)
    location = store_location(store)
    text = key_values(
        [
            ("store", location),
            ("source id", source_id),
            ("forgotten", f"{forgotten} epoch(s); the next query reads it from the start"),
            (
                "note",
                "a query restarted from a checkpoint location that read these epochs now "
                "fails clearly; start it from a new checkpoint location",
            ),
        ]
    )
    data = {"store": location, "source_id": source_id, "forgotten": forgotten}
    return Report(text=text, data=data)
