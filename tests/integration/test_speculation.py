"""Speculative execution on a real two-host standalone cluster.

Subtask 1's first attempt is deliberately slow, so Spark starts a speculative copy
on the other worker. Both attempts write staging; only one attempt's output may
become visible, and the other's staging must be cleaned up.
"""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.standalone_cluster import StandaloneCluster
from tests.spark.recording_sink import RecordingSink

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {root!r})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.integration.cluster_session import cluster_session
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator
    from tests.spark.recording_sink import RecordingSink

    class SlowFirstAttempt(RecordingSink):
        def create_writer(self, context):
            writer = super().create_writer(context)
            if context.get_subtask_id() == 1 and context.get_attempt_number() == 0:
                flush = writer.flush

                def slow_flush(end_of_input):
                    time.sleep(25)  # staged already; the speculative copy wins meanwhile
                    flush(end_of_input)

                writer.flush = slow_flush
            return writer

    spark = cluster_session({master!r}, speculation_after="1s")
    sink = SlowFirstAttempt({base!r})
    df = spark.range(400).selectExpr("id", "cast(id % 7 as string) as key").repartition(4)
    result = SinkTopologyTranslator(state_store=SqliteCommitStateStore({store!r})).apply(
        df, sink, sink_id="speculative")
    print("RESULT", json.dumps({{"job": result.job_id, "committed": result.committed}}))
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield running
    running.stop()


def test_only_one_attempt_is_visible_and_the_others_staging_is_cleaned(cluster, tmp_path):
    script = DRIVER.format(
        root=str(ROOT),
        master=cluster.master_url,
        base=str(tmp_path / "out"),
        store=str(tmp_path / "state.sqlite"),
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))

    sink = RecordingSink(tmp_path / "out")
    ids = sorted(record["id"] for record in sink.committed_records())
    assert ids == list(range(400))  # exactly once

    creates = {token: log[0] for token, log in sink.events_by_token().items()}
    attempts = {c["attempt"]: token for token, c in creates.items() if c["subtask"] == 1}
    assert sorted(attempts) == [0, 1]  # a speculative copy really ran, and won
    loser = attempts[0]
    cleanup, after_commit = sink.cleanups_log()
    assert attempts[1] in cleanup["kept"]
    assert loser in cleanup["removed"]  # the slow attempt's staging was cleaned up
    assert not (sink.staging / f"{loser}.jsonl").exists()
    assert after_commit["kept"] == []  # and once committed, the winners' staging too
    assert list(sink.staging.glob("*.jsonl")) == []
    assert result["committed"] == 4


