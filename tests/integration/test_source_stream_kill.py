"""A streaming FLIP-27 read killed with SIGKILL at each step of the source's epoch protocol.

The host (`tests.integration.kill_source_stream`) runs one query per job of `JOBS`:
the log source read with ``from_source(..., streaming=True)`` into
``writeStream.format("sinkv2")`` (FileSink, IcebergSink, PostgresSink), each stopping in
micro-batch 1, which reads source epoch 2 and is the sink's checkpoint 2, at one of these
steps (FileSink at each; IcebergSink and PostgresSink where the sink's state differs:
IcebergSink with files staged and after the commit, PostgresSink with prepared
transactions and before the offset is logged):

- ``epoch-recorded``: the coordinator recorded epoch 2 in the store; Spark has not
  logged ``offsets/1``. The restart asks for the epoch after 1 again and must get the
  recorded epoch 2, not a new plan;
- ``writers-finished``: Spark logged ``offsets/1`` and the tasks read epoch 2 (the
  sink's writers staged it); no ``commits/1``. The restart replays epoch 2 from its
  record and must read the same rows;
- ``acknowledged``: Spark committed micro-batch 1 and asked for the next; the store
  marked epoch 2 acknowledged, the enumerator's ``notify_checkpoint_complete(2)`` has
  not acknowledged upstream. The notification is missed, never doubled;
- ``notified``: after ``notify_checkpoint_complete(2)``, before the coordinator pruned
  epoch 1.

The test kills the host there, as a crashed machine (`Host.kill`), appends more lines
to the logs, and restarts every query from its checkpoint location in this process
with ``availableNow`` and the plain log source and store. Afterwards every log line is
in the destination exactly once, nothing is staged (no prepared transaction left in
PostgreSQL), the sink's store records every checkpoint Committed, the source's store
holds no lease and nothing below Spark's last epoch, and upstream saw each
acknowledgement at most once, in order.
One host, eight queries: 210 s on a shared 2-core machine (load 6), 256 s at load 10
(with IcebergSink at every step, before PostgresSink took two of its places).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sinkv2.runtime import SqliteCommitStateStore
from sinkv2_spark import register
from tests.integration import test_driver_kill
from tests.integration.kill_driver import TABLE
from tests.integration.kill_source_stream import (
    MAX_STARTS,
    PER_TRIGGER,
    lost_python_worker,
    start,
)
from tests.integration.test_driver_kill import Host, staging_leftovers
from tests.integration.test_stream_door_kill import store_problems, wait_for
from tests.integration.test_stream_driver_kill import (
    iceberg_files,
    prepared_transactions,
    spark_log,
)
from tests.spark.log_source import LogSource, append, records_of
from tests.spark.stream_reading import offset_epoch, source_offsets

pytestmark = pytest.mark.spark

KILLED = 2
"""The source epoch (and sink checkpoint) the host is killed in: micro-batch 1."""

STOPS = ("epoch-recorded", "writers-finished", "acknowledged", "notified")
JOBS = (
    *(("files", stop) for stop in STOPS),
    ("iceberg", "writers-finished"),
    ("iceberg", "acknowledged"),
    ("postgres", "epoch-recorded"),
    ("postgres", "writers-finished"),
)
"""(sink kind, stop) of each query: every step once with FileSink, the sinks' own twice."""
FILES = 2
LINES = 60  # per file: 120 lines, at most PER_TRIGGER a micro-batch, so 3 micro-batches


class SourceHost(Host):
    """The batch test's `Host` (waiting, killing), running `kill_source_stream`."""

    module = "tests.integration.kill_source_stream"

    def config(self) -> dict[str, Any]:
        return {"markers": str(self.markers), "jobs": self.jobs}


@pytest.fixture
def start_host(tmp_path, request, monkeypatch):
    """Starts a `SourceHost`; whatever happens in the test, it is killed (by id) at teardown.

    Its queries start one by one, each maybe more than once (`lost_python_worker`): the
    host gets twice the batch test's time to reach the stops.
    """
    monkeypatch.setattr(test_driver_kill, "START_TIMEOUT_S", 2 * test_driver_kill.START_TIMEOUT_S)

    def start_it(jobs: list[dict[str, Any]]) -> SourceHost:
        host = SourceHost(tmp_path, jobs)
        request.addfinalizer(host.kill)
        return host

    return start_it


