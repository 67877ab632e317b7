"""A streaming driver killed with SIGKILL at each coordinator step, then restarted: exactly once.

The host is a child process (`tests.integration.kill_stream_driver`) with its own
``local[2]`` Spark session, running five streaming queries at once: a partitioned
FileSink and a partitioned IcebergSink, each fed by Spark's JSON file source
(``availableNow``, one file per micro-batch) and by the ``rate`` source (a
``processingTime`` trigger), and a PostgresSink fed by the file source (its staged
output: prepared transactions; afterwards ``pg_prepared_xacts`` must be empty). Each
query stops at one coordinator step of micro-batch 1 (checkpoint 2, the second), and
the test kills the host there as a crashed machine: SIGKILL to every process group of
its session (the batch test's `Host.kill`).

Without ``decoupled_commit`` the micro-batch thread stops inside ``foreachBatch``, so
Spark has logged micro-batch 1's offsets but not its commit (no ``commits/1``), and
the restart replays it as checkpoint 2:

- ``writers-finished``: nothing of checkpoint 2 recorded; its staged output belongs
  to the dead job and is removed when the restart opens; the replay writes it again;
- ``pending-recorded``: checkpoint 2 Pending; the restart commits it from the store;
- ``committer-finished``: Pending, and the sink already committed it; the restart's
  commit finds it done (FileSink's files are in place, IcebergSink's snapshot has it);
- ``committed-recorded``: Committed; the replay is skipped.

With ``decoupled_commit`` the commit thread stops after checkpoint 2's committer ran,
while the micro-batch thread goes on: Spark logs micro-batch 1's commit though the
sink's is not recorded, and checkpoint 3 (the file source's last; the rate source's
may be later) is recorded Pending before the kill. The restart commits them all when it opens,
before its first micro-batch.

Each restart runs in this process, from the killed query's checkpoint location and
its default commit state store, with the ``availableNow`` trigger so that it ends by
itself (Spark wraps the rate source, which lacks ``availableNow`` support; its
restart ends after the micro-batch it replays, or else after one up to its offset
at the restart). Afterwards every row is in the destination
exactly once, nothing staged is left (FileSink: ``_staging/`` is empty; Iceberg: the
table's data location holds only files its current snapshot references), each Iceberg
snapshot is of another checkpoint, and Spark's commit log has every micro-batch.

One host runs the queries of all five scenarios at once and is killed once every one
has stopped (a host costs 30-60 s of Spark start-up and micro-batches on a loaded
2-core machine); the five restarts of a scenario run at once, in this process's Spark
session, one scenario per test.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from reference_sinks.iceberg import CHECKPOINT_ID_PROPERTY
from sinkv2.runtime import CommitRetryPolicy, CommitStatus, SinkResult
from sinkv2_spark import SinkTopologyTranslator
from tests.integration.kill_driver import PG_TABLE, create_postgres_table, create_table, make_sink
from tests.integration.kill_stream_driver import (
    N_FILES,
    RATE_ROWS_PER_SECOND,
    ROWS_PER_FILE,
    stream,
    write_input,
)
from tests.integration.test_driver_kill import SHARED_START_TIMEOUT_S, Host, staging_leftovers

pytestmark = pytest.mark.spark

KILLED = 2
"""The checkpoint the host is killed in: micro-batch 1, the second."""

JOBS = [(kind, source) for kind in ("files", "iceberg") for source in ("files", "rate")] + [
    ("postgres", "files")
]
RESTART_TIMEOUT_S = 600.0  # only a deadline for a hung restart; a loaded machine is slow

# scenario: (the step the host stops at in checkpoint KILLED, decoupled_commit)
SCENARIOS = {
    "writers-finished": ("writers-finished", False),
    "pending-recorded": ("pending-recorded", False),
    "committer-finished": ("committer-finished", False),
    "committed-recorded": ("committed-recorded", False),
    "decoupled-committer-finished": ("committer-finished", True),
}

# The status of checkpoint KILLED, replayed by the restart: written again, recommitted
# (the restart's coordinator committed a Pending one when it opened, and the replay's
# result says so), or found committed.
REPLAY_STATUS = {
    "writers-finished": CommitStatus.COMMITTED,
    "pending-recorded": CommitStatus.RECOMMITTED,
    "committer-finished": CommitStatus.RECOMMITTED,
    "committed-recorded": CommitStatus.ALREADY_COMMITTED,
}

# Steps after which checkpoint KILLED's staged output is still staged when the host dies.
STAGED_AT = ("writers-finished", "pending-recorded")


# --- the host -------------------------------------------------------------------------------


class StreamHost(Host):
    """The batch test's `Host` (waiting, killing), running `kill_stream_driver` instead."""

    module = "tests.integration.kill_stream_driver"

    def config(self) -> dict[str, Any]:
        """Markers and jobs; a stream has no checkpoint id of its own."""
        return {"markers": str(self.markers), "jobs": self.jobs}


