"""``sinkv2 state list`` and ``sinkv2 state show``: read a store without taking anything.

Both read through the store's operator queries, so they work while drivers hold
the sink ids; what they print is a snapshot a running driver may change.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sinkv2._cli._errors import CliError
from sinkv2._cli._render import (
    Report,
    checkpoint_text,
    fields,
    iso,
    iso_json,
    key_values,
    table,
)
from sinkv2._cli._sinks import (
    LoadedSink,
    committable_sizes,
    decode_committables,
    describe_committable,
    load_sink,
    recorded_class,
    sink_from_class_path,
)
from sinkv2._cli._stores import HolderInfo, OperatorStore, driver_state, store_location
from sinkv2.errors import SerializationError
from sinkv2.runtime import EpochRecord, EpochStatus, JobOutcome, WriterStates

__all__ = ["holder_data", "holder_text", "list_sinks", "show_sink"]

_STATUSES = tuple(EpochStatus)


def holder_text(holder: HolderInfo | None) -> str:
    """The holder cell: ``-``, or who holds the sink id and whether its driver runs."""
    if holder is None:
        return "-"
    state = driver_state(holder)
    return str(holder) if state == "unknown" else f"{holder} [driver {state}]"


def holder_data(holder: HolderInfo | None) -> dict[str, Any] | None:
    """The holder for ``--json``: its recorded fields, a description, and the driver's state."""
    if holder is None:
        return None
    data = fields(holder)
    if not isinstance(data, dict):
        data = {}
    data["since"] = iso_json(holder.since)
    data["description"] = str(holder)
    data["driver"] = driver_state(holder)
    return data


def list_sinks(store: OperatorStore) -> Report:
    """Every sink id of the store: holder, epochs by status, last committed epoch, jobs."""
    rows = []
    sinks = []
    for sink_id in store.sink_ids():
        records = store.epochs(sink_id)
        holder = store.holder(sink_id)
        jobs = store.jobs(sink_id)
        counts = Counter(record.status for record in records)
        committed = [r.epoch for r in records if r.status is EpochStatus.COMMITTED]
        updated = max((r.updated_at for r in records), default=None)
        sinks.append(
            {
                "sink_id": sink_id,
                "holder": holder_data(holder),
                "epochs": {status.value: counts[status] for status in _STATUSES},
                "last_committed_epoch": max(committed, default=None),
                "last_updated": iso_json(updated),
                "unfinished_jobs": jobs,
                "origin": store.origin(sink_id),
            }
        )
        rows.append(
            [
                sink_id,
                *(str(counts[status]) for status in _STATUSES),
                str(max(committed)) if committed else "-",
                iso(updated),
                str(len(jobs)),
                holder_text(holder),
            ]
        )
    location = store_location(store)
    if not rows:
        text = f"{location}: no sink ids recorded"
    else:
        headers = ["SINK ID", "PENDING", "ABORTED", "COMMITTED", "LAST COMMITTED"]
        headers += ["UPDATED (UTC)", "JOBS", "HELD BY"]
        text = f"{location}\n\n{table(headers, rows)}"
    sources, source_rows = _list_sources(store)
    if source_rows:
        headers = ["SOURCE ID", "EPOCHS", "LATEST EPOCH", "LAST ACKNOWLEDGED", "RECORDED (UTC)"]
        text += f"\n\n{table(headers, source_rows)}"
    return Report(text=text, data={"store": location, "sinks": sinks, "sources": sources})


