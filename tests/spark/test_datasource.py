"""The sinkv2 data source: df.write.format("sinkv2") on a classic session (local[2,4])."""

import json

import pytest

from sinkv2.runtime import EpochStatus, SqliteCommitStateStore
from sinkv2_spark import register
from tests.spark.recording_sink import RecordingSink

pytestmark = pytest.mark.spark

SINKS = "tests.spark.datasource_sinks"


@pytest.fixture(scope="module")
def door(spark):
    register(spark)
    return spark


def frame(spark, n=1000, partitions=4):
    return (
        spark.range(n)
        .selectExpr("id", "cast(id % 7 as string) as key", "cast(id as double) / 2 as value")
        .repartition(partitions)
    )


def expected(n):
    return sorted(
        ({"id": i, "key": str(i % 7), "value": i * 0.5} for i in range(n)), key=lambda r: r["id"]
    )


def committed(sink):
    return sorted(sink.committed_records(), key=lambda r: r["id"])


def write(df, sink, tmp_path, **options):
    writer = df.write.format("sinkv2").option("sink", sink)
    options.setdefault("state_store", str(tmp_path / "state" / "commit_state.sqlite"))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def epochs(tmp_path, sink_id):
    store = SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")
    with store.acquire(sink_id, job_id="inspect") as lease:
        return [(record.epoch, record.status) for record in lease.epochs()]


# --- exactly once -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failures",
    [
        [],
        [[1, 0, 10]],  # subtask 1's first attempt fails at its 10th element
        [[0, 0, 0], [0, 1, 100], [2, 0, 200], [3, 0, 5], [3, 1, 6]],  # retried up to 3 times
    ],
)
def test_every_element_is_committed_once_under_task_failures(door, tmp_path, failures):
    base = tmp_path / "out"
    write(
        frame(door),
        f"{SINKS}:recording",
        tmp_path,
        base=str(base),
        sink_id="recording",
        failures=json.dumps(failures),
    )
    sink = RecordingSink(base)
    assert committed(sink) == expected(1000)
    after_writers, after_commit = sink.cleanups_log()  # planning staged nothing, removes nothing
    winners = set(after_writers["kept"])
    assert len(winners) == 4  # one attempt per subtask won; the losers' staging went first
    losers = set(sink.events_by_token()) - winners  # every attempt logs its creation
    assert set(after_writers["removed"]) == losers
    assert len(losers) == len(failures)
    assert after_commit["kept"] == []
    assert set(after_commit["removed"]) == winners
    assert list(sink.staging.glob("*.jsonl")) == []
    assert epochs(tmp_path, "recording") == [(1, EpochStatus.COMMITTED)]


def test_a_checkpoint_id_makes_a_rerun_write_and_commit_nothing(door, tmp_path):
    base = tmp_path / "out"
    for _ in range(2):
        write(
            frame(door, 300),
            f"{SINKS}:recording",
            tmp_path,
            base=str(base),
            sink_id="idem",
            checkpoint_id="5",
        )
    sink = RecordingSink(base)
    assert committed(sink) == expected(300)
    assert len(sink.events_by_token()) == 4  # no writer ran the second time
    assert epochs(tmp_path, "idem") == [(5, EpochStatus.COMMITTED)]


def test_runs_without_a_checkpoint_id_are_new_epochs(door, tmp_path):
    base = tmp_path / "out"
    for _ in range(2):
        write(frame(door, 100), f"{SINKS}:recording", tmp_path, base=str(base), sink_id="twice")
    assert len(RecordingSink(base).committed_records()) == 200
    assert epochs(tmp_path, "twice") == [(1, EpochStatus.COMMITTED), (2, EpochStatus.COMMITTED)]


