"""`NumberSequenceSource` and `DataGeneratorSource`: Flink's tests, restated, and the kit."""

from __future__ import annotations

import itertools
import time
from typing import Any

import cloudpickle
import pyarrow as pa
import pytest

from sinkv2.errors import SinkConfigurationError
from sinkv2.source import Boundedness, inspect_source
from sinkv2.source.lib import DataGeneratorSource, NumberSequenceSource, NumberSequenceSplit
from sinkv2.source.lib._sequence_splits import cut
from sinkv2.testing import LocalSourceEngine, check_source, check_source_reader


def values(engine: LocalSourceEngine, column: str = "value") -> list[Any]:
    return sorted(record.record[column] for record in engine.committed)


def read_all(source: Any, parallelism: int) -> LocalSourceEngine:
    engine = LocalSourceEngine(source, parallelism)
    engine.run()
    engine.finish()
    return engine


def test_cut_makes_contiguous_ranges_that_cover_the_sequence_once():
    """Flink's NumberSequenceSourceTest splits, restated: every number once."""
    for first, last, parts in [(0, 99, 4), (5, 7, 10), (-3, 3, 2), (0, -1, 3)]:
        splits = cut(first, last, parts)
        numbers = [n for s in splits for n in range(s.current, s.to + 1)]  # type: ignore[operator]
        assert numbers == list(range(first, last + 1))
        assert len(splits) == max(0, min(parts, last - first + 1))


def test_an_unbounded_cut_interleaves_one_arithmetic_sequence_per_split():
    splits = cut(10, None, 3)
    assert [(s.current, s.step, s.to) for s in splits] == [
        (10, 3, None),
        (11, 3, None),
        (12, 3, None),
    ]


@pytest.mark.parametrize("parallelism", [1, 3, 7])
def test_every_number_is_read_once_at_any_parallelism(parallelism: int):
    """Flink's NumberSequenceSourceITCase#testParallelSourceExecution, on the local engine."""
    engine = read_all(NumberSequenceSource(1, 1000, batch_size=64), parallelism)
    assert values(engine) == list(range(1, 1001))


def test_the_source_passes_the_kit_bounded():
    check_source(
        lambda: NumberSequenceSource(0, 199, batch_size=7, num_splits=6),
        expected=[{"value": n} for n in range(200)],
    )


def test_the_source_passes_the_kit_unbounded():
    check_source(
        lambda: NumberSequenceSource(0, None, batch_size=5, num_splits=3),
        split_records=lambda split_id: (
            {"value": n} for n in itertools.count(int(split_id) - 1, 3)
        ),
        records_to_read=200,
    )


def test_the_reader_passes_flinks_source_reader_test_base():
    source = NumberSequenceSource(0, 0, batch_size=4)

    def get_split(index: int, records: int, boundedness: Boundedness) -> NumberSequenceSplit:
        if boundedness is Boundedness.BOUNDED:
            return NumberSequenceSplit(str(index), index * records, index * records + records - 1)
        return NumberSequenceSplit(str(index), index, None, 10)  # index, index + 10, ...

    check_source_reader(
        source.create_reader,
        get_split,
        value_of=lambda row: row["value"],
        next_record_index=lambda split: (split.current - int(split.id)) // 10,
        split_serializer=source.get_split_serializer(),
    )


def test_the_produced_type_and_boundedness():
    assert NumberSequenceSource(0, 9).get_boundedness() is Boundedness.BOUNDED
    unbounded = NumberSequenceSource(0, None, column="id")
    assert unbounded.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    assert inspect_source(unbounded).produced_type == pa.schema(
        [pa.field("id", pa.int64(), nullable=False)]
    )
    assert cloudpickle.loads(cloudpickle.dumps(unbounded)).column == "id"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": "0", "end": 9}, "'start' must be an int"),
        ({"start": 5, "end": 3}, "'end' must be at least 4"),
        ({"start": 0, "end": 9, "batch_size": 0}, "'batch_size' must be at least 1"),
        ({"start": 0, "end": 9, "num_splits": 0}, "'num_splits' must be at least 1"),
        ({"start": 0, "end": 9, "column": ""}, "'column' must be a non-empty str"),
    ],
)
def test_bad_arguments_are_refused_at_construction(kwargs: dict[str, Any], message: str):
    with pytest.raises(SinkConfigurationError, match=message):
        NumberSequenceSource(**kwargs)


SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def row(index: int) -> dict[str, Any]:
    return {"id": index, "name": f"user-{index * 7 % 13}"}


def test_the_generator_source_calls_the_function_once_per_index():
    """Flink's DataGeneratorSourceITCase#testParallelSourceExecution, restated."""
    engine = read_all(DataGeneratorSource(row, 500, SCHEMA, batch_size=32), 4)
    assert sorted(engine.committed, key=lambda r: r.record["id"])[0].record == row(0)
    assert values(engine, "id") == list(range(500))


def test_tuples_are_rows_in_the_schemas_order():
    engine = read_all(DataGeneratorSource(lambda i: (i, str(i)), 10, SCHEMA), 2)
    assert {record.record["name"] for record in engine.committed} == {str(i) for i in range(10)}


def test_the_generator_source_passes_the_kit_bounded_and_unbounded():
    check_source(
        lambda: DataGeneratorSource(row, 150, SCHEMA, batch_size=4, num_splits=5),
        expected=[row(i) for i in range(150)],
    )
    check_source(
        lambda: DataGeneratorSource(
            row, None, SCHEMA, batch_size=4, num_splits=2, records_per_second=100_000
        ),
        split_records=lambda split_id: map(row, itertools.count(int(split_id) - 1, 2)),
        records_to_read=120,
    )


def test_the_rate_limit_is_shared_by_the_readers():
    """Flink's DataGeneratorSourceITCase#testGatedRateLimiter, restated as a lower bound on time.

    200 rows at 1,000 rows/s over 2 readers cannot take less than about 0.2 s; a
    busy machine may make it take longer, never shorter.
    """
    source = DataGeneratorSource(row, 200, SCHEMA, records_per_second=1000, batch_size=50)
    started = time.monotonic()
    engine = read_all(source, 2)
    assert time.monotonic() - started >= 0.19
    assert values(engine, "id") == list(range(200))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"generator_function": 3}, "'generator_function' must be a callable"),
        ({"count": -1}, "'count' must be at least 0"),
        ({"schema": {"id": "long"}}, "'schema' must be a pyarrow.Schema"),
        ({"records_per_second": 0}, "'records_per_second' must be a positive number"),
        ({"records_per_second": True}, "'records_per_second' must be a positive number"),
    ],
)
def test_bad_generator_arguments_are_refused(kwargs: dict[str, Any], message: str):
    arguments: dict[str, Any] = {"generator_function": row, "count": 10, "schema": SCHEMA}
    arguments.update(kwargs)
    with pytest.raises(SinkConfigurationError, match=message):
        DataGeneratorSource(**arguments)


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda i: {"id": i}, r"generator_function\(0\) returned \{'id': 0\}"),
        (lambda i: (i,), r"a tuple of 2 values in that order"),
        (lambda i: {"id": i, "name": i} if i else (0, "x"), r"do not fit the schema"),
        (lambda i: {"id": i, "nmae": "x"}, r"exactly the keys \['id', 'name'\]"),
        (lambda i: {"id": i, ("nmae" if i == 3 else "name"): "x"}, r"generator_function\(3\)"),
        (lambda i: {"id": "one", "name": "x"}, r"do not fit the schema"),
    ],
)
def test_rows_that_do_not_fit_the_schema_are_named(function: Any, message: str):
    source = DataGeneratorSource(function, 4, SCHEMA)
    with pytest.raises(SinkConfigurationError, match=message):
        read_all(source, 1)


def test_the_kit_refuses_expected_records_that_are_not_dicts():
    with pytest.raises(TypeError, match="expected must hold records as dicts"):
        check_source(lambda: NumberSequenceSource(0, 3), expected=[0, 1, 2, 3])