POSTGRES_DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {root!r})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.integration.cluster_session import cluster_session
    from reference_sinks.postgres import PostgresSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    SLOW_BEFORE_PREPARE = {before_prepare!r}

    class SlowFirstAttempt(PostgresSink):
        def create_writer(self, context):
            writer = super().create_writer(context)
            if context.get_subtask_id() == 1:
                attempt = context.get_attempt_number()
                open(os.path.join({marks!r}, f"attempt-{{attempt}}"), "w").close()
            if context.get_subtask_id() == 1 and context.get_attempt_number() == 0:
                prepare_commit = writer.prepare_commit

                def slow_prepare_commit():
                    if SLOW_BEFORE_PREPARE:  # rows copied, transaction still open
                        time.sleep(25)
                        return prepare_commit()
                    prepared = prepare_commit()  # a prepared transaction the loser leaves
                    time.sleep(25)
                    return prepared

                writer.prepare_commit = slow_prepare_commit
            return writer

    spark = cluster_session({master!r}, speculation_after="1s")
    sink = SlowFirstAttempt({url!r}, "events")
    df = spark.range(400).selectExpr("id", "cast(id % 7 as string) as key").repartition(4)
    result = SinkTopologyTranslator(state_store=SqliteCommitStateStore({store!r})).apply(
        df, sink, sink_id="speculative-postgres")
    print("RESULT", json.dumps({{"job": result.job_id, "committed": result.committed}}))
    spark.stop()
    """
)


@pytest.mark.parametrize("moment", ["before-prepare", "after-prepare"])
def test_a_postgres_speculative_loser_leaves_no_rows_and_no_prepared_transaction(
    cluster, tmp_path, postgres_url, moment
):
    """The slow attempt of subtask 1 loses to its speculative copy, before or after PREPARE.

    Before: the clean-up record stops it from preparing later (or Spark kills it and its
    open transaction dies with its connection). After: its prepared transaction is rolled
    back by the driver's clean-up. Either way every row is there once, and no prepared
    transaction is left for the server to hold locks on.
    """
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE events (id bigint, key text)")
    script = POSTGRES_DRIVER.format(
        root=str(ROOT),
        master=cluster.master_url,
        url=postgres_url,
        store=str(tmp_path / "state.sqlite"),
        before_prepare=moment == "before-prepare",
        marks=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert json.loads(line.removeprefix("RESULT "))["committed"] == 4
    assert sorted(path.name for path in tmp_path.glob("attempt-*")) == ["attempt-0", "attempt-1"]

    deadline = time.monotonic() + 60  # the loser's executor may outlive the driver briefly
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        while True:
            prepared = connection.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
            ).fetchall()
            writers = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ).fetchone()
            if (not prepared and writers == (0,)) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        ids = [row[0] for row in connection.execute("SELECT id FROM events ORDER BY id")]
    assert prepared == []
    assert ids == list(range(400))  # exactly once


NATIVE_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.integration.cluster_session import cluster_session
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator
    from tests.integration.kill_driver import create_table, make_sink
    from tests.integration.stalled_input import StalledInput, with_stalled_input

    spark = cluster_session({master!r}, speculation_after="8s")  # the first attempt starts writing
    if {kind!r}.startswith("iceberg"):
        create_table({location!r})
    # Python workers started on both executors first, so the slow attempt is slow
    # because it stalls mid-write, not because its worker is still starting.
    spark.range(0, 16, numPartitions=16).mapInArrow(lambda it: it, "id long").collect()
    # Subtask 1's first attempt stalls mid-write for 25 s: its speculative copy wins.
    stall = StalledInput({markers!r}, frozenset({{(1, 0)}}), seconds=25)
    sink = with_stalled_input(make_sink({kind!r}, {location!r}), stall)
    df = spark.range(0, {rows}, numPartitions=4).selectExpr(
        "id", "concat('k', cast(id % 5 as string)) as key"
    )
    result = SinkTopologyTranslator(state_store=SqliteCommitStateStore({store!r})).apply(
        df, sink, sink_id="speculative-native", checkpoint_id=42)
    print("RESULT", json.dumps({{"native": result.native_write, "rows": result.records_written}}))
    spark.stop()
    """
)


@pytest.mark.parametrize("kind", ["files-native", "iceberg-native"])
def test_a_native_writes_speculative_loser_leaves_nothing(cluster, tmp_path, kind):
    """Spark's writer under speculation: the stalled attempt of subtask 1 loses to its copy.

    Spark's commit protocol lets one attempt of the task commit and deletes the other's
    attempt files; every row is there once, and nothing but committed files is left.
    """
    from tests.integration.kill_driver import N_ROWS
    from tests.integration.test_driver_kill import iceberg_problems, staging_leftovers

    location = str(tmp_path / ("warehouse" if kind.startswith("iceberg") else "out"))
    markers = tmp_path / "markers"
    markers.mkdir()
    script = NATIVE_DRIVER.format(
        root=str(ROOT),
        master=cluster.master_url,
        kind=kind,
        location=location,
        markers=str(markers),
        store=str(tmp_path / "state.sqlite"),
        rows=N_ROWS,
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert json.loads(line.removeprefix("RESULT ")) == {"native": True, "rows": N_ROWS}
    assert (markers / "stalled-1-0").exists()  # the slow attempt really ran,
    assert (markers / "seen-1-1").exists()  # and a speculative copy of it
    deadline = time.monotonic() + 60  # a killed attempt's executor may outlive the driver briefly
    while True:
        if kind.startswith("iceberg"):
            problems = iceberg_problems(location)
        else:
            import pyarrow.dataset as ds

            found = ds.dataset(location, format="parquet", partitioning="hive").to_table()
            problems = []
            if sorted(found.column("id").to_pylist()) != list(range(N_ROWS)):
                problems.append(f"{found.num_rows} rows (expected {N_ROWS} once)")
            left = staging_leftovers(Path(location))
            if left:
                problems.append(f"left under _staging/: {left[:8]}")
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert problems == []
