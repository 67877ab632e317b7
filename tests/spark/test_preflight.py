"""apply() checks, before any writer runs, that the sink can travel to and load in workers."""

import importlib
import sys
import textwrap
import threading
import uuid

import pytest

from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStatus
from tests.spark.recording_sink import RecordingSink

pytestmark = pytest.mark.spark


def frame(spark, n=100):
    return spark.range(n).selectExpr("id", "cast(id % 7 as string) as key", "0.5d as value")


class Client:
    """What a sink should open in its writer, not hold."""

    def __init__(self) -> None:
        self.endpoint = "http://127.0.0.1:1"
        self._lock = threading.Lock()


class SinkHoldingAClient(RecordingSink):
    def __init__(self, base) -> None:
        super().__init__(base)
        self.client = Client()


def test_a_sink_that_does_not_pickle_is_refused_naming_the_attribute(spark, translator, tmp_path):
    sink = SinkHoldingAClient(tmp_path / "out")
    with pytest.raises(SinkConfigurationError) as caught:
        translator.apply(frame(spark), sink, sink_id="lock")
    message = str(caught.value)
    assert "SinkHoldingAClient cannot be shipped to Spark's executors" in message
    assert "sink.client._lock" in message
    assert "of type lock" in message
    assert "create_writer()" in message  # the fix
    assert not list((tmp_path / "out" / "_events").iterdir())  # no writer ever ran


MODULE = textwrap.dedent(
    """
    from tests.spark.recording_sink import RecordingSink


    class ElsewhereSink(RecordingSink):
        pass
    """
)


def test_a_sink_whose_module_workers_cannot_import_is_refused_with_the_fix(
    spark, translator, tmp_path
):
    name = f"sinkv2_elsewhere_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    module_file = folder / f"{name}.py"
    module_file.write_text(MODULE)
    sys.path.insert(0, str(folder))  # the driver sees it; the workers do not
    try:
        sink = importlib.import_module(name).ElsewhereSink(tmp_path / "out")
        with pytest.raises(SinkConfigurationError) as caught:
            translator.apply(frame(spark), sink, sink_id="elsewhere")
        message = str(caught.value)
        assert "ElsewhereSink cannot be loaded by Spark's Python workers" in message
        assert f"No module named '{name}'" in message
        assert "addPyFile" in message
        assert "PYTHONPATH" in message
        assert not list((tmp_path / "out" / "_events").iterdir())  # no writer ever ran

        spark.sparkContext.addPyFile(str(module_file))  # what the message advises
        result = translator.apply(frame(spark), sink, sink_id="elsewhere")
        assert result.status is CommitStatus.COMMITTED
        assert len(sink.committed_records()) == 100
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)
