"""The streaming door: df.writeStream.format("sinkv2") on a classic session (local[2,4]).

Input is JSON (or Parquet) files read with ``maxFilesPerTrigger=1``, one file per
micro-batch, under the ``availableNow`` trigger, so every query ends by itself; micro-
batch b is checkpoint b + 1, as in ``apply()``. Sinks are built in Spark's workers from
string options (``tests.spark.datasource_stream_sinks``). A driver that dies at one
coordinator step is simulated by the ``on_stage`` hook raising there, in Spark's
commit worker: the micro-batch fails, and so does the query; the restart must commit
every row exactly once. (The same with SIGKILL: ``tests/integration``.)

`DoorStatefulSink` carries every writer state it ever made (``stateful_sink.py``), so
`check_door_state_chain` can tell whether each state reached exactly one writer, by
the door's rule: subtask i restores what subtask i recorded; states of subtasks a
smaller micro-batch lacks are recorded again under subtask i mod n.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2.runtime import EpochStatus, SqliteCommitStateStore
from sinkv2_spark import SinkTopologyTranslator, register
from tests.spark.datasource_stream_sinks import configure_hook
from tests.spark.stateful_sink import StatefulSink

pytestmark = pytest.mark.spark

SINKS = "tests.spark.datasource_stream_sinks"
SCHEMA = "id long, key string"
ROWS = 10
_MTIME = 1_600_000_000
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def door(spark):
    register(spark)
    return spark


def rows_of(index: int) -> list[dict]:
    """File ``index``'s rows: ids ``index * 100`` .. ``index * 100 + ROWS - 1``."""
    return [{"id": index * 100 + j, "key": f"k{j % 3}"} for j in range(ROWS)]


def expected(files) -> list[dict]:
    return sorted((row for index in files for row in rows_of(index)), key=lambda r: r["id"])