def test_a_run_whose_sink_id_was_taken_meanwhile_commits_nothing(door, tmp_path):
    """Another run acquired the sink id while the writers wrote: the fence refuses."""
    base = tmp_path / "out"
    state = tmp_path / "state" / "commit_state.sqlite"
    door.range(1).write.format("sinkv2").option("sink", f"{SINKS}:recording").option(
        "base", str(base)
    ).option("sink_id", "fenced").option("state_store", str(state)).mode("append").save()
    with pytest.raises(Exception, match="another run took the sink id while this job"):
        write(
            frame(door, 100),
            f"{SINKS}:interloper",
            tmp_path,
            base=str(base),
            sink_id="fenced",
            state=str(state),
        )
    sink = RecordingSink(base)
    assert len(sink.committed_records()) == 1  # only the first run's row
    assert epochs(tmp_path, "fenced") == [(1, EpochStatus.COMMITTED)]
    # The next run cleans up what the refused job staged, and commits its own.
    write(frame(door, 10), f"{SINKS}:recording", tmp_path, base=str(base), sink_id="fenced")
    assert len(sink.committed_records()) == 11
    assert list(sink.staging.glob("*.jsonl")) == []


def test_a_writer_failure_fails_the_job_and_nothing_is_committed_or_left_staged(door, tmp_path):
    base = tmp_path / "out"
    with pytest.raises(Exception, match=r"cannot write value 5\.0"):
        write(
            frame(door, 100),
            f"{SINKS}:recording",
            tmp_path,
            base=str(base),
            sink_id="rejects",
            reject_value="5.0",
        )
    sink = RecordingSink(base)
    assert sink.committed_records() == []
    assert list(sink.staging.glob("*.jsonl")) == []  # abort() removed the job's staging
    assert epochs(tmp_path, "rejects") == []


# --- topologies ---------------------------------------------------------------------------


def test_pre_and_post_commit_topologies_run_on_a_local_stream(door, tmp_path):
    base = tmp_path / "out"
    write(
        frame(door, 500, partitions=5), f"{SINKS}:topology", tmp_path, base=str(base), sink_id="t"
    )
    sink = RecordingSink(base)
    assert committed(sink) == expected(500)
    post = [json.loads(line) for line in (base / "post_commit.jsonl").read_text().splitlines()]
    assert len(post) == 1  # one committable: the pre-commit topology merged five
    assert len(post[0]) == 5


def test_a_pre_write_topology_that_repartitions_is_refused_before_data_moves(door, tmp_path):
    base = tmp_path / "out"
    with pytest.raises(Exception, match=r"pre-write topology uses DataFrame\.repartition.*apply"):
        write(frame(door, 10), f"{SINKS}:repartitioning", tmp_path, base=str(base), sink_id="r")
    assert RecordingSink(base).events_by_token() == {}


def test_a_pre_commit_topology_that_needs_a_dataframe_is_refused_before_data_moves(door, tmp_path):
    base = tmp_path / "out"
    with pytest.raises(Exception, match=r"pre-commit topology uses DataFrame\.coalesce.*apply"):
        write(frame(door), f"{SINKS}:pre_commit_needs_spark", tmp_path, base=str(base), sink_id="p")
    assert RecordingSink(base).events_by_token() == {}


def test_a_post_commit_topology_that_needs_a_dataframe_fails_naming_apply(door, tmp_path):
    base = tmp_path / "out"
    with pytest.raises(Exception, match=r"post-commit topology uses DataFrame\.groupBy.*apply"):
        write(
            frame(door, 10),
            f"{SINKS}:post_commit_needs_spark",
            tmp_path,
            base=str(base),
            sink_id="post",
        )
    assert epochs(tmp_path, "post") == [(1, EpochStatus.PENDING)]


def test_writers_asking_for_the_parallelism_get_a_clear_error(door, tmp_path):
    with pytest.raises(Exception, match=r"get_number_of_parallel_subtasks\(\) is not known"):
        write(
            frame(door, 10),
            f"{SINKS}:plain_recording",
            tmp_path,
            base=str(tmp_path / "out"),
            sink_id="parallelism",
        )


# --- reference sinks by short name --------------------------------------------------------


@pytest.mark.parametrize("file_format", ["parquet", "jsonl"])
def test_files_by_short_name(door, tmp_path, file_format):
    df = door.range(500).selectExpr(
        "id",
        "cast(id % 3 as string) as part",
        "timestamp_micros(id * 1000000) as ts",
    )
    out = tmp_path / "files"
    write(
        df.repartition(3),
        "files",
        tmp_path,
        path=str(out),
        sink_id="files",
        format=file_format,
        partition_by="part",
        max_rows="100",
    )
    read = door.read.parquet(str(out)) if file_format == "parquet" else door.read.json(str(out))
    got = sorted((r["id"], r["part"]) for r in read.collect())
    assert got == [(i, i % 3) for i in range(500)]
    if file_format == "parquet":
        assert read.schema["ts"].dataType.simpleString() == "timestamp"
        assert read.where("ts = timestamp_micros(id * 1000000)").count() == 500
    assert not list((out / "_staging").glob("*"))


