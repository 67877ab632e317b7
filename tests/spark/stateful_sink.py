"""A committing test sink whose writers carry state from one micro-batch to the next.

`StatefulSink` is `RecordingSink` (staged JSON-lines files, an idempotent SQLite
committer, the same ``failures=`` injection) whose writers snapshot a `Mark` - the
checkpoint, the subtask and the last id it wrote - on top of every state they
restored. So the states recorded at checkpoint N are all the marks ever made, and
each must reach exactly one writer of checkpoint N + 1: a lost or duplicated state
shows up as a missing or repeated mark.

Every writer attempt logs what it restored and what it snapshotted to
``_states/<attempt token>.jsonl``; `committed_checkpoints` keeps the attempts whose
output was committed (one per subtask and checkpoint) and groups them by checkpoint.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from sinkv2 import AttrsMsgpackSerializer, SupportsPreWriteTopology, WithCompatibleState
from tests.spark.recording_sink import RecordingCommitter, RecordingSink, RecordingWriter


@attrs.frozen
class Mark:
    """One writer's snapshot at one checkpoint; ``last`` is -1 if it wrote nothing."""

    checkpoint: int
    subtask: int
    last: int


class CarryingWriter(RecordingWriter):
    """Keeps the states it restored and adds its own `Mark` at each snapshot."""

    def __init__(self, sink: StatefulSink, context, restored: Sequence[Mark] | None) -> None:
        super().__init__(sink, context)
        self.carried = list(restored or ())
        self.last = -1
        self.state_log(
            "restore" if restored is not None else "create",
            restored_checkpoint=context.get_restored_checkpoint_id(),
            subtask=context.get_subtask_id(),
            parallelism=context.get_number_of_parallel_subtasks(),
            states=[attrs.asdict(mark) for mark in self.carried],
        )

    def state_log(self, event: str, **details: Any) -> None:
        with (self.sink.state_logs / f"{self.token}.jsonl").open("a") as log:
            log.write(json.dumps({"event": event, **details}) + "\n")

    def write(self, element, context) -> None:
        super().write(element, context)
        self.last = element["id"]

    def snapshot_state(self, checkpoint_id: int):
        super().snapshot_state(checkpoint_id)
        states = [*self.carried, Mark(checkpoint_id, self.context.get_subtask_id(), self.last)]
        self.state_log(
            "snapshot",
            checkpoint=checkpoint_id,
            states=[attrs.asdict(mark) for mark in states],
        )
        return states


class RefusingCommitter(RecordingCommitter):
    """Fails (unknown reason) every committable holding an id of ``sink.refuse_ids``.

    Touches ``<base>/refused`` when it does, so a test can wait for the refusal.
    """

    def __init__(self, sink: StatefulSink) -> None:
        super().__init__(sink)
        self.sink = sink

    def commit(self, requests) -> None:
        accepted = []
        for request in requests:
            lines = Path(request.get_committable().path).read_text().splitlines()
            if any(json.loads(line)["id"] in self.sink.refuse_ids for line in lines):
                (self.sink.base / "refused").touch()
                request.signal_failed_with_unknown_reason(OSError("the destination refused it"))
            else:
                accepted.append(request)
        super().commit(accepted)


