"""A connector author's mistakes on Spark, each named where the author can act on it.

Found by red-teaming the FLIP-27 doors as a Flink connector author would use them:
what Spark itself would say (a bare ``PicklingError``, a traceback without its
cause) names neither the source nor the line to fix.
"""

from __future__ import annotations

import collections
import io
import threading

import attrs
import pyarrow as pa
import pytest
from pyspark.util import handle_worker_exception

from sinkv2 import AttrsMsgpackSerializer
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import Boundedness, SourceDefinitionError, SourceReaderError, SplitEnumerator
from sinkv2.source._errors import raised_at
from sinkv2.source.lib import DataGeneratorSource
from sinkv2.source.reader import (
    RecordEmitter,
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitReader,
)
from sinkv2.testing import LocalSourceEngine
from sinkv2_spark import from_source

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("n", pa.int64())])


@attrs.frozen
class CountSplit:
    name: str
    position: int = 0

    def split_id(self) -> str:
        return self.name


@attrs.frozen
class Pending:
    splits: tuple[CountSplit, ...]


class BrokenSplitReader(SplitReader[int, CountSplit]):
    """Fetches 0, 1, 2, then fails the way a connector's own code fails."""

    def __init__(self) -> None:
        self._splits: collections.deque[CountSplit] = collections.deque()

    def handle_splits_changes(self, splits_changes) -> None:
        self._splits.extend(splits_changes.splits)

    def fetch(self) -> RecordsBySplits[int]:
        if not self._splits:
            return RecordsBySplits({})
        split = self._splits[0]
        if split.position >= 3:
            parse_the_upstream_reply(split.position)
        self._splits[0] = attrs.evolve(split, position=split.position + 1)
        return RecordsBySplits({split.name: [split.position]})

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        pass


def parse_the_upstream_reply(position: int) -> None:
    raise ValueError(f"unexpected reply at position {position}")


class Emitter(RecordEmitter[int, dict[str, int], CountSplit]):
    def emit_record(self, element, output, split_state) -> None:
        output.collect({"n": element})


class Reader(SingleThreadMultiplexSourceReaderBase[int, dict[str, int], CountSplit, CountSplit]):
    def __init__(self, context) -> None:
        super().__init__(BrokenSplitReader, Emitter(), context)

    def start(self) -> None:
        self.context.send_split_request()

    def initialized_state(self, split: CountSplit) -> CountSplit:
        return split

    def to_split_type(self, split_id: str, split_state: CountSplit) -> CountSplit:
        return split_state

    def on_split_finished(self, finished_split_ids) -> None:
        self.context.send_split_request()


class Enumerator(SplitEnumerator[CountSplit, Pending]):
    def __init__(self, context, pending) -> None:
        self._context = context
        self._pending = collections.deque(pending)

    def start(self) -> None:
        pass

    def add_reader(self, subtask_id: int) -> None:
        pass

    def handle_split_request(self, subtask_id: int, requester_hostname) -> None:
        if self._pending:
            self._context.assign_split(self._pending.popleft(), subtask_id)
        else:
            self._context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits, subtask_id: int) -> None:
        self._pending.extend(splits)

    def snapshot_state(self, checkpoint_id: int) -> Pending:
        return Pending(tuple(self._pending))

    def close(self) -> None:
        pass


class CountSource:
    def __init__(self) -> None:
        self.splits = 1

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_enumerator(self, enum_context) -> Enumerator:
        return Enumerator(enum_context, [CountSplit(f"s{i}") for i in range(self.splits)])

    def restore_enumerator(self, enum_context, checkpoint: Pending) -> Enumerator:
        return Enumerator(enum_context, checkpoint.splits)

    def create_reader(self, reader_context) -> Reader:
        return Reader(reader_context)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[CountSplit]:
        return AttrsMsgpackSerializer(CountSplit, version=1)

    def get_enumerator_checkpoint_serializer(self) -> AttrsMsgpackSerializer[Pending]:
        return AttrsMsgpackSerializer(Pending, version=1)

    def get_produced_type(self) -> pa.Schema:
        return SCHEMA


class LockedSource(CountSource):
    """A source that opened something in its __init__, as the docs say not to."""

    def __init__(self) -> None:
        super().__init__()
        self.guard = threading.Lock()