@pytest.fixture(scope="module")
def killed_in_each_scenario(tmp_path_factory, postgres_server):
    """One host running every scenario's queries, killed once all have stopped.

    Each scenario has its own sink ids, inputs, outputs, checkpoints and PostgreSQL
    database; the host is started and killed once for all of them (a host costs 30-60 s
    of Spark start-up and micro-batches), and each scenario's restarts are its own test.
    Returns each scenario's jobs.
    """
    from tests.servers.postgres_server import fresh_database

    base = tmp_path_factory.mktemp("stream-kill")
    with contextlib.ExitStack() as stack:
        scenarios = {}
        for scenario, (stop_at, decoupled) in SCENARIOS.items():
            directory = base / scenario
            directory.mkdir()
            url = stack.enter_context(fresh_database(postgres_server))
            scenarios[scenario] = jobs_for(directory, stop_at, decoupled, url, tag=f"-{scenario}")
        host = StreamHost(base, [job for jobs in scenarios.values() for job in jobs])
        stack.callback(host.kill)
        waits = []
        for scenario, jobs in scenarios.items():
            waits += [f"{job['sink_id']}.stopped" for job in jobs]
            if SCENARIOS[scenario][1]:  # decoupled: the micro-batch thread recorded the next
                waits += [f"{job['sink_id']}.pending-recorded.{KILLED + 1}" for job in jobs]
        host.wait_for(*waits, timeout=SHARED_START_TIMEOUT_S)
        host.kill()
        yield scenarios


def jobs_for(
    tmp_path: Path, stop_at: str, decoupled: bool, postgres_url: str, tag: str = ""
) -> list[dict[str, Any]]:
    """One query per sink kind and source, each with its own output and checkpoint location.

    The PostgreSQL query loads a table of ``postgres_url``'s database. ``tag`` ends
    every sink id, so that the queries of several scenarios can share one host.
    """
    write_input(tmp_path / "input")
    jobs = []
    for kind, source in JOBS:
        sink_id = f"kill-{kind}-{source}{tag}"
        location: Path | str = tmp_path / sink_id / ("warehouse" if kind == "iceberg" else "out")
        if kind == "iceberg":
            create_table(str(location))
        elif kind == "postgres":
            location = postgres_url
            create_postgres_table(postgres_url)
        jobs.append(
            {
                "kind": kind,
                "source": source,
                "sink_id": sink_id,
                "location": str(location),
                "checkpoint": str(tmp_path / sink_id / "checkpoint"),
                "input": str(tmp_path / "input"),
                "stop_at": stop_at,
                "stop_epoch": KILLED,
                "decoupled": decoupled,
            }
        )
    return jobs


# --- Spark's checkpoint, the destinations ---------------------------------------------------


def spark_log(checkpoint: str, log: str) -> list[int]:
    """The micro-batch ids in Spark's ``offsets`` or ``commits`` log."""
    directory = Path(checkpoint) / log
    return sorted(int(path.name) for path in directory.iterdir() if path.name.isdigit())