def write_files(directory: Path, *indices: int, empty: bool = False) -> None:
    """Write input files (atomically, each newer than the one before it)."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in indices:
        path = directory / f"part-{index:04d}.json"
        temporary = directory / f".part-{index:04d}.tmp"
        rows = [] if empty else rows_of(index)
        temporary.write_text("".join(json.dumps(row) + "\n" for row in rows))
        os.replace(temporary, path)
        os.utime(path, (_MTIME + 10 * index, _MTIME + 10 * index))


def json_stream(spark, directory: Path, partitions: int | None = 2):
    directory.mkdir(parents=True, exist_ok=True)
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(directory))
    return df.repartition(partitions) if partitions else df


def writer(df, sink: str | None, checkpoint: Path, **options):
    """``df.writeStream.format("sinkv2")`` with the options, the availableNow trigger."""
    stream = (
        df.writeStream.format("sinkv2")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    if sink is not None:
        stream = stream.option("sink", sink)
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream


def run(df, sink: str | None, checkpoint: Path, *, path: str | None = None, **options) -> None:
    """Start the query and wait until it ends by itself; raises what the query raised."""
    stream = writer(df, sink, checkpoint, **options)
    query = stream.start(path) if path is not None else stream.start()
    try:
        ended = query.awaitTermination(TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    assert ended, f"the availableNow query did not end in {TIMEOUT_S} s"


def run_stateful(spark, base: Path, files: Path, *, sink_id="door", partitions=2, **options):
    run(
        json_stream(spark, files, partitions),
        f"{SINKS}:stateful",
        base / "checkpoint",
        base=str(base / "out"),
        sink_id=sink_id,
        **options,
    )


def committed(sink) -> list[dict]:
    return sorted(sink.committed_records(), key=lambda r: r["id"])


def epochs(checkpoint: Path, sink_id: str = "door") -> list[tuple[int, EpochStatus]]:
    store = SqliteCommitStateStore(checkpoint / "sinkv2" / "commit_state.sqlite")
    with store.acquire(sink_id, job_id="inspect") as lease:
        return [(record.epoch, record.status) for record in lease.epochs()]


def unfinished_jobs(checkpoint: Path, sink_id: str = "door") -> list[str]:
    store = SqliteCommitStateStore(checkpoint / "sinkv2" / "commit_state.sqlite")
    with store.acquire(sink_id, job_id="inspect") as lease:
        return sorted(lease.unfinished_jobs())


def spark_commits(checkpoint: Path) -> list[int]:
    directory = checkpoint / "commits"
    if not directory.exists():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _by_origin(mark: dict) -> tuple[int, int]:
    return mark["checkpoint"], mark["subtask"]


def check_door_state_chain(sink: StatefulSink) -> dict:
    """Every checkpoint's writers restored what the door's rule gives them, each state once.

    Subtask i restores what was recorded under subtask i at the checkpoint before:
    its own snapshot, then states carried from subtasks that checkpoint lacked
    (recorded under ``j mod n``). In the end the newest checkpoint's records hold
    every mark ever made, once. Returns checkpoint -> subtask -> committed writer.
    """
    chain = sink.committed_checkpoints()
    assert sorted(chain) == list(range(1, len(chain) + 1))
    made: list[dict] = []
    recorded: dict[int, list[dict]] = {}
    for checkpoint in sorted(chain):
        writers = chain[checkpoint]
        n = len(writers)
        assert sorted(writers) == list(range(n)), checkpoint
        for subtask, writer in writers.items():
            if checkpoint == 1:
                assert writer["restored"] is None  # created, not restored
                assert writer["restored_checkpoint"] is None
            else:
                assert writer["restored_checkpoint"] == checkpoint - 1
                assert writer["restored"] == recorded.get(subtask, []), (checkpoint, subtask)
            mark = writer["snapshot"][-1]
            assert writer["snapshot"][:-1] == (writer["restored"] or [])
            assert (mark["checkpoint"], mark["subtask"]) == (checkpoint, subtask)
            made.append(mark)
        carried = {s: list(w["snapshot"]) for s, w in writers.items()}
        for subtask in sorted(recorded):
            if subtask >= n:
                carried[subtask % n] += recorded[subtask]
        recorded = carried
    last = [mark for s in sorted(recorded) for mark in recorded[s]]
    assert sorted(last, key=_by_origin) == sorted(made, key=_by_origin)  # none lost or twice
    return chain


# --- exactly once, writer states ----------------------------------------------------------


def test_each_micro_batch_commits_once_and_a_restart_continues(door, tmp_path):
    files, base = tmp_path / "in", tmp_path
    write_files(files, 0, 1)
    run_stateful(door, base, files)
    sink = StatefulSink(base / "out")
    assert committed(sink) == expected(range(2))
    assert epochs(base / "checkpoint") == [(1, EpochStatus.COMMITTED), (2, EpochStatus.COMMITTED)]
    assert spark_commits(base / "checkpoint") == [0, 1]

    write_files(files, 2)
    run_stateful(door, base, files)  # restarted from the checkpoint location
    assert committed(sink) == expected(range(3))
    assert [e for e, _ in epochs(base / "checkpoint")] == [1, 2, 3]
    chain = check_door_state_chain(sink)
    # Only what the newest checkpoint's states name stays staged, and its job recorded.
    newest = {writer["token"] for writer in chain[3].values()}
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == newest
    assert unfinished_jobs(base / "checkpoint") == sorted({t.split("-")[0] for t in newest})


def test_rescaling_across_restarts_restores_every_state_exactly_once(door, tmp_path):
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    files.mkdir()
    for index, partitions in enumerate((2, 4, 3, 1)):  # shrinking carries states
        pq.write_table(pa.Table.from_pylist(rows_of(index)), files / f"part-{index}.parquet")
        df = door.readStream.schema(SCHEMA).parquet(str(files)).repartition(partitions)
        run(df, f"{SINKS}:stateful", checkpoint, base=str(tmp_path / "out"), sink_id="door")
    sink = StatefulSink(tmp_path / "out")
    chain = check_door_state_chain(sink)
    assert [len(chain[c]) for c in (1, 2, 3, 4)] == [2, 4, 3, 1]
    assert committed(sink) == expected(range(4))


def test_an_empty_micro_batch_still_carries_the_writer_states(door, tmp_path):
    files = tmp_path / "in"
    write_files(files, 0)
    write_files(files, 1, empty=True)  # a micro-batch of one empty partition
    write_files(files, 2)
    run_stateful(door, tmp_path, files, partitions=None)
    sink = StatefulSink(tmp_path / "out")
    chain = check_door_state_chain(sink)
    assert [len(chain[n]) for n in (1, 2, 3)] == [1, 1, 1]
    assert committed(sink) == expected([0, 2])


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    failures=st.dictionaries(
        st.tuples(st.integers(0, 1), st.integers(0, 2)),  # (subtask, attempt): 4 attempts
        st.integers(0, 4),  # the element it fails at (each subtask gets 5 of 10 rows)
        max_size=4,
    )
)
def test_random_task_failures_never_lose_duplicate_or_misroute_anything(
    door, tmp_path_factory, failures
):
    base = tmp_path_factory.mktemp("faults")
    write_files(base / "in", 0, 1)
    schedule = json.dumps([[s, a, at] for (s, a), at in failures.items()])
    run_stateful(door, base, base / "in", failures=schedule)
    sink = StatefulSink(base / "out")
    assert committed(sink) == expected(range(2))
    chain = check_door_state_chain(sink)
    failing = sum(next(a for a in range(4) if (subtask, a) not in failures) for subtask in range(2))
    logs = [
        [json.loads(line) for line in log.read_text().splitlines()]
        for log in sink.state_logs.glob("*.jsonl")
    ]
    assert len([log for log in logs if log[-1]["event"] != "snapshot"]) == 2 * failing
    for start, *_ in logs:  # every attempt of a subtask restored what its winner restored
        checkpoint = (start["restored_checkpoint"] or 0) + 1
        assert start["states"] == (chain[checkpoint][start["subtask"]]["restored"] or [])
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == {
        writer["token"] for writer in chain[2].values()
    }


def test_a_writer_failing_every_attempt_fails_the_query_and_a_restart_writes_once(door, tmp_path):
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(files, 0, 1)
    always = json.dumps([[0, attempt, 1] for attempt in range(4)])  # local[2,4]: 4 attempts
    with pytest.raises(Exception, match="injected failure at element 1"):
        run_stateful(door, tmp_path, files, failures=always)
    sink = StatefulSink(tmp_path / "out")
    assert committed(sink) == []
    assert epochs(checkpoint) == []
    assert list(sink.staging.glob("*.jsonl")) == []  # abort() removed the job's staging

    run_stateful(door, tmp_path, files)
    assert committed(sink) == expected(range(2))
    chain = check_door_state_chain(sink)
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == {
        writer["token"] for writer in chain[2].values()
    }


# --- a driver that died mid micro-batch ---------------------------------------------------

# The restart's view of checkpoint 2 after a death at each step: written again, or
# found recorded (the planner committed a Pending one) and not written.
REWRITTEN = {
    "writers-finished": True,
    "pending-recorded": False,
    "committer-finished": False,
    "committed-recorded": False,
}


@pytest.mark.parametrize("stage", list(REWRITTEN))
def test_a_micro_batch_the_commit_died_in_is_committed_once_after_a_restart(
    door, tmp_path, request, stage
):
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    sink_id = f"died-{stage}-{tmp_path.name}"
    stages = tmp_path / "stages.jsonl"
    request.addfinalizer(configure_hook(sink_id, log=stages, die_at=(stage, 2)).unlink)
    write_files(files, 0, 1)
    with pytest.raises(Exception, match=f"DriverDied: {stage} of checkpoint 2"):
        run_stateful(door, tmp_path, files, sink_id=sink_id, on_stage=f"{SINKS}:hook")
    sink = StatefulSink(tmp_path / "out")
    assert spark_commits(checkpoint) == [0]  # Spark replays micro-batch 1
    pending = [e for e, status in epochs(checkpoint, sink_id) if status is EpochStatus.PENDING]
    assert pending == ([2] if stage in {"pending-recorded", "committer-finished"} else [])
    writers = len(sink.events_by_token())

    write_files(files, 2)
    stages.write_text("")
    run_stateful(door, tmp_path, files, sink_id=sink_id, on_stage=f"{SINKS}:hook")
    seen = [tuple(line) for line in map(json.loads, stages.read_text().splitlines())]
    assert (("writers-finished", 2) in seen) is REWRITTEN[stage]
    assert (("committed-recorded", 2) in seen) is (stage != "committed-recorded")
    assert len(sink.events_by_token()) == writers + (4 if REWRITTEN[stage] else 2)
    assert committed(sink) == expected(range(3))
    assert [e for e, s in epochs(checkpoint, sink_id) if s is EpochStatus.COMMITTED] == [1, 2, 3]
    chain = check_door_state_chain(sink)
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == {
        writer["token"] for writer in chain[3].values()
    }
    assert spark_commits(checkpoint) == [0, 1, 2]


def test_a_micro_batch_whose_sink_id_was_taken_meanwhile_commits_nothing(door, tmp_path):
    """Another run acquired the sink id while the writers wrote: the fence refuses."""
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(files, 0)
    run_stateful(door, tmp_path, files, sink_id="fenced")
    write_files(files, 1)
    state = checkpoint / "sinkv2" / "commit_state.sqlite"
    with pytest.raises(Exception, match="another run took the sink id while this job"):
        run(
            json_stream(door, files),
            f"{SINKS}:fencing",
            checkpoint,
            base=str(tmp_path / "out"),
            state=str(state),
            fenced="fenced",
            sink_id="fenced",
        )
    sink = StatefulSink(tmp_path / "out")
    assert committed(sink) == expected(range(1))
    assert epochs(checkpoint, "fenced") == [(1, EpochStatus.COMMITTED)]
    run_stateful(door, tmp_path, files, sink_id="fenced")  # the restart cleans up, commits
    assert committed(sink) == expected(range(2))
    chain = check_door_state_chain(sink)
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == {
        writer["token"] for writer in chain[2].values()
    }


def test_a_stream_started_with_apply_goes_on_through_the_door(door, tmp_path, monkeypatch):
    """One coordinator, two doors: same checkpoint location, same sink id, same history."""
    from tests.spark.datasource_stream_sinks import DoorStatefulSink

    monkeypatch.setenv("SINKV2_STATE_DIR", str(tmp_path / "default-store"))
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(files, 0, 1)
    query = SinkTopologyTranslator().apply(
        json_stream(door, files),
        DoorStatefulSink(tmp_path / "out"),
        sink_id="door",
        checkpoint_location=str(checkpoint),
        trigger={"availableNow": True},
    )
    assert query.awaitTermination(TIMEOUT_S)
    write_files(files, 2)
    run_stateful(door, tmp_path, files)
    sink = StatefulSink(tmp_path / "out")
    assert committed(sink) == expected(range(3))
    assert [e for e, _ in epochs(checkpoint)] == [1, 2, 3]
    check_door_state_chain(sink)


# --- reference sinks by short name --------------------------------------------------------


def test_files_by_short_name(door, tmp_path):
    files, out = tmp_path / "in", tmp_path / "files"
    write_files(files, 0, 1)
    options = {"sink_id": "files", "partition_by": "key", "max_rows": "3"}
    run(json_stream(door, files), "files", tmp_path / "checkpoint", path=str(out), **options)
    write_files(files, 2)
    run(json_stream(door, files), "FILES", tmp_path / "checkpoint", path=str(out), **options)
    got = sorted((r["id"], r["key"]) for r in door.read.parquet(str(out)).collect())
    assert got == [(r["id"], r["key"]) for r in expected(range(3))]
    assert not [p for p in (out / "_staging").rglob("*") if p.is_file()]
    assert [e for e, _ in epochs(tmp_path / "checkpoint", "files")] == [1, 2, 3]


def iceberg_table(warehouse: Path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from reference_sinks.iceberg import IcebergSink

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "key", StringType()))
    return IcebergSink.local(warehouse, "ns.events", schema=schema)


def test_iceberg_by_short_name(door, tmp_path):
    from reference_sinks.iceberg import CHECKPOINT_ID_PROPERTY

    files, warehouse = tmp_path / "in", tmp_path / "lake"
    iceberg_table(warehouse)
    write_files(files, 0, 1)
    options = {"sink_id": "events", "warehouse": str(warehouse), "table": "ns.events"}
    run(json_stream(door, files), "iceberg", tmp_path / "checkpoint", **options)
    write_files(files, 2)
    run(json_stream(door, files), "iceberg", tmp_path / "checkpoint", **options)
    table = iceberg_table(warehouse).load_table()
    rows = table.scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [r["id"] for r in expected(range(3))]
    checkpoints = [
        int(snapshot.summary.additional_properties[CHECKPOINT_ID_PROPERTY])
        for snapshot in table.snapshots()
    ]
    assert checkpoints == [1, 2, 3]  # one snapshot per micro-batch


@pytest.mark.parametrize("kind", ["files", "iceberg"])
def test_reference_sinks_are_exactly_once_under_task_failures(door, tmp_path, kind):
    files, out = tmp_path / "in", tmp_path / "out"
    write_files(files, 0, 1)
    # Each micro-batch's two subtasks fail their first attempts, subtask 1 also its second.
    failures = json.dumps([[0, 0, 2], [1, 0, 0], [1, 1, 4]])
    if kind == "files":
        options = {"path": str(out), "partition_by": "key"}
    else:
        iceberg_table(out)
        options = {"warehouse": str(out), "table": "ns.events"}
    run(
        json_stream(door, files),
        f"{SINKS}:faulty_{kind}",
        tmp_path / "checkpoint",
        sink_id=kind,
        failures=failures,
        **options,
    )
    if kind == "files":
        ids = sorted(r["id"] for r in door.read.parquet(str(out)).collect())
        assert not [p for p in (out / "_staging").rglob("*") if p.is_file()]
    else:
        ids = sorted(iceberg_table(out).load_table().scan().to_arrow().column("id").to_pylist())
    assert ids == [r["id"] for r in expected(range(2))]
    assert epochs(tmp_path / "checkpoint", kind) == [
        (1, EpochStatus.COMMITTED),
        (2, EpochStatus.COMMITTED),
    ]


# --- bad options: Spark's error carries our message, before any data moves ---------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sink_id": "x"}, "needs the 'sink' option"),
        ({"sink": "nope", "sink_id": "x"}, "short name .* or 'module:callable'"),
        ({"sink": "no_such_module:make", "sink_id": "x"}, "names module 'no_such_module'"),
        ({"sink": "files", "path": "P"}, "needs the 'sink_id' option"),
        ({"sink": "files", "path": "P", "sink_id": "x", "checkpoint_id": "3"}, "for batch"),
        ({"sink": "files", "sink_id": "x"}, "needs the 'path' option"),
        ({"sink": "files", "path": "P", "sink_id": "x", "colour": "red"}, "does not take"),
        (
            {"sink": f"{SINKS}:no_committer", "sink_id": "x", "guarantee": "exactly-once"},
            "cannot give EXACTLY_ONCE",
        ),
        ({"sink": "files", "path": "P", "sink_id": "x", "guarantee": "twice"}, "'guarantee'"),
        ({"sink": "files", "path": "P", "sink_id": "x", "on_stage": "print"}, "'on_stage'"),
        (
            {"sink": "files", "path": "P", "sink_id": "x", "on_stage": f"{SINKS}:nope"},
            "does not load",
        ),
        (
            {
                "sink": "tests.spark.datasource_sinks:pre_commit_needs_spark",
                "base": "P",
                "sink_id": "x",
            },
            r"pre-commit topology uses DataFrame\.coalesce",
        ),
    ],
)
def test_bad_options_fail_with_our_message_before_data_moves(door, tmp_path, options, message):
    options = {k: (str(tmp_path / "P") if v == "P" else v) for k, v in options.items()}
    write_files(tmp_path / "in", 0)
    with pytest.raises(Exception, match=message):
        run(
            json_stream(door, tmp_path / "in"),
            options.pop("sink", None),
            tmp_path / "checkpoint",
            **options,
        )
    assert not (tmp_path / "P").exists() or not list((tmp_path / "P").rglob("*.json*"))
    assert spark_commits(tmp_path / "checkpoint") == []


def test_complete_output_mode_is_refused(door, tmp_path):
    write_files(tmp_path / "in", 0)
    counts = json_stream(door, tmp_path / "in", None).groupBy("key").count()
    stream = writer(counts, "files", tmp_path / "checkpoint", sink_id="x", path=str(tmp_path / "P"))
    query = stream.outputMode("complete").start()
    with pytest.raises(Exception, match=r"outputMode\('complete'\)"):
        query.awaitTermination(TIMEOUT_S)
    assert not (tmp_path / "P").exists()


def test_a_checkpoint_location_from_the_session_conf_is_refused(door, tmp_path):
    write_files(tmp_path / "in", 0)
    door.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "checkpoints"))
    try:
        query = (
            json_stream(door, tmp_path / "in")
            .writeStream.format("sinkv2")
            .option("sink", "files")
            .option("path", str(tmp_path / "P"))
            .option("sink_id", "x")
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(Exception, match=r"needs \.option\('checkpointLocation'"):
            query.awaitTermination(TIMEOUT_S)
    finally:
        door.conf.unset("spark.sql.streaming.checkpointLocation")
    assert not (tmp_path / "P").exists()


def test_a_remote_checkpoint_location_needs_a_state_store(door, tmp_path):
    from sinkv2.errors import SinkConfigurationError
    from sinkv2_spark._doors.datasource_stream_options import parse_stream_options

    options = {"sink": "files", "path": str(tmp_path), "sink_id": "x"}
    with pytest.raises(SinkConfigurationError, match=r"set \.option\('state_store'"):
        parse_stream_options({**options, "checkpointlocation": "s3a://bucket/checkpoint"})
    parsed = parse_stream_options(
        {
            **options,
            "checkpointlocation": "s3a://bucket/checkpoint",
            "state_store": str(tmp_path / "state.sqlite"),
        }
    )
    assert parsed.origin(claim=False) == "checkpoint s3a://bucket/checkpoint"


def test_a_checkpoint_location_and_a_sink_id_belong_to_each_other(door, tmp_path):
    files = tmp_path / "in"
    write_files(files, 0)
    run_stateful(door, tmp_path, files, sink_id="a")
    write_files(files, 1)
    with pytest.raises(Exception, match="belongs to the stream of sink id 'a'"):
        run_stateful(door, tmp_path, files, sink_id="b")
    assert committed(StatefulSink(tmp_path / "out")) == expected(range(1))


def test_a_commit_without_every_task_s_message_is_refused():
    """Spark's continuous trigger commits epochs of tasks that never end (no messages).

    Spark hands Python writers no rows before an Arrow batch fills, and logs a failed
    continuous commit without failing the query, so this is checked without Spark.
    """
    from sinkv2.errors import SinkConfigurationError
    from sinkv2_spark._doors.datasource_stream import StreamWriter

    writer = StreamWriter({}, None, None)
    with pytest.raises(SinkConfigurationError, match="the continuous trigger"):
        writer.commit([None, None], 0)
