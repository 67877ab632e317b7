"""An executor JVM killed mid-write on a real two-worker standalone cluster, on both writer paths.

Subtask 0's first attempt stalls after handing its writer 50 rows (its staged part
file half written: the sink's own writer's under ``_staging/<token>/``, or Spark's
attempt file under ``<epoch>/_temporary/``). The test then SIGKILLs that attempt's
executor - the whole JVM, so no task abort runs - and its stalled Python worker.
(The native FileSink is not partitioned here: Spark's writer would sort - and so
hold back - its input before opening a file.) Spark reports the executor lost and
runs the task again elsewhere; the job must commit every row exactly once and leave
nothing behind: no staged file, no ``_temporary``, no data file the Iceberg table
does not reference.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.integration.jvm_temp import jvm_temp_env
from tests.integration.standalone_cluster import StandaloneCluster

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
ROWS = 4000
STALL_TIMEOUT_S = 240.0

DRIVER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.integration.cluster_session import cluster_session
    from reference_sinks.files import FileSink, RollingPolicy
    from reference_sinks.iceberg import IcebergSink, local_catalog
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator
    from tests.integration.stalled_input import StalledInput, stalled, with_stalled_input

    spark = cluster_session({master!r})
    kind, location = {kind!r}, {location!r}
    stall = StalledInput({markers!r}, frozenset({{(0, 0)}}))
    df = spark.range(0, {rows}, numPartitions=2).selectExpr(  # no shuffle to lose
        "id", "concat('k', cast(id % 5 as string)) as key"
    )
    if kind == "files":
        sink = FileSink(location, partition_by=["key"], native_write=False)
        df = stalled(df, stall)
    elif kind == "files-native":  # not partitioned: Spark's writer would sort the input first
        rolling = RollingPolicy(max_rows=700, max_bytes=None)
        sink = with_stalled_input(
            FileSink(location, rolling_policy=rolling, native_write=True), stall
        )
    else:
        sink = with_stalled_input(
            IcebergSink(local_catalog(location), "ns.events", native_write=True), stall
        )
    result = SinkTopologyTranslator(state_store=SqliteCommitStateStore({store!r})).apply(
        df, sink, sink_id="executor-loss", checkpoint_id=1
    )
    print("RESULT", json.dumps({{"native": result.native_write, "rows": result.records_written}}))
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield running
    running.stop()


def _parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[1])


def _executor_of(worker_pid: int) -> int:
    """The executor JVM a Python worker belongs to: its nearest CoarseGrainedExecutorBackend."""
    pid: int | None = worker_pid
    while pid and pid > 1:
        with contextlib.suppress(OSError):
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        pid = _parent(pid)
    raise AssertionError(f"no executor JVM above Python worker {worker_pid}")


def _create_table(warehouse: str) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from reference_sinks.iceberg import local_catalog

    catalog = local_catalog(warehouse)
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table(
        "ns.events",
        schema=Schema(NestedField(1, "id", LongType()), NestedField(2, "key", StringType())),
    )


@pytest.mark.parametrize("kind", ["files", "files-native", "iceberg-native"])
def test_an_executor_killed_mid_write_is_replaced_and_every_row_lands_once(cluster, tmp_path, kind):
    location = str(tmp_path / ("warehouse" if kind.startswith("iceberg") else "out"))
    if kind.startswith("iceberg"):
        _create_table(location)
    markers = tmp_path / "markers"
    markers.mkdir()
    script = DRIVER.format(
        root=str(ROOT),
        master=cluster.master_url,
        kind=kind,
        location=location,
        markers=str(markers),
        rows=ROWS,
        store=str(tmp_path / "state.sqlite"),
    )
    log = (tmp_path / "driver.log").open("wb")
    driver = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
        env={**os.environ, **jvm_temp_env(tmp_path / "jvm-tmp")},
    )
    try:
        deadline = time.monotonic() + STALL_TIMEOUT_S
        marker = markers / "stalled-0-0"
        while not marker.exists() or not marker.read_text():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "subtask 0 never stalled"
            time.sleep(0.1)
        worker = int(marker.read_text())
        executor = _executor_of(worker)
        if kind != "files":  # Spark's writer: its attempt file is there, half written
            assert list(Path(location).rglob("_temporary/*/_temporary/attempt_*/**/*.parquet"))
        os.kill(executor, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
        out, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        log.close()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-4000:]
    [line] = [x for x in out.decode().splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result == {"native": kind != "files", "rows": ROWS}
    if kind.startswith("iceberg"):
        from reference_sinks.iceberg import IcebergSink, local_catalog
        from tests.integration.test_driver_kill import _key

        table = IcebergSink(local_catalog(location), "ns.events").load_table()
        ids = sorted(table.scan().to_arrow().column("id").to_pylist())
        assert ids == list(range(ROWS))
        referenced = {_key(task.file.file_path) for task in table.scan().plan_files()}
        fs, root = pafs.FileSystem.from_uri(table.location() + "/data")
        on_disk = {
            _key(info.path)
            for info in fs.get_file_info(pafs.FileSelector(root, recursive=True))
            if info.type == pafs.FileType.File
        }
        assert on_disk == referenced  # nothing of the lost attempt, no _temporary
    else:
        import pyarrow.dataset as ds

        found = ds.dataset(location, format="parquet", partitioning="hive").to_table()
        assert sorted(found.column("id").to_pylist()) == list(range(ROWS))
        assert [p for p in (Path(location) / "_staging").rglob("*")] == []


SOURCE_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.integration.cluster_session import cluster_session
    from tests.integration.stalled_source import StallingLogSource
    from sinkv2_spark import from_source, register

    spark = cluster_session({master!r})
    register(spark)
    source = StallingLogSource(
        {logs!r}, markers={markers!r}, stall_from_line=1, batch_lines=10,
        discovery_interval_ms=50,
    )
    df = from_source(
        spark, source, source_id="logs", streaming=True, state_store={source_store!r},
        parallelism=2, batch_rows=10, max_records_per_trigger={per_trigger},
    )
    query = (
        df.writeStream.format("sinkv2").option("sink", "files").option("path", {out!r})
        .option("max_rows", "25").option("sink_id", "source-executor-loss")
        .option("checkpointLocation", {checkpoint!r}).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    error = query.exception()
    print("RESULT", json.dumps({{"error": None if error is None else str(error)}}))
    spark.stop()
    """
)


