"""Sink factories and a stage hook for the streaming door's tests.

Used as ``.option("sink", f"{module}:stateful")`` and ``.option("on_stage",
f"{module}:hook")``: Spark's planner, executor and commit workers import this module
by name, as they would a user's. Options arrive as strings.

The hook is configured per sink id by a JSON file under `HOOKS` (the workers are
forked before a test runs, so the environment cannot tell them): it appends every
(event, epoch) to a log, and raises `DriverDied` at one of them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from sinkv2 import Sink, SinkWriter, WithCompatibleState
from sinkv2_spark.testing import with_task_failures
from tests.spark.datasource_sinks import _KnownParallelism
from tests.spark.stateful_sink import CarryingWriter, StatefulSink

HOOKS = Path(tempfile.gettempdir()) / "sinkv2-stream-door-hooks"
"""Where `hook` finds its configuration: ``<sink id>.json``."""


class DriverDied(RuntimeError):
    """Stands in for a driver that dies at one coordinator step."""


def configure_hook(sink_id: str, *, log: Path, die_at: tuple[str, int] | None = None) -> Path:
    """Make `hook` log ``sink_id``'s stages to ``log``, and raise at ``die_at``.

    Returns the configuration file; remove it after the test.
    """
    HOOKS.mkdir(exist_ok=True)
    path = HOOKS / f"{sink_id}.json"
    path.write_text(json.dumps({"log": str(log), "die_at": list(die_at) if die_at else None}))
    return path


def hook(sink_id: str, event: str, epoch: int) -> None:
    """The ``on_stage`` hook: log, and die where configured."""
    config_path = HOOKS / f"{sink_id}.json"
    if not config_path.exists():
        return
    config = json.loads(config_path.read_text())
    with Path(config["log"]).open("a") as log:
        log.write(json.dumps([event, epoch]) + "\n")
    if config["die_at"] == [event, epoch]:
        config["die_at"] = None  # once: the restart goes on
        config_path.write_text(json.dumps(config))
        raise DriverDied(f"{event} of checkpoint {epoch}")


class DoorStatefulSink(StatefulSink):
    """StatefulSink whose writers do not ask Spark for the parallelism (they log -1)."""

    def create_writer(self, context):
        return CarryingWriter(self, _KnownParallelism(context), None)

    def restore_writer(self, context, recovered_state):
        return CarryingWriter(self, _KnownParallelism(context), list(recovered_state))


class FencingSink(DoorStatefulSink, WithCompatibleState):
    """Subtask 0's writer takes the sink id and lets it go, as another run would.

    It restores `DoorStatefulSink`'s writer states (it is that sink, interfered with).
    """

    def __init__(self, base: str, state: str, sink_id: str) -> None:
        super().__init__(Path(base))
        self.state = state
        self.sink_id = sink_id

    def get_compatible_writer_state_names(self):
        return [f"{DoorStatefulSink.__module__}.{DoorStatefulSink.__qualname__}"]

    def _interfere(self, context) -> None:
        from sinkv2.runtime import SqliteCommitStateStore

        if context.get_subtask_id() == 0:
            SqliteCommitStateStore(self.state).acquire(self.sink_id, job_id="interloper").release()

    def create_writer(self, context):
        self._interfere(context)
        return super().create_writer(context)

    def restore_writer(self, context, recovered_state):
        self._interfere(context)
        return super().restore_writer(context, recovered_state)


def _failures(failures: str) -> dict[tuple[int, int], int]:
    return {(s, a): at for s, a, at in json.loads(failures)}


def stateful(*, base: str, failures: str = "[]", refuse_ids: str = "[]"):
    """DoorStatefulSink under ``base``; failures: JSON [[subtask, attempt, element], ...]."""
    return DoorStatefulSink(
        Path(base), failures=_failures(failures), refuse_ids=json.loads(refuse_ids)
    )


def fencing(*, base: str, state: str, fenced: str):
    return FencingSink(base, state, fenced)


def faulty_files(*, path: str, failures: str, partition_by: str = ""):
    """The ``files`` short name's FileSink, whose writers fail as ``failures`` says."""
    from reference_sinks.datasource import files

    return with_task_failures(files(path=path, partition_by=partition_by), _failures(failures))


def faulty_iceberg(*, warehouse: str, table: str, failures: str):
    """The ``iceberg`` short name's IcebergSink, whose writers fail as ``failures`` says."""
    from reference_sinks.datasource import iceberg

    return with_task_failures(iceberg(warehouse=warehouse, table=table), _failures(failures))


class _PrintWriter(SinkWriter[dict]):
    def write(self, element, context) -> None:
        pass

    def flush(self, end_of_input: bool) -> None:
        pass

    def close(self) -> None:
        pass


class NoCommitterSink(Sink[dict]):
    """Writes straight to the destination: at-least-once at best."""

    def create_writer(self, context):
        return _PrintWriter()


def no_committer():
    return NoCommitterSink()


__all__ = [
    "HOOKS",
    "DoorStatefulSink",
    "DriverDied",
    "FencingSink",
    "NoCommitterSink",
    "configure_hook",
    "faulty_files",
    "faulty_iceberg",
    "fencing",
    "hook",
    "no_committer",
    "stateful",
]