def expected_ids(job: dict[str, Any]) -> list[int]:
    """Every id the query's input holds up to Spark's last logged micro-batch."""
    if job["source"] == "files":
        return list(range(N_FILES * ROWS_PER_FILE))
    last = spark_log(job["checkpoint"], "offsets")[-1]
    offset = Path(job["checkpoint"], "offsets", str(last)).read_text().splitlines()[-1]
    return list(range(RATE_ROWS_PER_SECOND * int(offset)))  # offset: whole seconds


def staged_files(job: dict[str, Any]) -> list[str]:
    """FileSink: the files under ``_staging/``; Iceberg: data files no snapshot references.

    PostgreSQL: the prepared transactions of the database.
    """
    if job["kind"] == "postgres":
        return prepared_transactions(job["location"])
    if job["kind"] == "files":
        base = Path(job["location"])
        return [name for name in staging_leftovers(base) if (base / "_staging" / name).is_file()]
    referenced, on_disk = iceberg_files(job["location"])
    return sorted(on_disk - referenced)


def prepared_transactions(url: str) -> list[str]:
    """The gids of the prepared transactions of ``url``'s database."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return sorted(row[0] for row in rows)


def iceberg_files(warehouse: str) -> tuple[set[str], set[str]]:
    """The data files the table's current snapshot references, and those on disk."""
    from pyiceberg.table.locations import load_location_provider

    table = make_sink("iceberg", warehouse).load_table()
    referenced = (
        {urlsplit(task.file.file_path).path for task in table.scan().plan_files()}
        if table.current_snapshot() is not None
        else set()
    )
    data = urlsplit(load_location_provider(table.location(), table.properties).data_path).path
    on_disk = {str(path) for path in Path(data).rglob("*") if path.is_file()}
    return referenced, on_disk


def destination_problems(spark: Any, job: dict[str, Any]) -> list[str]:
    """Every row once, nothing staged, one Iceberg snapshot per checkpoint at most.

    Nothing staged: FileSink's ``_staging/`` holds no file and no directory; the
    Iceberg table's data location holds exactly the files its snapshot references.
    """
    problems = []
    if job["kind"] == "files":
        rows = spark.read.parquet(job["location"]).select("id").collect()
        ids = sorted(row.id for row in rows)
        if left := staging_leftovers(Path(job["location"])):
            problems.append(f"{len(left)} leftovers under _staging/: {left[:8]}")
    elif job["kind"] == "postgres":
        import psycopg

        with psycopg.connect(job["location"], autocommit=True) as connection:
            ids = [row[0] for row in connection.execute(f"SELECT id FROM {PG_TABLE} ORDER BY id")]
        if prepared := prepared_transactions(job["location"]):
            problems.append(f"{len(prepared)} prepared transactions left: {prepared[:4]}")
    else:
        table = make_sink("iceberg", job["location"]).load_table()
        ids = sorted(table.scan().to_arrow().column("id").to_pylist())
        checkpoints = [
            int(snapshot.summary.additional_properties[CHECKPOINT_ID_PROPERTY])
            for snapshot in table.metadata.snapshots
            if snapshot.summary is not None
        ]
        if checkpoints != sorted(set(checkpoints)):
            problems.append(f"snapshots of checkpoints {checkpoints} (expected each once)")
        referenced, on_disk = iceberg_files(job["location"])
        if unreferenced := sorted(on_disk - referenced):
            problems.append(f"{len(unreferenced)} unreferenced data files: {unreferenced[:4]}")
        if missing := sorted(referenced - on_disk):
            problems.append(f"{len(missing)} referenced data files are gone: {missing[:4]}")
    expected = expected_ids(job)
    if ids != expected:
        problems.append(
            f"{len(ids)} rows, {len(set(ids))} distinct, ids {ids[:1]}..{ids[-1:]} "
            f"(expected {len(expected)} once: 0..{len(expected) - 1})"
        )
    return problems