def create_table(warehouse: str) -> None:
    """The Iceberg table of the log records (``file``, ``line``, ``value``)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from reference_sinks.iceberg import local_catalog

    catalog = local_catalog(warehouse)
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table_if_not_exists(
        TABLE,
        schema=Schema(
            NestedField(1, "file", StringType(), required=False),
            NestedField(2, "line", LongType(), required=False),
            NestedField(3, "value", StringType(), required=False),
        ),
    )


def create_postgres_table(url: str, table: str) -> None:
    """A PostgreSQL table of the log records."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {table} (file text, line bigint, value text)")


def jobs_for(tmp_path: Path, postgres_url: str) -> list[dict[str, Any]]:
    """One query per entry of `JOBS`, each with its own source id, store and output.

    The PostgreSQL queries load tables of their own in ``postgres_url``'s database.
    """
    logs = tmp_path / "logs"
    logs.mkdir()
    for index in range(FILES):
        append(logs, f"part-{index}.log", (f"v{index}-{n}" for n in range(LINES)))
    jobs = []
    for kind, stop in JOBS:
        name = f"{stop}-{kind}"
        base = tmp_path / name
        job: dict[str, Any] = {
            "kind": kind,
            "sink_id": name,
            "source_id": f"logs-{name}",
            "logs": str(logs),
            "ack": str(base / "acks"),
            "source_store": str(base / "source.sqlite"),
            "checkpoint": str(base / "checkpoint"),
            "stop_at": stop,
            "stop_epoch": KILLED,
        }
        if kind == "postgres":
            job |= {"location": postgres_url, "table": f"rows_{stop.replace('-', '_')}"}
            create_postgres_table(postgres_url, job["table"])
        else:
            job["location"] = str(base / ("warehouse" if kind == "iceberg" else "out"))
            if kind == "iceberg":
                create_table(job["location"])
        jobs.append(job)
    return jobs


def acks(job: dict[str, Any]) -> list[int]:
    """The checkpoint ids the source acknowledged upstream, in order."""
    path = Path(job["ack"])
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def killed_problems(job: dict[str, Any]) -> list[str]:
    """Where the host was killed, as the stop says: Spark's logs, the store, upstream."""
    offsets, commits = (
        spark_log(job["checkpoint"], "offsets"),
        spark_log(job["checkpoint"], "commits"),
    )
    stop, problems = job["stop_at"], []
    with SqliteCommitStateStore(job["source_store"]).acquire_source(
        job["source_id"], job_id="inspect"
    ) as lease:
        recorded = lease.get(KILLED)
        earlier = lease.get(KILLED - 1)
    if recorded is None:
        problems.append(f"epoch {KILLED} is not recorded")
    if stop == "epoch-recorded" and (KILLED - 1 in offsets):
        problems.append(f"Spark logged offsets/{KILLED - 1} before the kill")
    if stop == "writers-finished" and (KILLED - 1 not in offsets or KILLED - 1 in commits):
        problems.append(f"offsets {offsets}, commits {commits} (expected offsets/1, no commits/1)")
    if stop in ("acknowledged", "notified"):
        if KILLED - 1 not in commits:
            problems.append(f"commits {commits} (expected commits/{KILLED - 1})")
        if recorded is not None and not recorded.acknowledged:
            problems.append(f"epoch {KILLED} is not marked acknowledged")
        if earlier is None:
            problems.append(f"epoch {KILLED - 1} is pruned before the kill")
        told = acks(job)
        if (KILLED in told) != (stop == "notified"):
            problems.append(f"acknowledged upstream {told} when killed at {stop!r}")
    return problems


def restart(spark: Any, job: dict[str, Any]) -> Any:
    """Restart ``job``'s query with the plain log source and store, under ``availableNow``."""
    source = LogSource(job["logs"], discovery_interval_ms=50, ack_path=job["ack"], batch_lines=17)
    return start(spark, job, source, job["source_store"], {"availableNow": True})


def finish(spark: Any, job: dict[str, Any], query: Any) -> Exception | None:
    """Wait for ``job``'s restarted query to end; what failed it, if anything.

    Started again when Spark lost its Python worker before the query ran (`lost_python_worker`).
    """
    for _ in range(MAX_STARTS):
        try:
            wait_for(query)
        except Exception as error:  # noqa: BLE001  # the caller reports it with the other jobs'
            if not lost_python_worker(query):
                return error
            failure, query = error, restart(spark, job)
        else:
            return None
    return failure


