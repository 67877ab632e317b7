"""The tutorial's last step: its sink on a Spark DataFrame, through the translator."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from sinkv2.runtime import CommitStatus

pytestmark = pytest.mark.spark

FIRST_SINK = Path(__file__).resolve().parents[2] / "docs" / "examples" / "first_sink.py"


@pytest.fixture(scope="module")
def first_sink():
    """docs/examples/first_sink.py, loaded as a reader runs it: not from a package.

    Its classes travel to Spark's workers by value, as they do when the file runs as
    a script (classes of ``__main__`` are pickled by value).
    """
    from pyspark import cloudpickle

    spec = importlib.util.spec_from_file_location("tutorial_first_sink", FIRST_SINK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    yield module
    cloudpickle.unregister_pickle_by_value(module)
    del sys.modules[spec.name]


def test_the_tutorial_sink_writes_a_dataframe_exactly_once(spark, first_sink, tmp_path):
    out = tmp_path / "out"

    first, again = first_sink.write_on_spark(spark, out, tmp_path / "state.sqlite")

    assert first.status is CommitStatus.COMMITTED
    assert (first.records_written, first.subtasks, first.committed) == (3, 2, 2)
    assert first.writer_metrics["numRecordsSend"] == 3
    summary = first.summary()
    assert "metric: numBytesSend" in summary  # the sink does not count bytes...
    assert summary.split("metric: numBytesSend")[1].split("\n")[0].strip() == "not measured"
    assert "time: total" in summary
    # The retry of checkpoint 1 wrote nothing.
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert again.records_written == 0
    # Only committed files: one per partition, each record once.
    names = sorted(path.name for path in out.iterdir())
    assert len(names) == 2, names
    assert all(name.startswith("part-") and name.endswith(".jsonl") for name in names)
    records = [
        json.loads(line)
        for name in names
        for line in (out / name).read_text(encoding="utf-8").splitlines()
    ]
    assert sorted(records, key=lambda r: r["order"]) == [
        {"item": "apple", "order": 1},
        {"item": "pear", "order": 2},
        {"item": "plum", "order": 3},
    ]