def test_an_executor_killed_mid_read_of_a_source_stream_loses_and_doubles_nothing(
    cluster, tmp_path
):
    """A FLIP-27 stream (the log source) into FileSink; an executor dies mid micro-batch.

    Micro-batch 0 reads the first lines of both files; in a later one, the task reading
    on from there stalls after handing the sink's writer its first lines, and the test
    SIGKILLs that task's executor JVM and Python worker. Spark runs the task again on
    the new or the other executor, from the epoch's recorded slice: every line once in
    the output, nothing staged.
    """
    from tests.spark.log_source import append, records_of

    logs, markers = tmp_path / "logs", tmp_path / "markers"
    logs.mkdir()
    markers.mkdir()
    for index in range(2):
        append(logs, f"part-{index}.log", (f"v{index}-{n}" for n in range(60)))
    out = tmp_path / "out"
    script = SOURCE_DRIVER.format(
        root=str(ROOT),
        master=cluster.master_url,
        logs=str(logs),
        markers=str(markers),
        source_store=str(tmp_path / "source.sqlite"),
        per_trigger=40,
        out=str(out),
        checkpoint=str(tmp_path / "checkpoint"),
    )
    log = (tmp_path / "driver.log").open("wb")
    driver = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
        env={**os.environ, **jvm_temp_env(tmp_path / "jvm-tmp")},
    )
    try:
        deadline = time.monotonic() + STALL_TIMEOUT_S
        marker = markers / "stalled"
        while not marker.exists() or not marker.read_text():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "no reader stalled"
            time.sleep(0.1)
        worker = int(marker.read_text())
        assert (tmp_path / "checkpoint" / "commits" / "0").exists()  # a later micro-batch
        os.kill(_executor_of(worker), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
        out_text, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        log.close()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-4000:]
    [line] = [x for x in out_text.decode().splitlines() if x.startswith("RESULT ")]
    assert json.loads(line.removeprefix("RESULT ")) == {"error": None}

    import pyarrow.parquet as pq

    found = pq.read_table(out).select(["file", "line", "value"]).to_pylist()
    want = [record for name in ("part-0.log", "part-1.log") for record in records_of(logs, name)]
    key = lambda r: (r["file"], r["line"])  # noqa: E731
    assert sorted(found, key=key) == sorted(want, key=key)
    assert [p for p in (out / "_staging").rglob("*") if p.is_file()] == []