def _list_sources(store: OperatorStore) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Every source id of the store: its epochs, the latest, the last acknowledged."""
    sources, rows = [], []
    for source_id in store.source_ids():
        records = store.source_epochs(source_id)
        latest = max((r.epoch for r in records), default=None)
        acknowledged = max((r.epoch for r in records if r.acknowledged), default=None)
        recorded = max((r.created_at for r in records), default=None)
        sources.append(
            {
                "source_id": source_id,
                "epochs": len(records),
                "latest_epoch": latest,
                "last_acknowledged_epoch": acknowledged,
                "last_recorded": iso_json(recorded),
            }
        )
        rows.append(
            [
                source_id,
                str(len(records)),
                "-" if latest is None else str(latest),
                "-" if acknowledged is None else str(acknowledged),
                iso(recorded),
            ]
        )
    return sources, rows


def _epoch_data(record: EpochRecord) -> dict[str, Any]:
    sizes = _sizes(record)
    states = _writer_states(record)
    return {
        "epoch": record.epoch,
        "status": record.status.value,
        "checkpoint_id": record.checkpoint_id,
        "explicit": record.explicit,
        "updated_at": iso_json(record.updated_at),
        "job_id": record.job_id,
        "fencing_token": record.fencing_token,
        "serializer_version": record.serializer_version,
        "committables": None if sizes is None else len(sizes),
        "payload_bytes": len(record.payload),
        "writer_states": None if states is None else states.count,
        "state_name": None if states is None else states.state_name,
    }


def _sizes(record: EpochRecord) -> list[int] | None:
    try:
        return committable_sizes(record)
    except SerializationError:
        return None


def _writer_states(record: EpochRecord) -> WriterStates | None:
    try:
        return WriterStates.decode(record.writer_states, what="")
    except SerializationError:
        return None


def _count(value: object) -> str:
    return "unreadable" if value is None else str(value)


def show_sink(
    store: OperatorStore, sink_id: str, *, epoch: int | None, sink_spec: str | None
) -> Report:
    """One sink id's epochs; with ``epoch``, that epoch's committables, decoded if possible.

    Raises:
        CliError: The store has no record of ``sink_id``, or none of ``epoch``; or
            ``--sink`` names no usable sink.
    """
    location = store_location(store)
    records = store.epochs(sink_id)
    holder = store.holder(sink_id)
    jobs = store.jobs(sink_id)
    origin = store.origin(sink_id)
    outcomes = store.outcomes(sink_id, limit=1)
    known = store.sink_ids()
    if sink_id not in known:
        raise CliError(
            f"{location} has no record of sink id {sink_id!r}; it knows "
            + (", ".join(repr(k) for k in known) if known else "no sink ids")
            + " (see: sinkv2 state list)"
        )
    header = [
        ("store", location),
        ("sink id", sink_id),
        ("held by", holder_text(holder)),
        ("origin", origin or "-"),
        ("unfinished jobs", ", ".join(jobs) if jobs else "-"),
    ]
    last = outcomes[0] if outcomes else None
    if last is not None:
        header.append(("last door job", _outcome_text(last)))
    data: dict[str, Any] = {
        "store": location,
        "sink_id": sink_id,
        "holder": holder_data(holder),
        "origin": origin,
        "unfinished_jobs": jobs,
        "last_door_job": None if last is None else _outcome_data(last),
    }
    if epoch is None:
        epochs = [_epoch_data(record) for record in records]
        data["epochs"] = epochs
        rows = [
            [
                str(e["epoch"]),
                e["status"],
                checkpoint_text(e["checkpoint_id"]),
                "yes" if e["explicit"] else "no",
                _count(e["committables"]),
                str(e["payload_bytes"]),
                "-" if e["writer_states"] is None else str(e["writer_states"]),
                iso(record.updated_at),
                e["job_id"],
            ]
            for e, record in zip(epochs, records, strict=True)
        ]
        headers = ["EPOCH", "STATUS", "CHECKPOINT", "EXPLICIT", "COMMITTABLES", "BYTES"]
        headers += ["STATES", "UPDATED (UTC)", "JOB"]
        body = table(headers, rows) if rows else "no epochs recorded"
        return Report(text=f"{key_values(header)}\n\n{body}", data=data)

    record = next((r for r in records if r.epoch == epoch), None)
    if record is None:
        recorded = ", ".join(str(r.epoch) for r in records) or "none"
        raise CliError(
            f"sink id {sink_id!r} has no epoch {epoch} in {location}; its recorded epochs: "
            f"{recorded}"
        )
    epoch_data = _epoch_data(record)
    loaded, why = _sink_for(records, sink_spec)
    committables, decoded_with, hint = _decoded(record, loaded, why)
    epoch_data["decoded_with"] = decoded_with
    epoch_data["hint"] = hint
    epoch_data["committable_list"] = committables
    data["epoch"] = epoch_data
    header += [
        ("epoch", str(record.epoch)),
        ("status", record.status.value),
        ("checkpoint id", checkpoint_text(record.checkpoint_id)),
        ("explicit", "yes" if record.explicit else "no"),
        ("updated (UTC)", iso(record.updated_at)),
        ("job", record.job_id),
        ("fencing token", str(record.fencing_token)),
        ("serializer version", str(record.serializer_version)),
        ("writer states", _states_text(epoch_data)),
        ("committables", _count(epoch_data["committables"])),
        ("decoded with", decoded_with or "-"),
    ]
    lines = [
        f"  [{c['index']}] {c['size']} bytes" + (f": {c['text']}" if "text" in c else "")
        for c in committables
    ]
    text = key_values(header)
    if lines:
        text += "\n\n" + "\n".join(lines)
    if hint:
        text += f"\n\n{hint}"
    for c in committables:
        c.pop("text", None)
    return Report(text=text, data=data)


def _outcome_text(outcome: JobOutcome) -> str:
    """A data-source door job's outcome on one line (see ``sinkv2_spark.last_result``)."""
    batch = f", micro-batch {outcome.batch_id}" if outcome.batch_id is not None else ""
    job = f"job {outcome.job_id}{batch}"
    if outcome.error is not None:
        return f"{job} FAILED in its {outcome.error.failed_in}: {outcome.error.headline()}"
    result = outcome.result
    if result is None:
        return f"{job}: no result"
    return (
        f"{job}: epoch {result.epoch} {result.status.value}, {result.records_written:,} "
        f"records written, {result.committed} committables committed"
    )