def expected(logs: str) -> list[tuple[str, int, str | None]]:
    return sorted(
        (record["file"], record["line"], record["value"])
        for path in sorted(Path(logs).glob("*.log"))
        for record in records_of(logs, path.name)
    )


def destination_problems(spark: Any, job: dict[str, Any]) -> list[str]:
    """Every log line once in the destination; nothing staged."""
    from tests.integration.kill_driver import make_sink

    problems = []
    if job["kind"] == "files":
        rows = [(r.file, r.line, r.value) for r in spark.read.parquet(job["location"]).collect()]
        if left := staging_leftovers(Path(job["location"])):
            problems.append(f"{len(left)} leftovers under _staging/: {left[:8]}")
    elif job["kind"] == "postgres":
        import psycopg

        with psycopg.connect(job["location"], autocommit=True) as connection:
            rows = connection.execute(f"SELECT file, line, value FROM {job['table']}").fetchall()
        from reference_sinks.postgres._model import sink_prefix  # the sink's gids: its own

        ours = [
            g
            for g in prepared_transactions(job["location"])
            if g.startswith(sink_prefix(job["sink_id"]))
        ]
        if ours:  # the other PostgreSQL query of the database may still be recovering
            problems.append(f"{len(ours)} prepared transactions left: {ours[:4]}")
    else:
        table = make_sink("iceberg", job["location"]).load_table().scan().to_arrow()
        rows = list(
            zip(*(table.column(c).to_pylist() for c in ("file", "line", "value")), strict=True)
        )
        referenced, on_disk = iceberg_files(job["location"])
        if unreferenced := sorted(on_disk - referenced):
            problems.append(f"{len(unreferenced)} unreferenced data files: {unreferenced[:4]}")
    want = expected(job["logs"])
    if sorted(rows) != want:
        got = sorted(rows)
        problems.append(
            f"{len(got)} rows, {len(set(got))} distinct, missing {sorted(set(want) - set(got))[:4]}"
            f" (expected {len(want)} once)"
        )
    return problems


def source_store_problems(job: dict[str, Any]) -> list[str]:
    """No lease held; every epoch below Spark's last one pruned; upstream told once, in order."""
    last = offset_epoch(
        source_offsets(Path(job["checkpoint"]))[spark_log(job["checkpoint"], "offsets")[-1]]
    )
    problems = []
    try:
        lease = SqliteCommitStateStore(job["source_store"]).acquire_source(
            job["source_id"], job_id="inspect"
        )
    except Exception as error:  # noqa: BLE001  # reported with the other jobs' problems
        return [f"the source id is still held after the restart: {error}"]
    with lease:
        kept = [epoch for epoch in range(last + 1) if lease.get(epoch) is not None]
        latest = lease.latest()
    if latest is None or latest.epoch != last:
        problems.append(f"the store's latest epoch is {latest} (Spark's last is {last})")
    if kept != [last]:
        problems.append(f"epochs {kept} are kept (expected only Spark's last, {last})")
    told = acks(job)
    if told != sorted(set(told)):
        problems.append(f"acknowledged upstream {told}: not once each, in order")
    return problems


def test_a_source_stream_killed_at_each_step_of_its_epoch_protocol_is_read_exactly_once(
    spark, tmp_path, start_host, postgres_url
):
    jobs = jobs_for(tmp_path, postgres_url)
    host = start_host(jobs)
    host.wait_for(*(f"{job['sink_id']}.stopped" for job in jobs))
    host.kill()

    problems = [f"{job['sink_id']}: {p}" for job in jobs for p in killed_problems(job)]
    assert problems == [], "\n".join(problems)

    logs = Path(jobs[0]["logs"])  # more lines, and a new file, while the queries are down
    append(logs, "part-0.log", (f"late-{n}" for n in range(PER_TRIGGER // 2)))
    append(logs, "part-9.log", (f"new-{n}" for n in range(PER_TRIGGER // 2)))

    register(spark)
    queries = {job["sink_id"]: restart(spark, job) for job in jobs}  # they run at once
    for job in jobs:
        if (failure := finish(spark, job, queries[job["sink_id"]])) is not None:
            problems.append(f"{job['sink_id']}: the restart failed: {failure!r}")
            continue
        found = destination_problems(spark, job) + store_problems(job) + source_store_problems(job)
        problems += [f"{job['sink_id']}: {problem}" for problem in found]
    if prepared := prepared_transactions(postgres_url):  # every query has ended
        problems.append(f"{len(prepared)} prepared transactions left: {prepared[:4]}")
    assert problems == [], "\n".join(problems)
