"""`DataGeneratorSource` on a micro-batch engine: how far each split can be read now.

A bounded split ends at its own last index (counted, so a record limit cuts it); an
endless one at what ``records_per_second`` made due since the source first saw it,
as Spark's ``rate`` source. Cuts cover exactly: read and rest, no index twice.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sinkv2.source.lib._datagen as datagen
from sinkv2._metrics import InMemoryMetricGroup
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import SupportsEndPositions
from sinkv2.source.lib import DataGeneratorSource, NumberSequenceSplit
from sinkv2.source.lib._sequence_splits import cut_at

SCHEMA = pa.schema([("id", pa.int64())])


def row(index: int) -> dict[str, Any]:
    return {"id": index}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(datagen.time, "monotonic", fake)
    return fake


def indices(split: NumberSequenceSplit | None) -> list[int]:
    if split is None:
        return []
    assert split.to is not None
    return list(range(split.current, split.to + 1, split.step))


def test_an_endless_split_can_be_read_as_far_as_the_rate_made_due(clock: Clock):
    source = DataGeneratorSource(row, None, SCHEMA, records_per_second=100, num_splits=4)
    assert isinstance(source, SupportsEndPositions)
    split = NumberSequenceSplit("1", 1, None, 4)  # 1, 5, 9, ...: 25 indices a second
    (end,) = source.end_positions([split])
    first = source.cut_split(split, end, None)
    assert (first.read, first.records) == (None, 0)  # nothing due at the start
    assert first.rest == split
    clock.now += 2.0
    (end,) = source.end_positions([split])
    cut = source.cut_split(split, end, None)
    assert indices(cut.read) == list(range(1, 200, 4))  # 50 indices in two seconds
    assert cut.records == 50
    assert cut.rest == NumberSequenceSplit("1", 201, None, 4)
    clock.now += 1.0  # the rate counts from the first sight, not from the last cut
    (end,) = source.end_positions([cut.rest])
    assert indices(source.cut_split(cut.rest, end, 10).read) == list(range(201, 241, 4))


def test_a_bounded_split_ends_at_its_own_end_and_a_limit_cuts_it(clock: Clock):
    source = DataGeneratorSource(row, 100, SCHEMA, records_per_second=1)
    split = NumberSequenceSplit("0", 10, 49)
    assert source.end_positions([split]) == [49]
    capped = source.cut_split(split, 49, 15)
    assert (indices(capped.read), capped.records) == (list(range(10, 25)), 15)
    assert capped.rest == NumberSequenceSplit("0", 25, 49)
    whole = source.cut_split(split, 49, None)
    assert (whole.records, whole.rest) == (40, None)


def test_an_endless_generator_without_a_rate_is_refused_naming_the_option():
    source = DataGeneratorSource(row, None, SCHEMA)
    with pytest.raises(SinkConfigurationError, match="records_per_second"):
        source.end_positions([NumberSequenceSplit("0", 0, None, 2)])
    with pytest.raises(SinkConfigurationError, match="an index from end_positions"):
        source.cut_split(NumberSequenceSplit("0", 0, None, 2), "7", None)


@given(
    current=st.integers(-50, 50),
    step=st.integers(1, 5),
    length=st.none() | st.integers(0, 40),
    last=st.integers(-60, 260),
    limit=st.none() | st.integers(0, 30),
)
def test_a_cut_reads_then_carries_every_index_once(
    current: int, step: int, length: int | None, last: int, limit: int | None
):
    to = None if length is None else current + (length - 1) * step
    split = NumberSequenceSplit("s", current, to, step)
    cut = cut_at(split, last, limit)
    read = indices(cut.read)
    assert cut.records == len(read)
    wanted = [i for i in range(current, last + 1, step) if to is None or i <= to]
    assert read == wanted[: len(wanted) if limit is None else limit]
    if cut.rest is None:
        assert to is not None
        assert not read or read[-1] == to
    else:
        assert cut.rest.current == current + len(read) * step
        assert (cut.rest.to, cut.rest.step) == (to, step)


class Reading:
    """Just enough of a reader's context and output to poll a reader by hand."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.metrics = InMemoryMetricGroup()

    def current_parallelism(self) -> int:
        return 2

    def send_split_request(self) -> None:
        pass

    def metric_group(self) -> InMemoryMetricGroup:
        return self.metrics

    def create_output_for_split(self, split_id: str) -> Reading:
        return self

    def release_output_for_split(self, split_id: str) -> None:
        pass

    def collect_batch(self, batch: pa.RecordBatch) -> None:
        self.ids += batch.column("id").to_pylist()


@pytest.mark.parametrize(("count", "paced"), [(None, False), (1_000, True)])
def test_the_readers_pace_only_what_the_engine_does_not(count: int | None, paced: bool):
    # The engine paces an endless generator's slices by its end positions; a bounded
    # generator's splits are paced by its readers (Flink's rate limiter), on any engine.
    source = DataGeneratorSource(row, count, SCHEMA, records_per_second=2, batch_size=10)
    reading = Reading()
    reader = source.create_reader(reading)  # type: ignore[arg-type]
    reader.start()
    reader.add_splits([NumberSequenceSplit("0", 0, 98, 2)])
    reader.notify_no_more_splits()
    for _ in range(10):
        if not reader.is_available().done():
            break
        reader.poll_next(reading)  # type: ignore[arg-type]
    reader.close()
    # at 1 row/s per reader a paced reader emits one row, then waits for its next permit
    assert reading.ids == ([0] if paced else list(range(0, 99, 2)))