def _outcome_data(outcome: JobOutcome) -> dict[str, Any]:
    data: dict[str, Any] = {"job_id": outcome.job_id, "batch_id": outcome.batch_id}
    if outcome.result is not None:
        result = outcome.result
        data["result"] = {
            "epoch": result.epoch,
            "checkpoint_id": result.checkpoint_id,
            "status": result.status.value,
            "records_written": result.records_written,
            "committed": result.committed,
            "already_committed": result.already_committed,
            "recommitted_epochs": list(result.recommitted_epochs),
            "cleaned_jobs": list(result.cleaned_jobs),
        }
    if outcome.error is not None:
        data["error"] = {
            "failed_in": outcome.error.failed_in,
            "type": outcome.error.type_name,
            "message": outcome.error.message,
            "where": outcome.error.where,
        }
    return data


def _states_text(epoch_data: dict[str, Any]) -> str:
    if epoch_data["writer_states"] is None:
        return "-"
    return f"{epoch_data['writer_states']} (recorded by {epoch_data['state_name']})"


def _sink_for(records: list[EpochRecord], sink_spec: str | None) -> tuple[LoadedSink | None, str]:
    """The sink to decode with, or ``None`` and why not (``--sink`` errors propagate)."""
    if sink_spec is not None:
        return load_sink(sink_spec), ""
    class_path = recorded_class(records)
    if class_path is None:
        return None, (
            "the store does not record which sink wrote this epoch (batch runs record no "
            "writer states); pass --sink module:factory to decode the committables"
        )
    try:
        return sink_from_class_path(class_path), ""
    except CliError as error:
        return None, f"{error}; pass --sink module:factory to decode the committables"


def _decoded(
    record: EpochRecord, loaded: LoadedSink | None, why: str
) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """Each committable (index, size, and its value when decoded), the decoder, a hint."""
    sizes = _sizes(record)
    if sizes is None:
        return (
            [],
            None,
            (
                f"the {len(record.payload)} bytes recorded for this epoch are not a framed "
                "committable list; the store was changed by something other than sinkv2"
            ),
        )
    raw = [{"index": i, "size": size} for i, size in enumerate(sizes)]
    if loaded is None:
        return raw, None, (f"committables not decoded: {why}" if sizes else None)
    try:
        values = decode_committables(loaded, record)
    except SerializationError as error:
        return (
            raw,
            None,
            (
                f"committables not decoded: they do not read with {loaded.source}'s committable "
                f"serializer: {error}"
            ),
        )
    return (
        [
            {**entry, "value": fields(value), "text": describe_committable(value)}
            for entry, value in zip(raw, values, strict=True)
        ],
        loaded.source,
        None,
    )
