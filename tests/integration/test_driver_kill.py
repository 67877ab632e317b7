"""A driver host killed with SIGKILL from outside, then a re-run: exactly once, nothing left.

The host is a child process (`tests.integration.kill_driver`) with its own ``local[2]``
Spark session, running a partitioned FileSink (several rolled files per subtask), a
compacting FileSink, a partitioned IcebergSink and a PostgresSink job at once, one
thread each. For PostgreSQL the stages are the moments between ``PREPARE
TRANSACTION`` and the Pending record (writers-finished), between the Pending record
and ``COMMIT PREPARED`` (pending-recorded), and after; the re-run must leave every row
once and ``pg_prepared_xacts`` empty. The
test kills it from outside, as a crashed machine: SIGKILL to every process group of the
child's session - the Python driver and its JVM share one group, but PySpark's worker
daemon moves itself and its Python workers into a group of their own
(``os.setpgid(0, 0)`` in ``pyspark/daemon.py``), so the driver's group alone would leave
a worker blocked mid-merge running. Then the same sink ids and checkpoint id run again
in this process, and every sink must hold every row exactly once, ``<base>/_staging/``
must be empty (no file, no directory), and the Iceberg table's data location must hold
only files its current snapshot references.

Every kill is also run on the native path (issue 13): a host whose partitioned
FileSink and IcebergSink let Spark's writer write the files (``files-native``,
``iceberg-native``), plus a host killed while Spark's writer is mid-write (subtask 0
stalled after its first rows): the dead job leaves Spark's ``_temporary`` in its
staging, and the re-run must remove it like any dead job's staging.

Also: the Python worker running FileSink's compaction task dies mid-merge (SIGKILL to
itself on the first write of the merged file's ``.tmp``), Spark retries the task, and
the job succeeds with nothing left in staging.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
import pytest

from sinkv2.runtime import CommitRetryPolicy, CommitStatus, SqliteCommitStateStore
from sinkv2_spark import SinkTopologyTranslator
from tests.integration.fault_fs import MERGE_STARTED, fault_injecting_fs
from tests.integration.jvm_temp import jvm_temp_env
from tests.integration.kill_driver import (
    N_ROWS,
    PG_TABLE,
    create_postgres_table,
    create_table,
    dataframe,
    make_sink,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = 42
KINDS = ("files", "compacting", "iceberg", "postgres")
NATIVE_KINDS = ("files-native", "iceberg-native")
WRITERS = {"sink-writers": KINDS, "native": NATIVE_KINDS}
START_TIMEOUT_S = 600.0  # a cold JVM and its first jobs on a loaded 2-core machine (162 s seen)
SHARED_START_TIMEOUT_S = 1800.0  # a host running every case's jobs (316 s seen at load 15)
DEATH_TIMEOUT_S = 120.0

# The status of the re-run after a kill at each stage: the epoch was not recorded
# (written again), recorded Pending (committed from the stored committables), or
# recorded Committed (nothing to do).
STATUS_AFTER = {
    "job-recorded": CommitStatus.COMMITTED,
    "writers-finished": CommitStatus.COMMITTED,
    "pending-recorded": CommitStatus.RECOMMITTED,
    "committer-finished": CommitStatus.RECOMMITTED,
    "committed-recorded": CommitStatus.ALREADY_COMMITTED,
}


# --- the host ---------------------------------------------------------------------------


class Host:
    """A child driver process running one job per sink kind, and where each job writes.

    Subclasses run another driver script (``module``) with their own ``config``.
    """

    module = "tests.integration.kill_driver"

    def __init__(self, tmp_path: Path, jobs: list[dict[str, Any]]) -> None:
        self.tmp_path = tmp_path
        self.markers = tmp_path / "markers"
        self.markers.mkdir()
        self.jobs = jobs
        config = tmp_path / "host.json"
        config.write_text(json.dumps(self.config()))
        self.log = tmp_path / "host.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            **jvm_temp_env(tmp_path / "jvm-tmp", quick=True),  # a short-lived JVM
        }
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, str(config)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: we kill exactly its processes
            )
        self.started = time.monotonic()

    def config(self) -> dict[str, Any]:
        """What the driver script reads: where to put markers, and the jobs."""
        return {"markers": str(self.markers), "checkpoint_id": CHECKPOINT, "jobs": self.jobs}

    def reached(self) -> list[str]:
        """The marker files so far: ``<sink id>.<event>``."""
        return sorted(path.name for path in self.markers.iterdir())

    def wait_for(self, *names: str, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every marker in ``names`` exists; fail with the host's log if it ends.

        ``timeout`` is only a deadline for a hung host: a loaded machine is slow.
        """
        deadline = time.monotonic() + timeout
        while not all((self.markers / name).exists() for name in names):
            if self.process.poll() is not None:
                pytest.fail(
                    f"the driver host exited with {self.process.returncode} before reaching "
                    f"{names} (reached {self.reached()}):\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(
                    f"the driver host did not reach {names} in {timeout}s:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL every process group of the host's session; return once none is alive.

        Only groups seen in the session (``/proc``), and the child's own pid while it is
        not reaped, are signalled: a pid number is never reused for us to hit. "Alive"
        leaves zombies out (``killpg(group, 0)`` still answers for them, and the
        reparented ones wait for an init that may not reap them). Idempotent.
        """
        session = self.process.pid  # start_new_session: the session id is the child's pid
        deadline = time.monotonic() + DEATH_TIMEOUT_S
        while True:
            groups = _process_groups(session)
            if self.process.returncode is None:
                groups.add(session)  # unreaped, so the pid is still the child's
            if not groups:
                break
            for group in groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
            self.process.poll()  # reap the child once it is dead
            if time.monotonic() > deadline:
                pytest.fail(
                    f"processes of groups {sorted(groups)} outlived SIGKILL by {DEATH_TIMEOUT_S}s"
                )
            time.sleep(0.05)


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(state, process group, session) of a process, from ``/proc/<pid>/stat``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[2]), int(fields[3])


def _process_groups(session: int) -> set[int]:
    """The process groups that have a live (not zombie) process in ``session``."""
    groups = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (stat := _stat(pid)) is not None:
            state, group, sid = stat
            if sid == session and state != "Z":
                groups.add(group)
    return groups


@pytest.fixture
def start_host(tmp_path, request):
    """Starts a `Host`; whatever happens in the test, it is killed (by id) at teardown."""

    def start(jobs: list[dict[str, object]]) -> Host:
        host = Host(tmp_path, jobs)
        request.addfinalizer(host.kill)
        return host

    return start


def _location(tmp_path: Path, kind: str, postgres_url: str | None) -> str:
    if kind == "postgres":
        assert postgres_url is not None, "a postgres job needs the postgres_url fixture"
        return postgres_url
    return str(tmp_path / ("warehouse" if kind.startswith("iceberg") else kind))


def jobs_for(
    tmp_path: Path,
    kinds=KINDS,
    postgres_url: str | None = None,
    tag: str = "",
    **options: object,
) -> list[dict[str, object]]:
    """One job per sink kind, each with its own output and commit state store.

    ``tag`` ends every sink id, so that the jobs of several cases can share one host.
    """
    if any(kind.startswith("iceberg") for kind in kinds):
        create_table(str(tmp_path / "warehouse"))
    if "postgres" in kinds:
        create_postgres_table(_location(tmp_path, "postgres", postgres_url))
    return [
        {
            "kind": kind,
            "sink_id": f"kill-{kind}{tag}",
            "location": _location(tmp_path, kind, postgres_url),
            "store": str(tmp_path / f"state-{kind}.sqlite"),
            **options,
        }
        for kind in kinds
    ]


# --- the re-run and what must hold after it ------------------------------------------------


def rerun_and_check(spark, job, expected: set[CommitStatus], dead_jobs: int | None) -> list[str]:
    """Re-run ``job`` in this process; the problems found (empty: all is well)."""
    kind, location = job["kind"], job["location"]
    result = SinkTopologyTranslator(
        state_store=SqliteCommitStateStore(job["store"]),
        retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0),
    ).apply(
        dataframe(spark),
        make_sink(kind, location),
        sink_id=job["sink_id"],
        checkpoint_id=CHECKPOINT,
    )
    problems = []
    if result.status not in expected:
        problems.append(
            f"re-run status {result.status} (expected one of {sorted(s.value for s in expected)})"
        )
    if dead_jobs is not None and len(result.cleaned_jobs) != dead_jobs:
        problems.append(f"re-run cleaned jobs {result.cleaned_jobs} (expected {dead_jobs})")
    if kind.startswith("iceberg"):
        problems += iceberg_problems(location)
    elif kind == "postgres":
        problems += postgres_problems(location)
    else:
        ids = sorted(row.id for row in spark.read.parquet(location).select("id").collect())
        if ids != list(range(N_ROWS)):
            problems.append(f"{len(ids)} rows, {len(set(ids))} distinct (expected {N_ROWS} once)")
        left = staging_leftovers(Path(location))
        if left:
            problems.append(f"{len(left)} leftovers under _staging/: {left[:8]}")
    return [f"{job['sink_id']}: {problem}" for problem in problems]


def staging_leftovers(base: Path) -> list[str]:
    """Every file and directory under ``<base>/_staging/``."""
    staging = base / "_staging"
    return sorted(path.relative_to(staging).as_posix() for path in staging.rglob("*"))


def _key(location: str) -> str:
    parts = urlsplit(location)
    return parts.path if parts.scheme in ("", "file") else f"{parts.netloc}{parts.path}"


def iceberg_problems(warehouse: str) -> list[str]:
    from pyiceberg.table.locations import load_location_provider

    table = make_sink("iceberg", warehouse).load_table()
    problems = []
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    if ids != list(range(N_ROWS)):
        problems.append(f"{len(ids)} rows, {len(set(ids))} distinct (expected {N_ROWS} once)")
    referenced = {_key(task.file.file_path) for task in table.scan().plan_files()}
    data_path = load_location_provider(table.location(), table.properties).data_path
    fs, root = pafs.FileSystem.from_uri(data_path)
    on_disk = {
        _key(info.path)
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        if info.type == pafs.FileType.File
    }
    unreferenced = sorted(on_disk - referenced)
    if unreferenced:
        problems.append(f"{len(unreferenced)} unreferenced data files: {unreferenced[:4]}")
    missing = sorted(referenced - on_disk)
    if missing:
        problems.append(f"{len(missing)} referenced data files are gone: {missing[:4]}")
    if len(table.metadata.snapshots) != 1:
        problems.append(f"{len(table.metadata.snapshots)} snapshots (expected one append)")
    return problems


def postgres_problems(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        ids = [row[0] for row in connection.execute(f"SELECT id FROM {PG_TABLE} ORDER BY id")]
        prepared = connection.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    problems = []
    if ids != list(range(N_ROWS)):
        problems.append(f"{len(ids)} rows, {len(set(ids))} distinct (expected {N_ROWS} once)")
    if prepared:
        problems.append(f"{len(prepared)} prepared transactions left: {prepared[:4]}")
    return problems


# --- kills at each stage --------------------------------------------------------------------


# Every stage event the coordinator reports for these sinks; each leaves a different
# state behind: the job recorded and nothing staged, staged files and no epoch, a Pending
# epoch, a Pending epoch already committed by the sink, a Committed epoch whose job never
# finished (its staging not yet removed). One host runs the jobs of every case at once
# (each case its own sink ids, outputs, stores and PostgreSQL database) and is killed
# once all of them have stopped: a host costs 10-20 s of Spark start-up, and the ten
# cases' hosts were a tenth of the suite's time. Each case's re-runs are its own test.
@pytest.fixture(scope="module")
def killed_at_each_stage(tmp_path_factory, postgres_server):
    """One killed host for every (stage, writers) case: each case's jobs, by case."""
    from tests.servers.postgres_server import fresh_database

    base = tmp_path_factory.mktemp("stages")
    with contextlib.ExitStack() as stack:
        cases = {}
        for writers, kinds in WRITERS.items():
            for stage in STATUS_AFTER:
                directory = base / f"{stage}-{writers}"
                directory.mkdir()
                url = None
                if "postgres" in kinds:  # its table name is fixed: a database per case
                    url = stack.enter_context(fresh_database(postgres_server))
                cases[stage, writers] = jobs_for(
                    directory, kinds, postgres_url=url, tag=f"-{stage}", stop_at=stage
                )
        host = Host(base, [job for jobs in cases.values() for job in jobs])
        stack.callback(host.kill)
        host.wait_for(
            *(f"{job['sink_id']}.stopped" for jobs in cases.values() for job in jobs),
            timeout=SHARED_START_TIMEOUT_S,
        )
        host.kill()
        yield cases


@pytest.mark.parametrize("writers", list(WRITERS))
@pytest.mark.parametrize("stage", list(STATUS_AFTER))
def test_a_driver_host_killed_at_a_stage_leaves_nothing_after_the_rerun(
    spark, killed_at_each_stage, stage, writers
):
    jobs = killed_at_each_stage[stage, writers]
    if stage != "job-recorded":  # the dead job left staging behind for the re-run to remove
        for job in jobs:
            if not job["kind"].startswith(("iceberg", "postgres")):
                assert staging_leftovers(Path(job["location"])), job
    problems = [
        problem
        for job in jobs
        for problem in rerun_and_check(spark, job, {STATUS_AFTER[stage]}, dead_jobs=1)
    ]
    assert problems == [], "\n".join(problems)


def test_a_driver_host_killed_mid_compaction_leaves_nothing_after_the_rerun(
    spark, tmp_path, start_host
):
    # The compaction task blocks inside its merge, after writing half of the merged
    # file's .tmp: the host dies between "writers-finished" and "pending-recorded".
    jobs = jobs_for(tmp_path, kinds=("compacting",), block_compaction=True)
    host = start_host(jobs)
    host.wait_for(MERGE_STARTED)
    host.kill()
    staged = staging_leftovers(tmp_path / "compacting")
    assert any(name.endswith(".tmp") for name in staged), staged  # the half-merged file
    problems = rerun_and_check(spark, jobs[0], {CommitStatus.COMMITTED}, dead_jobs=1)
    assert problems == [], "\n".join(problems)


# --- kills at random moments ----------------------------------------------------------------


# Three seeded-random delays, each after an anchor event, because how long a job takes
# varies from ~5 s to ~15 s on a loaded 2-core machine and fixed delays from the start
# often land after every job has finished. The anchors spread the kills over the jobs:
# FileSink writers mid-write (Iceberg starting); Iceberg writers mid-write (the
# compacting sink around compaction); compaction and the FileSink commits (Iceberg
# writing or committing). Three hosts of cost; the seed makes a failure repeatable.
RANDOM_MOMENTS = {  # seed: (anchor event, shortest and longest delay after it, s)
    1: ("kill-files.job-recorded", 0.3, 2.5),
    2: ("kill-iceberg.job-recorded", 1.0, 4.0),
    3: ("kill-compacting.writers-finished", 0.0, 1.5),
}
# The native path's jobs take 1-3 s: kills mid-write of either sink, and around the commits.
NATIVE_RANDOM_MOMENTS = {
    4: ("kill-files-native.job-recorded", 0.2, 1.5),
    5: ("kill-iceberg-native.job-recorded", 0.2, 2.0),
    6: ("kill-files-native.writers-finished", 0.0, 0.5),
}


@pytest.mark.parametrize(
    ("writers", "seed"),
    [("sink-writers", seed) for seed in RANDOM_MOMENTS]
    + [("native", seed) for seed in NATIVE_RANDOM_MOMENTS],
)
def test_a_driver_host_killed_at_a_random_moment_leaves_nothing_after_the_rerun(  # noqa: PLR0917  # fixtures
    spark, tmp_path, start_host, postgres_url, writers, seed
):
    anchor, low, high = {**RANDOM_MOMENTS, **NATIVE_RANDOM_MOMENTS}[seed]
    delay = random.Random(seed).uniform(low, high)
    jobs = jobs_for(tmp_path, WRITERS[writers], postgres_url=postgres_url)
    host = start_host(jobs)
    host.wait_for(anchor)
    time.sleep(delay)
    reached = host.reached()
    host.kill()
    problems = []
    for job in jobs:
        sink_id = job["sink_id"]
        if f"{sink_id}.committed-recorded" in reached:
            expected = {CommitStatus.ALREADY_COMMITTED}
        elif f"{sink_id}.pending-recorded" in reached:
            expected = {CommitStatus.RECOMMITTED, CommitStatus.ALREADY_COMMITTED}
        else:  # the epoch may have been recorded after the markers were read
            expected = set(CommitStatus)
        # Not checked: how many dead jobs the re-run cleaned (a job may finish between
        # reading the markers and the kill). Staging and unreferenced files are.
        problems += rerun_and_check(spark, job, expected, dead_jobs=None)
    moment = f"killed {delay:.2f}s after {anchor}, having reached {reached}"
    print(moment)
    assert problems == [], f"{moment}:\n" + "\n".join(problems)


# --- a driver killed while Spark's writer is mid-write (the native path) -------------------------


def test_a_driver_host_killed_mid_native_write_leaves_nothing_after_the_rerun(
    spark, tmp_path, start_host
):
    # Subtask 0 of each job stalls after its first rows, inside Spark's write: the host
    # dies with the write's _temporary in the epoch's staging directory.
    jobs = jobs_for(tmp_path, NATIVE_KINDS, stall_native_write=True)
    host = start_host(jobs)
    host.wait_for(*(f"{job['sink_id']}-stall/stalled-0-0" for job in jobs))
    host.kill()
    for job in jobs:
        temporary = list(Path(job["location"]).rglob("*-native-*/_temporary"))
        assert temporary, f"{job['sink_id']}: no _temporary left by the killed write"
    problems = [
        problem
        for job in jobs
        for problem in rerun_and_check(spark, job, {CommitStatus.COMMITTED}, dead_jobs=1)
    ]
    for job in jobs:
        if list(Path(job["location"]).rglob("_temporary")):
            problems.append(f"{job['sink_id']}: _temporary is still there")
    assert problems == [], "\n".join(problems)


# --- an executor dies mid-compaction ----------------------------------------------------------


def test_an_executor_killed_mid_compaction_is_retried_and_leaves_nothing(spark, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    job = jobs_for(tmp_path, kinds=("compacting",))[0]
    sink = make_sink(
        "compacting", job["location"], filesystem=fault_injecting_fs(markers, "kill-worker-once")
    )
    temporaries_at_pending = []

    def on_stage(event, epoch):
        if event == "pending-recorded":  # compaction done, the job's cleanup not yet run
            temporaries_at_pending.extend(
                name for name in staging_leftovers(Path(job["location"])) if name.endswith(".tmp")
            )

    result = SinkTopologyTranslator(state_store=SqliteCommitStateStore(job["store"])).apply(
        dataframe(spark), sink, sink_id=job["sink_id"], checkpoint_id=CHECKPOINT, on_stage=on_stage
    )
    assert (markers / MERGE_STARTED).exists()  # a compaction task really died mid-merge
    assert result.status is CommitStatus.COMMITTED
    assert temporaries_at_pending == []  # the retried merge removed the dead one's .tmp
    ids = sorted(row.id for row in spark.read.parquet(job["location"]).select("id").collect())
    assert ids == list(range(N_ROWS))
    assert staging_leftovers(Path(job["location"])) == []