def as_spark_reports(raised: BaseException, monkeypatch) -> str:
    """The text Spark's Python worker sends the driver for ``raised`` (simplified traceback)."""
    monkeypatch.setenv("SPARK_SIMPLIFIED_TRACEBACK", "1")
    out = io.BytesIO()
    try:
        raise raised
    except BaseException as error:  # noqa: BLE001  # formatted as a worker formats it
        handle_worker_exception(error, out)
    return out.getvalue()[8:].decode("utf-8")  # after the marker and the length


def test_a_split_reader_s_own_traceback_reaches_spark_s_error(monkeypatch):
    engine = LocalSourceEngine(CountSource(), parallelism=1, seed=0)
    with pytest.raises(SourceReaderError) as raised:
        engine.run()
    engine.close()
    reported = as_spark_reports(raised.value, monkeypatch)
    assert "the split fetcher failed: ValueError: unexpected reply at position 3" in reported
    # Spark drops __cause__: without the note, where the reader failed is gone
    assert "in parse_the_upstream_reply" in reported
    assert "in fetch" in reported


def test_a_generator_function_s_traceback_reaches_spark_s_error(monkeypatch):
    def row_of(index: int) -> dict[str, int]:
        return {"n": 10 // (index - 5)}

    source = DataGeneratorSource(row_of, 10, SCHEMA, batch_size=100)
    engine = LocalSourceEngine(source, parallelism=1, seed=0)
    with pytest.raises(SourceReaderError) as raised:
        engine.run()
    engine.close()
    reported = as_spark_reports(raised.value, monkeypatch)
    assert "threw an exception on this input: 5" in reported
    assert "in row_of" in reported
    assert "ZeroDivisionError" in reported


def test_the_note_shows_the_first_error_of_a_chain():
    try:
        try:
            parse_the_upstream_reply(7)
        except ValueError as first:
            raise RuntimeError("wrapped") from first
    except RuntimeError as second:
        note = raised_at(second)
    assert "in parse_the_upstream_reply" in note
    assert note.rstrip().endswith("ValueError: unexpected reply at position 7")
    assert "wrapped" not in note


def test_from_source_names_the_attribute_that_does_not_pickle(spark):
    with pytest.raises(SourceDefinitionError) as raised:
        from_source(spark, LockedSource())
    message = str(raised.value)
    assert "from_source(): LockedSource cannot be shipped" in message
    assert "source.guard" in message
    assert "create_enumerator() and create_reader()" in message


def test_a_stream_of_an_unpicklable_source_is_refused_before_it_starts(spark, tmp_path):
    with pytest.raises(SourceDefinitionError, match=r"source\.guard .* does not pickle"):
        from_source(
            spark,
            LockedSource(),
            streaming=True,
            source_id="locked",
            state_store=tmp_path / "state.sqlite",
        )


DRIVER_ONLY_MODULE = '''
from sinkv2.source.lib import NumberSequenceSource


class DriverOnlySource:
    """A source whose module only the driver can import."""

    def __init__(self):
        self.inner = NumberSequenceSource(1, 3)

    def get_boundedness(self):
        return self.inner.get_boundedness()

    def create_enumerator(self, context):
        return self.inner.create_enumerator(context)

    def restore_enumerator(self, context, checkpoint):
        return self.inner.restore_enumerator(context, checkpoint)

    def create_reader(self, context):
        return self.inner.create_reader(context)

    def get_split_serializer(self):
        return self.inner.get_split_serializer()

    def get_enumerator_checkpoint_serializer(self):
        return self.inner.get_enumerator_checkpoint_serializer()

    def get_produced_type(self):
        return self.inner.get_produced_type()
'''


def test_a_source_module_the_workers_cannot_import_is_named_with_the_fix(
    spark, tmp_path, monkeypatch
):
    (tmp_path / "driver_only_source_module.py").write_text(DRIVER_ONLY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver's path only, not the workers'
    from driver_only_source_module import DriverOnlySource

    with pytest.raises(SinkConfigurationError) as raised:
        from_source(spark, DriverOnlySource())
    message = str(raised.value)
    assert "no module named 'driver_only_source_module'" in message
    assert "addPyFile" in message
    assert "PYTHONPATH" in message
