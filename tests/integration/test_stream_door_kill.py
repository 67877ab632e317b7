"""The streaming door's driver killed with SIGKILL at each coordinator step, then restarted.

`test_stream_driver_kill`'s matrix for ``df.writeStream.format("sinkv2")``: the host
(`tests.integration.kill_stream_door`) runs four queries at once - FileSink and
IcebergSink by short name, each fed by Spark's JSON file source (``availableNow``) and
by the ``rate`` source - and each stops at one coordinator step of micro-batch 1
(checkpoint 2), inside Spark's ``commit(messages, 1)`` in its commit worker. The test
kills the host there, as a crashed machine: SIGKILL to every process group of its
session, the commit worker with it. Spark has logged micro-batch 1's offsets but not
its commit, so the restart replays it as checkpoint 2:

- ``writers-finished``: nothing recorded; the dead job's staged output is removed by
  the restart's planner, and the replay writes it again;
- ``pending-recorded``: Pending; the restart's planner commits it from the store, and
  the replay writes nothing;
- ``committer-finished``: Pending, already committed by the sink; the same, the
  commit finds it done;
- ``committed-recorded``: Committed; the replay writes nothing.

Each restart goes through the door too, from the killed query's checkpoint location
and its default commit state store, with ``availableNow`` so that it ends by itself.
Afterwards every row is in the destination exactly once, nothing is staged, each
Iceberg snapshot is of another checkpoint (`destination_problems`), every checkpoint
up to Spark's last micro-batch is recorded Committed, and Spark's commit log has them.
One host runs the queries of all four steps and is killed once every one has stopped;
each step's restarts are one test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sinkv2.runtime import EpochStatus, SqliteCommitStateStore
from sinkv2_spark import register
from tests.integration.kill_stream_door import create_unpartitioned_table, start
from tests.integration.kill_stream_driver import write_input
from tests.integration.test_driver_kill import SHARED_START_TIMEOUT_S, Host
from tests.integration.test_stream_driver_kill import (
    destination_problems,
    spark_log,
    staged_files,
)

pytestmark = pytest.mark.spark

KILLED = 2
"""The checkpoint the host is killed in: micro-batch 1, the second."""

JOBS = [(kind, source) for kind in ("files", "iceberg") for source in ("files", "rate")]
STAGES = ("writers-finished", "pending-recorded", "committer-finished", "committed-recorded")
STAGED_AT = ("writers-finished", "pending-recorded")
RESTART_TIMEOUT_S = 600.0  # only a deadline for a hung restart; a loaded machine is slow


class DoorHost(Host):
    """The batch test's `Host` (waiting, killing), running `kill_stream_door`."""

    module = "tests.integration.kill_stream_door"

    def config(self) -> dict[str, Any]:
        """Markers and jobs; a stream has no checkpoint id of its own."""
        return {"markers": str(self.markers), "jobs": self.jobs}


@pytest.fixture(scope="module")
def killed_at_each_step(tmp_path_factory):
    """One host running the queries of every step, killed once all have stopped.

    Each step has its own sink ids, inputs, outputs and checkpoints; the host is started
    and killed once for all of them (a host costs 30-60 s of Spark start-up and
    micro-batches), and each step's restarts are its own test. Returns each step's jobs.
    """
    base = tmp_path_factory.mktemp("door-kill")
    steps = {}
    for stop_at in STAGES:
        directory = base / stop_at
        directory.mkdir()
        steps[stop_at] = jobs_for(directory, stop_at)
    host = DoorHost(base, [job for jobs in steps.values() for job in jobs])
    try:
        host.wait_for(
            *(f"{job['sink_id']}.stopped" for jobs in steps.values() for job in jobs),
            timeout=SHARED_START_TIMEOUT_S,
        )
    finally:
        host.kill()
    return steps


def jobs_for(tmp_path: Path, stop_at: str) -> list[dict[str, Any]]:
    """One query per sink kind and source, each with its own output and checkpoint location.

    Every sink id ends with ``stop_at``, so that the queries of all steps share one host.
    """
    write_input(tmp_path / "input")
    jobs = []
    for kind, source in JOBS:
        sink_id = f"door-{kind}-{source}-{stop_at}"
        location = tmp_path / sink_id / ("warehouse" if kind == "iceberg" else "out")
        if kind == "iceberg":
            create_unpartitioned_table(str(location))
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
            }
        )
    return jobs


def restart(spark: Any, job: dict[str, Any]) -> Any:
    """Restart ``job``'s query through the door from its checkpoint location.

    From this thread: PySpark 4.3 does not find a registered Python data source for
    a query started from another thread (its JVM thread has no active session).
    """
    return start(spark, job, {"availableNow": True})


def wait_for(query: Any) -> None:
    """Wait for a restarted query to end by itself."""
    try:
        ended = query.awaitTermination(RESTART_TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    if not ended:
        raise AssertionError(f"the restarted query did not end in {RESTART_TIMEOUT_S} s")


def store_problems(job: dict[str, Any]) -> list[str]:
    """Every checkpoint up to Spark's last micro-batch recorded Committed; Spark's log done."""
    checkpoint = Path(job["checkpoint"])
    last = spark_log(job["checkpoint"], "offsets")[-1] + 1  # Spark's last, as a checkpoint
    problems = []
    if spark_log(job["checkpoint"], "commits")[-1] + 1 != last:
        problems.append(f"Spark's commit log ends before checkpoint {last}")
    store = SqliteCommitStateStore(checkpoint / "sinkv2" / "commit_state.sqlite")
    with store.acquire(job["sink_id"], job_id="inspect") as lease:
        recorded = [(record.epoch, record.status) for record in lease.epochs()]
        jobs = lease.unfinished_jobs()
    if recorded != [(n, EpochStatus.COMMITTED) for n in range(1, last + 1)]:
        problems.append(f"recorded {[(n, s.value) for n, s in recorded]} (expected 1..{last})")
    if jobs:  # the sinks keep no writer states: every job is finished
        problems.append(f"jobs left recorded: {jobs}")
    return problems


@pytest.mark.parametrize("stop_at", STAGES)
def test_a_streaming_door_killed_at_a_step_of_a_micro_batch_is_restarted_exactly_once(
    spark, killed_at_each_step, stop_at
):
    jobs = killed_at_each_step[stop_at]
    problems = []
    for job in jobs:
        if KILLED - 1 in spark_log(job["checkpoint"], "commits"):
            problems.append(f"{job['sink_id']}: Spark's commits/{KILLED - 1} exists")
        if stop_at in STAGED_AT and not staged_files(job):
            problems.append(f"{job['sink_id']}: nothing staged when killed after {stop_at!r}")
    assert problems == [], "\n".join(problems)

    register(spark)
    queries = {job["sink_id"]: restart(spark, job) for job in jobs}  # they run at once
    for job in jobs:
        try:
            wait_for(queries[job["sink_id"]])
        except Exception as error:  # noqa: BLE001  # reported with the other jobs' problems
            problems.append(f"{job['sink_id']}: the restart failed: {error!r}")
            continue
        found = store_problems(job) + destination_problems(spark, job)
        problems += [f"{job['sink_id']}: {problem}" for problem in found]
    assert problems == [], "\n".join(problems)
