"""`read_subtask`: one task's reader, given its splits, read to the end as exact Arrow batches."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))

from flip27_fixtures import ListSource, ListSourceReader

from sinkv2.runtime import ArrowBatchOutput, plan_bounded_read, read_subtask
from sinkv2.source import SourceContractError, SourceEvent
from sinkv2.source.lib import DataGeneratorSource, NumberSequenceSource


def read_all(
    source: Any, parallelism: int, schema: pa.Schema, **kwargs: Any
) -> list[pa.RecordBatch]:
    plan = plan_bounded_read(source, parallelism)
    return [
        batch
        for subtask, splits in enumerate(plan.splits)
        for batch in read_subtask(
            source,
            schema,
            subtask=subtask,
            parallelism=parallelism,
            splits=splits,
            events=plan.events[subtask],
            **kwargs,
        )
    ]


def values(batches: list[pa.RecordBatch], column: str = "value") -> list[Any]:
    return [v for batch in batches for v in batch.column(column).to_pylist()]


@pytest.mark.parametrize("arrow", [False, True], ids=["rows", "collect_batch"])
def test_every_record_of_every_split_once_in_the_asked_schema(arrow):
    source = ListSource(splits=5, per_split=7, arrow=arrow)
    schema = pa.schema([pa.field("value", pa.int64(), nullable=False)])
    batches = read_all(source, 2, schema, batch_rows=4)
    assert all(batch.schema.equals(schema) for batch in batches)
    assert sorted(values(batches)) == list(range(35))


def test_rows_become_batches_of_batch_rows():
    source = DataGeneratorSource(
        lambda i: {"id": i, "name": f"n{i}"},
        25,
        pa.schema([("id", pa.int64()), ("name", pa.string())]),
        batch_size=25,
        num_splits=1,
    )
    schema = source.get_produced_type()
    batches = read_all(source, 1, schema)
    assert values(batches, "name") == [f"n{i}" for i in range(25)]


def test_a_sequence_read_in_any_cut_is_the_whole_sequence_once():
    source = NumberSequenceSource(10, 1009, num_splits=7)
    schema = pa.schema([pa.field("value", pa.int64(), nullable=False)])
    assert sorted(values(read_all(source, 3, schema))) == list(range(10, 1010))


@settings(max_examples=25, deadline=None)
@given(
    length=st.integers(0, 2000),
    splits=st.integers(1, 8),
    parallelism=st.integers(1, 5),
    batch_rows=st.integers(1, 700),
)
def test_plan_then_read_gives_each_record_exactly_once(length, splits, parallelism, batch_rows):
    source = ListSource(splits=splits, per_split=length // splits)
    schema = pa.schema([("value", pa.int64())])
    got = values(read_all(source, parallelism, schema, batch_rows=batch_rows))
    assert sorted(got) == [r["value"] for r in source.expected()]


def output(schema: pa.Schema) -> ArrowBatchOutput:
    return ArrowBatchOutput(schema, batch_rows=100)


SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def test_dict_and_tuple_rows_are_both_records():
    out = output(SCHEMA)
    out.collect({"id": 1, "name": "a"})
    out.flush()
    out.collect((2, None))
    out.flush()
    assert [b.to_pylist() for b in out.take()] == [
        [{"id": 1, "name": "a"}],
        [{"id": 2, "name": None}],
    ]
    assert out.rows_out == 2


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": 1, "nme": "a"}, r"missing \['name'\]; unknown \['nme'\]"),
        ({"id": 1}, r"missing \['name'\]"),
        ((1,), "1 values for 2 columns"),
        ([1, "a"], "list is neither a dict nor a tuple"),
        ({"id": "x", "name": "a"}, "column 'id' does not fit the produced type int64"),
        ({"id": None, "name": "a"}, "column 'id' is declared not nullable"),
    ],
)
def test_a_record_that_does_not_fit_the_schema_is_named(row, message):
    out = output(SCHEMA)
    out.collect({"id": 0, "name": "fine"})
    out.collect(row)
    with pytest.raises(SourceContractError, match=message):
        out.flush()


def test_a_batch_is_conformed_to_the_schema_or_refused():
    out = output(SCHEMA)
    wide = pa.record_batch(
        {"id": pa.array([1], pa.int32()), "name": pa.array(["a"], pa.large_string())}
    )
    out.collect_batch(wide)
    (batch,) = out.take()
    assert batch.schema.equals(SCHEMA)
    with pytest.raises(SourceContractError, match=r"got columns \['name', 'id'\]"):
        out.collect_batch(pa.record_batch({"name": ["a"], "id": [1]}))
    with pytest.raises(SourceContractError, match="'id' is declared not nullable"):
        out.collect_batch(pa.record_batch({"id": pa.array([None], pa.int64()), "name": ["a"]}))
    with pytest.raises(SourceContractError, match="does not cast to the produced schema"):
        out.collect_batch(pa.record_batch({"id": ["x"], "name": ["a"]}))
    with pytest.raises(SourceContractError, match=r"pass a pyarrow\.RecordBatch"):
        out.collect_batch({"id": [1]})


class QuitterReader(ListSourceReader):
    """Says END_OF_INPUT at once, whatever splits it holds."""

    def poll_next(self, output: Any) -> Any:
        from sinkv2.source import InputStatus

        return InputStatus.END_OF_INPUT


class QuitterSource(ListSource):
    reader_class = QuitterReader


def test_a_reader_that_ends_with_unfinished_splits_is_an_error():
    with pytest.raises(SourceContractError, match=r"still holds 1 unfinished split"):
        read_all(QuitterSource(splits=1), 1, pa.schema([("value", pa.int64())]))


class ChattyReader(ListSourceReader):
    def handle_source_events(self, source_event: SourceEvent) -> None:
        self.context.send_source_event_to_coordinator(source_event)


class ChattySource(ListSource):
    reader_class = ChattyReader


def test_an_event_to_the_enumerator_during_a_bounded_read_is_refused_clearly():
    source = ChattySource(splits=1)
    plan = plan_bounded_read(source, 1)
    reading = read_subtask(
        source,
        pa.schema([("value", pa.int64())]),
        subtask=0,
        parallelism=1,
        splits=plan.splits[0],
        events=[SourceEvent()],
    )
    with pytest.raises(SourceContractError, match="cannot depend on events to the enumerator"):
        list(reading)


# -- what a task's error names (red team, wt96) ---------------------------------------


def test_a_record_that_does_not_fit_names_its_column_and_its_split():
    out = output(SCHEMA)
    out.create_output_for_split("s0").collect({"id": 0, "name": "fine"})
    out.create_output_for_split("s7").collect({"id": 1, "name": "fine"})
    out.create_output_for_split("s7").collect({"id": "x", "name": "a"})
    with pytest.raises(
        SourceContractError, match=r"column 'id'.*row 2 of a batch, from split 's7'"
    ):
        out.flush()
    out = output(SCHEMA)
    out.create_output_for_split("s0").collect({"id": 0, "name": "fine"})
    out.create_output_for_split("s3").collect({"id": None, "name": "a"})
    with pytest.raises(SourceContractError, match=r"'id' is declared not nullable.*split 's3'"):
        out.flush()
    out = output(SCHEMA)
    out.create_output_for_split("s5").collect({"id": 1})
    with pytest.raises(SourceContractError, match=r"of split 's5'.*missing") as raised:
        out.flush()
    assert raised.value.split_id == "s5"
    batch = pa.record_batch({"id": pa.array([None], pa.int64()), "name": ["a"]})
    with pytest.raises(SourceContractError, match=r"not nullable.*from split 's9'"):
        output(SCHEMA).create_output_for_split("s9").collect_batch(batch)


class BrokenReader(ListSourceReader):
    def poll_next(self, output: Any) -> Any:
        raise RuntimeError("the system under the reader is down")


class BrokenSource(ListSource):
    reader_class = BrokenReader


def test_a_reader_s_error_says_which_subtask_and_splits_it_read():
    source = BrokenSource(splits=4)
    plan = plan_bounded_read(source, 2)
    reading = read_subtask(
        source, pa.schema([("value", pa.int64())]), subtask=1, parallelism=2, splits=plan.splits[1]
    )
    with pytest.raises(RuntimeError, match="is down") as raised:
        list(reading)
    ids = [f"'s{i}'" for i in range(4)]
    (note,) = raised.value.__notes__
    assert note.startswith("(while subtask 1 of 2 read split(s) [")
    assert sum(i in note for i in ids) == len(plan.splits[1]) > 0


class StuckReader(ListSourceReader):
    """Waits once, on a future that only the warning about the wait completes."""

    waiting: Any = None

    def poll_next(self, output: Any) -> Any:
        from sinkv2.source import InputStatus

        if StuckReader.waiting is None:
            import concurrent.futures

            StuckReader.waiting = concurrent.futures.Future()
            return InputStatus.NOTHING_AVAILABLE
        return super().poll_next(output)

    def is_available(self) -> Any:
        return StuckReader.waiting


class StuckSource(ListSource):
    reader_class = StuckReader


def test_a_reader_that_waits_long_is_warned_about_naming_its_splits(monkeypatch, caplog):
    import logging

    from sinkv2.runtime import _source_task

    class Unblock(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            StuckReader.waiting.set_result(None)

    monkeypatch.setattr(_source_task, "WAIT_WARNING_S", 0.001)
    StuckReader.waiting = None
    handler = Unblock(logging.WARNING)
    logging.getLogger("sinkv2.source").addHandler(handler)
    try:
        with caplog.at_level(logging.WARNING, logger="sinkv2.source"):
            batches = read_all(
                StuckSource(splits=1, per_split=3), 1, pa.schema([("value", pa.int64())])
            )
    finally:
        logging.getLogger("sinkv2.source").removeHandler(handler)
    assert values(batches) == [0, 1, 2]
    (warning,) = caplog.messages
    assert "subtask 0 has waited" in warning
    assert "['s0']" in warning


class NoFutureReader(ListSourceReader):
    def poll_next(self, output: Any) -> Any:
        from sinkv2.source import InputStatus

        return InputStatus.NOTHING_AVAILABLE

    def is_available(self) -> Any:
        return None


class NoFutureSource(ListSource):
    reader_class = NoFutureReader


def test_an_is_available_that_returns_no_future_is_named():
    with pytest.raises(SourceContractError, match=r"is_available\(\) returned None"):
        read_all(NoFutureSource(splits=1), 1, pa.schema([("value", pa.int64())]))