def test_files_through_save_path_and_rerun_by_checkpoint_id(door, tmp_path):
    out = tmp_path / "files"
    for _ in range(2):
        (
            door.range(100)
            .write.format("sinkv2")
            .option("sink", "FILES")
            .option("sink_id", "orders")
            .option("checkpoint_id", "7")
            .option("state_store", str(tmp_path / "state.sqlite"))
            .mode("append")
            .save(str(out))
        )
    assert door.read.parquet(str(out)).count() == 100


def test_iceberg_by_short_name_with_the_local_catalog(door, tmp_path):
    from reference_sinks.iceberg import IcebergSink
    from tests.reference_sinks.iceberg.tables import ARROW_SCHEMA

    warehouse = tmp_path / "lake"
    IcebergSink.local(warehouse, "ns.events", schema=ARROW_SCHEMA)
    df = door.range(300).selectExpr(
        "id",
        "concat('k', cast(id % 3 as string)) as key",
        "cast(id as double) / 4 as value",
        "timestamp_micros(id * 1000000) as ts",
        "date_add(date'2024-01-01', cast(id % 5 as int)) as day",
    )
    for checkpoint in ("1", "1", "2"):
        write(
            df.repartition(3),
            "iceberg",
            tmp_path,
            warehouse=str(warehouse),
            table="ns.events",
            sink_id="events",
            checkpoint_id=checkpoint,
        )
    table = IcebergSink.local(warehouse, "ns.events").load_table()
    rows = table.scan().to_arrow()
    assert rows.num_rows == 600  # checkpoint 1 once, checkpoint 2 once
    assert sorted(rows.column("id").to_pylist()) == sorted(list(range(300)) * 2)
    assert len(list(table.snapshots())) == 2


def test_postgres_by_short_name_exactly_once_named_by_the_sink_id(door, tmp_path, postgres_url):
    import psycopg

    from reference_sinks.postgres._model import key_of

    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE door_orders (id bigint PRIMARY KEY, key text, value float8)"
        )
    options = {"url": postgres_url, "table": "door_orders", "sink_id": "orders-door"}
    for checkpoint in ("1", "1"):  # the re-run of checkpoint 1 writes nothing
        write(frame(door), "postgres", tmp_path, checkpoint_id=checkpoint, **options)
    # An upsert run at least once: the same rows again, changed, one per key.
    changed = frame(door).selectExpr("id", "'new' as key", "value")
    write(changed, "postgres", tmp_path, upsert_key="id", exactly_once="false", **options)
    with psycopg.connect(postgres_url) as connection:
        rows = connection.execute("SELECT id, key, value FROM door_orders ORDER BY id").fetchall()
        keys = connection.execute("SELECT DISTINCT sink_key FROM sinkv2_pg_markers").fetchall()
        prepared = connection.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
    assert rows == [(i, "new", i * 0.5) for i in range(1000)]
    assert keys == [(key_of("orders-door"),)]  # the door's sink_id names its transactions
    assert prepared == []
    assert epochs(tmp_path, "orders-door")[0] == (1, EpochStatus.COMMITTED)


def test_redis_by_short_name(door, tmp_path):
    from tests.servers.redis_server import LocalRedisServer

    with LocalRedisServer.start() as server:
        df = frame(door, n=300)
        write(df, "redis", tmp_path, url=server.url, mode="hash", key="row:{id}", sink_id="h")
        write(df, "redis", tmp_path, url=server.url, mode="set", key="json:{id}", sink_id="s")
        client = server.client()
        assert client.hgetall("row:7") == {b"id": b"7", b"key": b"0", b"value": b"3.5"}
        assert json.loads(client.get("json:7")) == {"id": 7, "key": "0", "value": 3.5}
        assert len(client.keys("row:*")) == len(client.keys("json:*")) == 300


