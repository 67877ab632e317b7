"""A driver host to kill at each step of `PostgresCdcSource`'s epoch protocol, or at random.

``python -m tests.integration.kill_cdc_stream <config.json>`` is
`kill_source_stream`'s host with the CDC source instead of the log source: one
streaming query per job of the config, started one after another, each reading its
own slot of the same table (``PostgresCdcSource(..., snapshot=True)``) with
``from_source(..., streaming=True)`` into ``writeStream.format("sinkv2")``: PostgresSink,
an upsert target (``upsert_key = id``) or an append table of the change rows (the
change log), or IcebergSink (``kind = "iceberg"``: the change log, appended). Each stops
at its ``stop_at`` step of epoch ``stop_epoch`` (markers and stops as in
`kill_source_stream`):

- ``epoch-recorded``: `FaultStore`'s lease, after ``record_epoch``;
- ``writers-finished``, ``committer-finished``: the sink's ``on_stage`` hook (after
  the sink's commit, before the coordinator recorded it);
- ``acknowledged``: `FaultCdcSource`'s enumerator, inside
  ``notify_checkpoint_complete`` before the slot is advanced.

A job whose ``stop_at`` is ``None`` never stops: once it has recorded its first epoch
the host starts the next job and leaves it streaming, to be killed wherever it is when
the test kills the host (a random moment). Its markers say how far it got. The test
crashes the PostgreSQL server under it first (``pg_ctl restart -m immediate``): the
query fails on its lost connections and the host starts it again from its checkpoint
(`lost_server`), as a cluster manager would.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

from reference_sinks.postgres._cdc_enumerator import CdcEnumerator
from tests.integration.kill_source_stream import (
    MAX_STARTS,
    FaultStore,
    lost_python_worker,
    plan_of,
    reached,
)
from tests.integration.kill_stream_door import CONFIG_ENV, HOOK

SERVER_LOST: Final = (
    "AdminShutdown",
    "OperationalError",
    "terminating connection",
    "server closed the connection",
    "the database system is",
    "Connection refused",
)
"""What a query's error says when the PostgreSQL server went away under it (psycopg)."""
PER_TRIGGER: Final = 20
"""``max_records_per_trigger`` of every query (a transaction holds at most 3 changes)."""
PARALLELISM: Final = 2
CHUNK_ROWS: Final = 5
"""``snapshot_chunk_rows``: the table's first rows are two chunks, read in epoch 1."""


class FaultCdcEnumerator(CdcEnumerator):
    """The CDC enumerator, stopping inside ``notify_checkpoint_complete`` before the advance."""

    def __init__(self, context: Any, source: Any, state: Any, plan: dict[str, Any]) -> None:
        super().__init__(context, source, state)
        self._plan = plan

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        reached(self._plan, "acknowledged", checkpoint_id)
        super().notify_checkpoint_complete(checkpoint_id)


class FaultCdcSource:
    """A real `PostgresCdcSource` whose enumerators are `FaultCdcEnumerator`s."""

    def __init__(self, source: Any, plan: dict[str, Any]) -> None:
        self.source = source
        self.plan = plan

    def create_enumerator(self, enum_context: Any) -> FaultCdcEnumerator:
        return FaultCdcEnumerator(enum_context, self.source, None, self.plan)

    def restore_enumerator(self, enum_context: Any, checkpoint: Any) -> FaultCdcEnumerator:
        return FaultCdcEnumerator(enum_context, self.source, checkpoint, self.plan)

    def get_boundedness(self) -> Any:
        return self.source.get_boundedness()

    def create_reader(self, reader_context: Any) -> Any:
        return self.source.create_reader(reader_context)

    def get_split_serializer(self) -> Any:
        return self.source.get_split_serializer()

    def get_enumerator_checkpoint_serializer(self) -> Any:
        return self.source.get_enumerator_checkpoint_serializer()

    def get_produced_type(self) -> Any:
        return self.source.get_produced_type()

    def end_positions(self, splits: Any) -> Any:
        return self.source.end_positions(splits)

    def cut_split(self, split: Any, end: object, max_records: int | None) -> Any:
        return self.source.cut_split(split, end, max_records)


def lost_server(query: Any) -> bool:
    """Whether ``query`` died because the PostgreSQL server restarted under it."""
    error = query.exception()
    return error is not None and any(sign in str(error) for sign in SERVER_LOST)


def cdc_source(job: dict[str, Any]) -> Any:
    """``job``'s `PostgresCdcSource`: its own slot of the shared table."""
    from reference_sinks.postgres import PostgresCdcSource

    return PostgresCdcSource(
        job["url"],
        job["src"],
        publication=job["publication"],
        slot_name=job["slot"],
        snapshot=True,
        snapshot_chunk_rows=CHUNK_ROWS,
    )


def start(
    spark: Any,
    job: dict[str, Any],
    source: Any,
    state_store: Any,
    trigger: dict[str, Any],
    *,
    max_records: int = PER_TRIGGER,
) -> Any:
    """Start ``job``'s query: the CDC rows into its PostgresSink or IcebergSink table."""
    from sinkv2_spark import from_source

    df = from_source(
        spark,
        source,
        source_id=job["source_id"],
        streaming=True,
        state_store=state_store,
        parallelism=PARALLELISM,
        max_records_per_trigger=max_records,
    )
    writer = (
        df.writeStream.format("sinkv2")
        .option("sink_id", job["sink_id"])
        .option("checkpointLocation", job["checkpoint"])
        .option("table", job["table"])
    )
    if job.get("kind") == "iceberg":
        writer = writer.option("sink", "iceberg").option("warehouse", job["warehouse"])
    else:
        writer = writer.option("sink", "postgres").option("url", job["url"])
    if job["upsert"]:
        writer = writer.option("upsert_key", "id")
    if "on_stage" in job:
        writer = writer.option("on_stage", job["on_stage"])
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


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
            if (
                job["stop_at"] is None
                and query is not None
                and query.isActive
                and (markers / f"{name}.epoch-recorded.1").exists()
            ):
                continue  # it streams on until the host is killed
            if query is not None and query.isActive:
                break  # one query at a time runs up to its stop
            if query is not None:
                print(f"{name} ended before its stop: {query.exception()}", flush=True)
                restartable = lost_python_worker(query) or (
                    job["stop_at"] is None and lost_server(query)
                )
                if not restartable or starts[name] >= MAX_STARTS:
                    raise SystemExit(f"{name} failed before reaching {job['stop_at']}")
            starts[name] += 1
            plan = plan_of(config, job)
            source = FaultCdcSource(cdc_source(job), plan)
            store = FaultStore(job["source_store"], plan)
            running[name] = start(spark, {**job, "on_stage": HOOK}, source, store, {})
            break
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1])