# --- the restart ----------------------------------------------------------------------------


def restart(spark: Any, job: dict[str, Any]) -> list[SinkResult]:
    """Restart ``job``'s query from its checkpoint location; its results once it ended."""
    query = SinkTopologyTranslator(
        retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)
    ).apply(
        stream(spark, job["source"], job["input"]),
        make_sink(job["kind"], job["location"]),
        sink_id=job["sink_id"],
        checkpoint_location=job["checkpoint"],
        trigger={"availableNow": True},
        decoupled_commit=job["decoupled"],
    )
    try:
        ended = query.awaitTermination(RESTART_TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    if not ended:
        raise AssertionError(f"the restarted query did not end in {RESTART_TIMEOUT_S} s")
    return query.recent_results


def results_problems(job: dict[str, Any], results: list[SinkResult], scenario: str) -> list[str]:
    """The restart's checkpoints: the rest of Spark's micro-batches, each committed once.

    Without ``decoupled_commit`` the restart replays checkpoint `KILLED` first. With
    it, Spark had logged the commit of micro-batch 1 and maybe of later ones (of all,
    when the file source ran out before the kill), so the restart starts later: with
    a replay of a checkpoint recommitted (its Pending record was committed when the
    restart opened) or found committed, or a new one.
    """
    ran = [(result.checkpoint_id, result.status) for result in results]
    last = spark_log(job["checkpoint"], "offsets")[-1] + 1  # Spark's last, as a checkpoint
    problems = []
    if spark_log(job["checkpoint"], "commits")[-1] + 1 != last:
        problems.append(f"Spark's commit log ends before checkpoint {last}")
    stop_at, decoupled = SCENARIOS[scenario]
    if decoupled:
        first = ran[0][0] if ran else last + 1
        replayed = {
            CommitStatus.COMMITTED,
            CommitStatus.RECOMMITTED,
            CommitStatus.ALREADY_COMMITTED,
        }
    else:
        first, replayed = KILLED, {REPLAY_STATUS[stop_at]}
    if not (
        [checkpoint for checkpoint, _ in ran] == list(range(first, last + 1))
        and (not ran or ran[0][1] in replayed)
        and all(status is CommitStatus.COMMITTED for _, status in ran[1:])
        and (first > KILLED or not decoupled)
    ):
        problems.append(
            f"the restart ran {[(c, s.value) for c, s in ran]} (expected checkpoints "
            f"{first}..{last}, the first {sorted(s.value for s in replayed)}, then committed)"
        )
    return problems


# --- kills at each step -----------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_streaming_driver_killed_at_a_step_of_a_micro_batch_is_restarted_exactly_once(
    spark, killed_in_each_scenario, scenario
):
    stop_at, decoupled = SCENARIOS[scenario]
    jobs = killed_in_each_scenario[scenario]
    # What the dead host left: Spark's log of micro-batch 1, staged output.
    problems = []
    for job in jobs:
        committed = KILLED - 1 in spark_log(job["checkpoint"], "commits")
        if committed != decoupled:
            problems.append(f"{job['sink_id']}: Spark's commits/{KILLED - 1} exists: {committed}")
        if stop_at in STAGED_AT and not staged_files(job):
            problems.append(f"{job['sink_id']}: nothing staged when killed after {stop_at!r}")
    assert problems == [], "\n".join(problems)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        restarts = {job["sink_id"]: pool.submit(restart, spark, job) for job in jobs}
    for job in jobs:
        try:
            results = restarts[job["sink_id"]].result()
        except Exception as error:  # noqa: BLE001  # reported with the other jobs' problems
            problems.append(f"{job['sink_id']}: the restart failed: {error!r}")
            continue
        found = results_problems(job, results, scenario) + destination_problems(spark, job)
        problems += [f"{job['sink_id']}: {problem}" for problem in found]
    assert problems == [], "\n".join(problems)