# --- bad options: Spark's error carries our message, before any data moves ---------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sink_id": "x"}, "needs the 'sink' option"),
        ({"sink": "nope", "sink_id": "x"}, "short name .* or 'module:callable'"),
        ({"sink": "no_such_module:make", "sink_id": "x"}, "names module 'no_such_module'"),
        ({"sink": f"{SINKS}:missing", "sink_id": "x"}, "has no 'missing'"),
        ({"sink": f"{SINKS}:NOT_CALLABLE", "sink_id": "x"}, "not a callable"),
        ({"sink": f"{SINKS}:not_a_sink", "sink_id": "x"}, "object"),
        ({"sink": "files", "path": "P"}, "needs the 'sink_id' option"),
        ({"sink": "files", "path": "P", "sink_id": " "}, "sink_id must be a non-empty str"),
        ({"sink": "files", "path": "P", "sink_id": "x", "checkpoint_id": "abc"}, "integer"),
        ({"sink": "files", "path": "P", "sink_id": "x", "checkpoint_id": "0"}, "positive int"),
        ({"sink": "files", "sink_id": "x"}, "needs the 'path' option"),
        ({"sink": "files", "path": "P", "sink_id": "x", "max_rows": "-1"}, "'max_rows' option"),
        ({"sink": "files", "path": "P", "sink_id": "x", "colour": "red"}, "does not take"),
        ({"sink": "files", "path": "P", "sink_id": "x", "format": "csv"}, "'parquet' or 'jsonl'"),
        ({"sink": "iceberg", "sink_id": "x"}, "needs the 'table' option"),
        ({"sink": "postgres", "table": "t", "sink_id": "x"}, "needs the 'url' option"),
        ({"sink": "postgres", "url": "postgresql://h/d", "sink_id": "x"}, "'table' option"),
        (
            {"sink": "postgres", "url": "u", "table": "t", "sink_id": "x", "exactly_once": "maybe"},
            "'exactly_once' option must be 'true' or 'false'",
        ),
        ({"sink": "redis", "mode": "set", "key": "k:{id}", "sink_id": "x"}, "'url' option"),
        (
            {"sink": "redis", "url": "redis://h", "mode": "list", "key": "k", "sink_id": "x"},
            "'mode' option must be 'set', 'hash' or 'stream'",
        ),
        (
            {
                "sink": "redis",
                "url": "redis://h",
                "mode": "stream",
                "key": "k",
                "ttl_ms": "5",
                "sink_id": "x",
            },
            "'ttl_ms' option is for modes 'set' and 'hash'",
        ),
    ],
)
def test_bad_options_fail_with_our_message_before_data_moves(door, tmp_path, options, message):
    options = {k: (str(tmp_path / "P") if v == "P" else v) for k, v in options.items()}
    writer = door.range(10).write.format("sinkv2")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer = writer.option("state_store", str(tmp_path / "state.sqlite"))
    with pytest.raises(Exception, match=message):
        writer.mode("append").save()
    assert not (tmp_path / "P").exists()


def test_overwrite_is_refused(door, tmp_path):
    writer = (
        door.range(10)
        .write.format("sinkv2")
        .option("sink", "files")
        .option("path", str(tmp_path / "out"))
        .option("sink_id", "x")
        .option("state_store", str(tmp_path / "state.sqlite"))
    )
    with pytest.raises(Exception, match=r"mode\('overwrite'\) is not supported"):
        writer.mode("overwrite").save()
    assert not (tmp_path / "out").exists()


def test_a_second_driver_on_the_sink_id_fails_before_writing(door, tmp_path):
    base = tmp_path / "out"
    store = SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")
    with (
        store.acquire("busy", job_id="the-other-driver"),
        pytest.raises(Exception, match="the-other-driver"),
    ):
        write(frame(door, 10), f"{SINKS}:recording", tmp_path, base=str(base), sink_id="busy")
    assert RecordingSink(base).events_by_token() == {}


def test_a_dataframe_without_partitions_commits_an_empty_epoch(door, tmp_path):
    df = door.createDataFrame([], "id long, key string, value double")
    base = tmp_path / "out"
    write(df, f"{SINKS}:recording", tmp_path, base=str(base), sink_id="empty")
    assert RecordingSink(base).committed_records() == []
    assert epochs(tmp_path, "empty") == [(1, EpochStatus.COMMITTED)]
