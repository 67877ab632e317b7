"""A driver host to kill at each step of a FLIP-27 source's epoch protocol, and its faults.

``python -m tests.integration.kill_source_stream <config.json>`` runs one streaming
query per job of the config in a ``local[2]`` session, one after another: each runs up
to its stop and stays blocked there while the next one starts (Spark gives a new Python
worker a fixed 10 s to connect back, too short when many start at once on a loaded
machine; a query that lost its worker so is started again, `lost_python_worker`). Each
reads the log source
(``tests/spark/log_source.py``) read with ``sinkv2_spark.from_source(...,
streaming=True)`` into a FileSink, IcebergSink or PostgresSink through
``writeStream.format("sinkv2")``, at most `PER_TRIGGER` records a micro-batch, so the
log files of the config take several micro-batches (a job's ``splits_per_trigger``
splits instead: a source whose splits are files read whole is never cut at a count).

The faults are wrappers around the real components, each keeping a marker file
``<markers>/<sink id>.<event>.<epoch>`` for every step it sees and, at the job's
``stop_at`` event of its ``stop_epoch``, also ``<sink id>.stopped`` before sleeping
there until the test kills the host (the source coordinator runs in Spark's Python
streaming source runner, which blocks the micro-batch loop while it sleeps):

- `FaultStore`: the real `SqliteCommitStateStore`; its source lease stops right after
  ``record_epoch`` wrote epoch N (``epoch-recorded``): Spark has not logged the offset;
- the sink's ``on_stage`` hook (`tests.integration.kill_stream_door.on_stage`) at
  ``writers-finished`` of checkpoint N: Spark logged the offset, the tasks read;
- `FaultLogSource`: the real log source; its enumerator stops inside
  ``notify_checkpoint_complete(N)``, before acknowledging upstream (``acknowledged``:
  the store has marked epoch N) or after (``notified``: the coordinator has not
  pruned yet).

A job with a ``source`` (``"module:callable"``, called with the job; `iceberg_source` and
`file_source` here) reads that source instead of the log source; only the store's
faults (``epoch-recorded``; ``marked``: the store marked epoch N acknowledged, the
enumerator has not been notified nor told the finished splits) and the sink's apply.

Micro-batch ``b`` reads source epoch ``b + 1`` and is the sink's checkpoint ``b + 1``,
so one number names the same micro-batch on both sides.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

from sinkv2.runtime import SqliteCommitStateStore
from tests.integration.kill_stream_door import CONFIG_ENV, HOOK
from tests.spark.log_source import LogEnumerator, LogSource

PER_TRIGGER: Final = 40
"""``max_records_per_trigger`` of every query, in the host and at the restart."""

PARALLELISM: Final = 2
"""Reader subtasks of every query."""

PG_TABLE: Final = "source_rows"


# --- the faults -----------------------------------------------------------------------------


def reached(plan: dict[str, Any], event: str, epoch: int) -> None:
    """Mark ``event`` of ``epoch``; at the plan's stop, mark ``stopped`` and sleep."""
    markers = Path(plan["markers"])
    (markers / f"{plan['name']}.{event}.{epoch}").touch()
    if (event, epoch) == (plan["stop_at"], plan["stop_epoch"]):
        (markers / f"{plan['name']}.stopped").touch()
        time.sleep(3600)  # killed from outside meanwhile


class FaultLease:
    """A real source lease that reports ``record_epoch`` and ``mark_acknowledged``."""

    def __init__(self, lease: Any, plan: dict[str, Any]) -> None:
        self._lease = lease
        self._plan = plan

    def record_epoch(self, epoch: int, **payload: Any) -> Any:
        record = self._lease.record_epoch(epoch, **payload)
        reached(self._plan, "epoch-recorded", epoch)
        return record

    def mark_acknowledged(self, epoch: int) -> bool:
        marked = self._lease.mark_acknowledged(epoch)
        reached(self._plan, "marked", epoch)
        return bool(marked)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._lease, name)


class FaultStore:
    """The real SQLite store at ``path``, whose source leases are `FaultLease`s."""

    def __init__(self, path: str, plan: dict[str, Any]) -> None:
        self._store = SqliteCommitStateStore(path)
        self._plan = plan

    def acquire_source(self, source_id: str, *, job_id: str) -> FaultLease:
        return FaultLease(self._store.acquire_source(source_id, job_id=job_id), self._plan)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # pickling looks these up before _store exists
            raise AttributeError(name)
        return getattr(self._store, name)