class StatefulSink(RecordingSink):
    """`RecordingSink` whose writer states are `Mark`s, carried from checkpoint to checkpoint.

    Args:
        refuse_ids: The committer fails every committable holding one of these ids.
    """

    def __init__(self, base: Path, *, refuse_ids: Sequence[int] = (), **kwargs: Any) -> None:
        super().__init__(base, **kwargs)
        self.refuse_ids = frozenset(refuse_ids)
        self.state_logs = self.base / "_states"
        self.state_logs.mkdir(parents=True, exist_ok=True)

    def create_committer(self, context):
        return RefusingCommitter(self)

    def create_writer(self, context):
        return CarryingWriter(self, context, None)

    def restore_writer(self, context, recovered_state):
        return CarryingWriter(self, context, list(recovered_state))

    def get_writer_state_serializer(self):
        return AttrsMsgpackSerializer(Mark)

    # --- reading back -----------------------------------------------------------------------

    def committed_tokens(self) -> list[str]:
        """Attempts whose staged file was committed, in commit order."""
        if not Path(self.database).exists():
            return []
        with sqlite3.connect(self.database) as db:
            rows = db.execute("SELECT token FROM files ORDER BY rowid").fetchall()
        db.close()
        return [token for (token,) in rows]

    def committed_checkpoints(self) -> dict[int, dict[int, dict[str, Any]]]:
        """Checkpoint -> subtask -> what its committed attempt restored and snapshotted.

        Each value: ``token``, ``restored_checkpoint``, ``parallelism``, ``restored``
        (the states it received, or ``None`` if it was created, not restored) and
        ``snapshot`` (the states it snapshotted).
        """
        by_checkpoint: dict[int, dict[int, dict[str, Any]]] = {}
        for token in self.committed_tokens():
            events = [
                json.loads(line)
                for line in (self.state_logs / f"{token}.jsonl").read_text().splitlines()
            ]
            start, snapshot = events[0], events[-1]
            assert snapshot["event"] == "snapshot", events
            subtasks = by_checkpoint.setdefault(snapshot["checkpoint"], {})
            assert start["subtask"] not in subtasks, f"two committed attempts of {token}"
            subtasks[start["subtask"]] = {
                "token": token,
                "restored_checkpoint": start["restored_checkpoint"],
                "parallelism": start["parallelism"],
                "restored": start["states"] if start["event"] == "restore" else None,
                "snapshot": snapshot["states"],
            }
        return by_checkpoint


class RenamedStatefulSink(StatefulSink):
    """The same writers and states under another class path (another state name)."""


class CompatibleStatefulSink(StatefulSink, WithCompatibleState):
    """Another class path that declares `StatefulSink`'s states compatible."""

    def get_compatible_writer_state_names(self):
        return [f"{StatefulSink.__module__}.{StatefulSink.__qualname__}"]


class RescalingSink(StatefulSink, SupportsPreWriteTopology[dict]):
    """Repartitions each micro-batch to the next of ``partitions`` (the last one repeats).

    The pre-write topology runs on the driver, once per micro-batch that writes.
    """

    def __init__(self, base: Path, *, partitions: Sequence[int], **kwargs: Any) -> None:
        super().__init__(base, **kwargs)
        self.partitions = list(partitions)

    def add_pre_write_topology(self, input):
        count = self.partitions.pop(0) if len(self.partitions) > 1 else self.partitions[0]
        return input.repartition(count)


class GatedSink(StatefulSink, SupportsPreWriteTopology[dict]):
    """Holds micro-batch ``gate`` (counted from 1, on the driver) until a commit was refused.

    Its pre-write topology waits for ``<base>/refused`` (then two seconds more, for
    the commit thread to record the failure it is raising: a margin a loaded machine
    does not eat, where half a second was a race), so the failure of a decoupled
    commit is known when the micro-batch after it starts.
    """

    def __init__(self, base: Path, *, gate: int, **kwargs: Any) -> None:
        super().__init__(base, **kwargs)
        self.gate = gate
        self.batches = 0

    def add_pre_write_topology(self, input):
        self.batches += 1
        if self.batches == self.gate:
            deadline = time.monotonic() + 180  # Spark on a loaded machine is slow
            while not (self.base / "refused").exists():
                assert time.monotonic() < deadline, "no commit was refused in 180 s"
                time.sleep(0.02)
            time.sleep(2.0)
        return input


__all__ = [
    "CarryingWriter",
    "CompatibleStatefulSink",
    "GatedSink",
    "Mark",
    "RefusingCommitter",
    "RenamedStatefulSink",
    "RescalingSink",
    "StatefulSink",
]
