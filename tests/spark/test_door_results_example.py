"""docs/examples/door_results.py, the doors' "see what a write did" example, on local Spark."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from pathlib import Path

import pytest

from sinkv2.errors import SinkWriterError
from sinkv2.runtime import CommitStatus
from sinkv2_spark import register
from tests.spark.test_datasource_stream import json_stream, write_files

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "door_results.py"
LISTENER_WAIT_S = 60


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("door_results", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["door_results"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["door_results"]


@pytest.fixture(scope="module")
def door(spark):
    register(spark)
    return spark


def test_a_batch_write_returns_its_result_and_the_same_checkpoint_writes_nothing(
    door, example, tmp_path
):
    df = door.range(100).selectExpr("id", "cast(id % 3 as string) as key")
    path, store = str(tmp_path / "orders"), str(tmp_path / "state.sqlite")
    first = example.write_orders(df, path, store)
    assert (first.status, first.records_written) == (CommitStatus.COMMITTED, 100)
    again = example.write_orders(df, path, store)
    assert (again.status, again.records_written) == (CommitStatus.ALREADY_COMMITTED, 0)
    assert door.read.parquet(path).count() == 100


def test_a_batch_write_that_fails_raises_the_sink_s_error_first(door, example, tmp_path):
    df = door.range(10).selectExpr("id", "cast(id as string) as key").repartition(1)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the sink needs a directory")
    with pytest.raises(SinkWriterError) as raised:
        example.write_orders(df, str(blocker / "orders"), str(tmp_path / "state.sqlite"))
    first_line = str(raised.value).splitlines()[0]
    assert first_line.startswith(("NotADirectoryError: ", "FileExistsError: ")), first_line


def test_a_stream_prints_each_micro_batch_s_result(door, example, tmp_path, capsys):
    files = tmp_path / "in"
    write_files(files, 0, 1)
    query, listener = example.start_orders_stream(
        door, json_stream(door, files), str(tmp_path / "orders"), str(tmp_path / "checkpoint")
    )
    try:
        assert query.awaitTermination(180)
        deadline = time.monotonic() + LISTENER_WAIT_S
        while len(listener.results) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
        door.streams.removeListener(listener)
    assert [(r.checkpoint_id, r.records_written) for r in listener.results] == [(1, 10), (2, 10)]
    printed = capsys.readouterr().out
    assert len(re.findall(r"^status +committed$", printed, re.MULTILINE)) == 2