class FaultLogEnumerator(LogEnumerator):
    """The log enumerator, reporting before and after it acknowledges upstream."""

    def __init__(self, *args: Any, plan: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plan = plan

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        reached(self._plan, "acknowledged", checkpoint_id)
        super().notify_checkpoint_complete(checkpoint_id)
        reached(self._plan, "notified", checkpoint_id)


class FaultLogSource(LogSource):
    """The log source with a `FaultLogEnumerator`."""

    def __init__(self, directory: str, plan: dict[str, Any], **options: Any) -> None:
        super().__init__(directory, **options)
        self.plan = plan

    def create_enumerator(self, enum_context: Any) -> LogEnumerator:
        return FaultLogEnumerator(enum_context, self, plan=self.plan)

    def restore_enumerator(self, enum_context: Any, checkpoint: Any) -> LogEnumerator:
        return FaultLogEnumerator(
            enum_context, self, checkpoint.assigned, checkpoint.pending, plan=self.plan
        )


def iceberg_source(job: dict[str, Any]) -> Any:
    """A ``source`` hook: an IcebergSource following the job's table every 50 ms."""
    from reference_sinks.iceberg import IcebergSource

    return IcebergSource.local(job["warehouse"], job["table"]).monitor_continuously(0.05)


def file_source(job: dict[str, Any]) -> Any:
    """A ``source`` hook: a FileSource on the job's ``input``, its files cleaned (``clean``)."""
    from reference_sinks.files import FileSource
    from tests.reference_sinks.files.file_source_data import SCHEMA

    return FileSource(job["input"], schema=SCHEMA).monitor_continuously(
        0.05, clean_source=job["clean"], archive_dir=job.get("archive")
    )


# --- the queries ------------------------------------------------------------------------------


def sink_options(job: dict[str, Any]) -> dict[str, str]:
    """The door's options for ``job``'s sink."""
    if job["kind"] == "files":
        return {"sink": "files", "path": job["location"], "max_rows": "25"}
    if job["kind"] == "iceberg":
        from tests.integration.kill_driver import TABLE

        return {"sink": "iceberg", "warehouse": job["location"], "table": TABLE}
    if job["kind"] == "postgres":
        return {"sink": "postgres", "url": job["location"], "table": job.get("table", PG_TABLE)}
    raise ValueError(f"unknown sink kind {job['kind']!r}; use 'files', 'iceberg' or 'postgres'")


def start(
    spark: Any,
    job: dict[str, Any],
    source: Any,
    state_store: Any,
    trigger: dict[str, Any],
    *,
    hook: bool = False,
) -> Any:
    """Start ``job``'s query: ``source`` through ``from_source`` into the sink door.

    ``hook``: with the sink's ``on_stage`` hook (only in the host, where it finds its config).
    """
    from sinkv2_spark import from_source

    limit = (  # sources of whole-file splits, never cut at a record count, take a split limit
        {"max_splits_per_trigger": job["splits_per_trigger"]}
        if "splits_per_trigger" in job
        else {"max_records_per_trigger": PER_TRIGGER}
    )
    df = from_source(
        spark,
        source,
        source_id=job["source_id"],
        streaming=True,
        state_store=state_store,
        parallelism=PARALLELISM,
        **limit,
    )
    writer = (
        df.writeStream.format("sinkv2")
        .option("sink_id", job["sink_id"])
        .option("checkpointLocation", job["checkpoint"])
    )
    if hook:
        writer = writer.option("on_stage", HOOK)
    if trigger:
        writer = writer.trigger(**trigger)
    for key, value in sink_options(job).items():
        writer = writer.option(key, value)
    return writer.start()


MAX_STARTS: Final = 5
"""Starts of one query in the host, when Spark lost its Python worker (`lost_python_worker`)."""


def lost_python_worker(query: Any) -> bool:
    """Whether ``query`` died because a Python worker did not connect back to Spark in time.

    Spark waits a fixed 10 s for a new Python worker (``PythonWorkerFactory``), too short
    for the interpreter to start on a loaded 2-core machine; nothing of the query ran
    then, and it may start again from its checkpoint location.
    """
    error = query.exception()
    return error is not None and "Python worker failed to connect back" in str(error)


def plan_of(config: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    return {
        "markers": config["markers"],
        "name": job["sink_id"],
        "stop_at": job["stop_at"],
        "stop_epoch": job["stop_epoch"],
    }


def main(config_path: str) -> None:
    os.environ[CONFIG_ENV] = str(Path(config_path).resolve())  # before the JVM starts
    config = json.loads(Path(config_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sinkv2_spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    markers = Path(config["markers"])
    running: dict[str, Any] = {}
    starts = dict.fromkeys((job["sink_id"] for job in config["jobs"]), 0)
    while True:  # a killed run never leaves this loop
        for job in config["jobs"]:
            name = job["sink_id"]
            query = running.get(name)
            if (markers / f"{name}.stopped").exists():
                continue
            if query is not None and query.isActive:
                break  # one query at a time runs up to its stop: few Python workers start at once
            if query is not None:
                print(f"{name} ended before its stop: {query.exception()}", flush=True)
                if not lost_python_worker(query) or starts[name] >= MAX_STARTS:
                    raise SystemExit(f"{name} failed before reaching {job['stop_at']}")
            starts[name] += 1
            plan = plan_of(config, job)
            if "source" in job:  # another source: a "module:callable" taking the job
                module, _, attribute = job["source"].partition(":")
                source = getattr(importlib.import_module(module), attribute)(job)
            else:
                source = FaultLogSource(
                    job["logs"], plan, discovery_interval_ms=50, ack_path=job["ack"], batch_lines=17
                )
            store = FaultStore(job["source_store"], plan)
            running[name] = start(spark, job, source, store, {}, hook=True)
            break
        time.sleep(0.2)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
