"""`LocalSourceEngine`: Flink's source runtime in one process, and the rules it enforces."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))

import flip27_fixtures
from flip27_fixtures import (  # the shared fixtures live beside the source tests
    ListEnumerator,
    ListEnumeratorState,
    ListSource,
    ListSourceReader,
    ListSplit,
)

from sinkv2.source import InputStatus, SourceContractError, SourceEvent
from sinkv2.testing import EngineStep, LocalSourceEngine
from sinkv2.testing._source_wiring import deal


def values(records: Any) -> list[int]:
    return sorted(record.record["value"] for record in records)


def test_the_same_seed_gives_the_same_run_for_a_source_without_threads():
    """Readers with fetcher threads add their own timing; the steps' order is the seed's."""
    from sinkv2.source.lib import NumberSequenceSource

    runs = []
    for _ in range(2):
        engine = LocalSourceEngine(NumberSequenceSource(0, 499, batch_size=9), 3, seed=11)
        engine.run(checkpoint_every=9)
        engine.finish()
        runs.append((list(engine.log), [r.record["value"] for r in engine.committed]))
    assert runs[0] == runs[1]


def test_nothing_is_committed_before_a_checkpoint_and_everything_after_finish():
    engine = LocalSourceEngine(ListSource(), 2)
    engine.run(until=lambda e: sum(s.emitted for s in e.readers) >= 30)
    assert engine.committed == []
    engine.run()
    assert engine.finished
    engine.finish()
    assert values(engine.committed) == list(range(120))


@pytest.mark.parametrize(("before", "after"), [(2, 5), (5, 2), (3, 1), (1, 4)])
def test_a_restore_with_another_parallelism_reads_each_record_once(before: int, after: int):
    engine = LocalSourceEngine(ListSource(), before, seed=before)
    engine.run(until=lambda e: sum(s.emitted for s in e.readers) >= 50)
    checkpoint = engine.checkpoint()
    first = list(engine.committed)
    engine.run(until=lambda e: sum(s.emitted for s in e.readers) >= 80)  # lost: not checkpointed
    engine.close()
    assert checkpoint.parallelism == before
    restored = LocalSourceEngine(ListSource(), after, seed=after, checkpoint=checkpoint)
    restored.run()
    restored.finish()
    assert values(first + restored.committed) == list(range(120))


def test_restored_splits_are_dealt_in_contiguous_runs():
    assert deal([b"a", b"b", b"c", b"d", b"e"], 2) == [[b"a", b"b", b"c"], [b"d", b"e"]]
    assert deal([b"a"], 3) == [[b"a"], [], []]


def test_a_failed_reader_gets_its_checkpointed_splits_and_the_enumerator_the_newer_ones():
    returned: list[tuple[list[str], int]] = []

    class Recording(ListEnumerator):
        def add_splits_back(self, splits: list[ListSplit], subtask_id: int) -> None:
            returned.append(([s.id for s in splits], subtask_id))
            super().add_splits_back(splits, subtask_id)

    class Source(ListSource):
        enumerator_class = Recording

    engine = LocalSourceEngine(Source(splits=8), 2, seed=4)
    engine.run(until=lambda e: sum(s.emitted for s in e.readers) >= 30)
    engine.checkpoint()
    engine.run(until=lambda e: bool(e.assigned_since_checkpoint()))
    failing = engine.assigned_since_checkpoint()[0]
    engine.fail_reader(failing)
    assert returned
    assert returned[-1][1] == failing
    engine.run()
    engine.finish()
    assert values(engine.committed) == list(range(160))


def test_assigning_to_an_unregistered_reader_is_refused():
    class Eager(ListEnumerator):
        def start(self) -> None:
            self.context.assign_split(self.remaining.popleft(), 0)

    class Source(ListSource):
        enumerator_class = Eager

    with pytest.raises(SourceContractError, match="subtask 0, which is not a registered reader"):
        LocalSourceEngine(Source(), 2)


def test_an_engine_that_fails_to_start_or_to_close_still_closes_everything_it_started():
    """What a source opens (a slot's lock, a connection) must not outlive a failed run."""
    closed: list[str] = []

    class Enumerator(ListEnumerator):
        def close(self) -> None:
            closed.append("enumerator")

    class Reader(ListSourceReader):
        def close(self) -> None:
            closed.append("reader")
            raise OSError("the reader's connection is gone")

    class Failing(ListSource):
        enumerator_class = Enumerator
        reader_class = Reader
        made = 0

        def create_reader(self, reader_context: Any) -> Any:
            self.made += 1
            if self.made == 2:
                raise RuntimeError("no second reader")
            return super().create_reader(reader_context)

    with pytest.raises(RuntimeError, match="no second reader"):
        LocalSourceEngine(Failing(), 2)
    assert closed == ["reader", "enumerator"]  # the first reader's close raised: still closed all

    closed.clear()

    class Closing(ListSource):
        enumerator_class = Enumerator
        reader_class = Reader

    engine = LocalSourceEngine(Closing(), 3)
    with pytest.raises(OSError, match="connection is gone"):
        engine.close()
    assert closed == ["reader", "reader", "reader", "enumerator"]
    engine.close()  # once
    assert len(closed) == 4


def test_assigning_after_no_more_splits_is_refused():
    class Late(ListEnumerator):
        def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
            self.context.signal_no_more_splits(subtask_id)
            if self.remaining:
                self.context.assign_split(self.remaining.popleft(), subtask_id)

    class Source(ListSource):
        enumerator_class = Late

    engine = LocalSourceEngine(Source(), 1)
    with pytest.raises(SourceContractError, match="after signal_no_more_splits"):
        engine.run()


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"other": 1}, "whose keys differ from get_produced_type"),
        (3, "a record is a dict keyed by get_produced_type"),
    ],
)
def test_a_record_that_does_not_match_the_schema_is_refused(record: Any, message: str):
    class Odd(ListSourceReader):
        def poll_next(self, output: Any) -> InputStatus:
            output.collect(record)
            return InputStatus.MORE_AVAILABLE

    class Source(ListSource):
        reader_class = Odd

    engine = LocalSourceEngine(Source(), 1)
    with pytest.raises(SourceContractError, match=message):
        engine.run()


def test_a_tuple_record_is_read_in_the_schemas_order():
    class Tuples(ListSourceReader):
        def poll_next(self, output: Any) -> InputStatus:
            output.collect((5,))
            return InputStatus.END_OF_INPUT

    class Source(ListSource):
        reader_class = Tuples

    engine = LocalSourceEngine(Source(), 1)
    with pytest.raises(SourceContractError, match="END_OF_INPUT before notify_no_more_splits"):
        engine.run()
    assert engine.readers[0].pending[0].record == {"value": 5}


def test_poll_next_and_is_available_must_return_what_flink_returns():
    class Wrong(ListSourceReader):
        def poll_next(self, output: Any) -> Any:
            return "MORE"

    class Source(ListSource):
        reader_class = Wrong

    with pytest.raises(SourceContractError, match="poll_next\\(\\) returned 'MORE'"):
        LocalSourceEngine(Source(), 1).run()

    class NoFuture(ListSourceReader):
        def is_available(self) -> Any:
            return True

    class Source2(ListSource):
        reader_class = NoFuture

    with pytest.raises(SourceContractError, match="is_available\\(\\) returned True"):
        LocalSourceEngine(Source2(), 1).run()


def test_emitting_through_the_output_of_a_split_never_given_is_refused():
    class Stray(ListSourceReader):
        def poll_next(self, output: Any) -> InputStatus:
            output.create_output_for_split("nobody").collect({"value": 1})
            return InputStatus.MORE_AVAILABLE

    class Source(ListSource):
        reader_class = Stray

    with pytest.raises(SourceContractError, match="output of split 'nobody'"):
        LocalSourceEngine(Source(), 1).run()


def test_a_batch_with_other_columns_is_refused():
    import pyarrow as pa

    class WrongBatch(ListSourceReader):
        def poll_next(self, output: Any) -> InputStatus:
            output.collect_batch(pa.record_batch([pa.array([1])], ["id"]))
            return InputStatus.MORE_AVAILABLE

    class Source(ListSource):
        reader_class = WrongBatch

    with pytest.raises(SourceContractError, match="with columns \\['id'\\] through collect_batch"):
        LocalSourceEngine(Source(), 1).run()


def test_one_split_in_two_snapshots_is_refused():
    engine = LocalSourceEngine(ListSource(), 2)
    engine.run(until=lambda e: all(s.given for s in e.readers))
    stolen = next(iter(engine.readers[0].given))
    engine.readers[1].given.add(stolen)
    reader = engine.readers[1].reader
    original = reader.snapshot_state
    reader.snapshot_state = lambda cp: [
        *original(cp),
        ListSplit(stolen, next(s.values for s in ListSource().splits if s.id == stolen)),
    ]
    with pytest.raises(SourceContractError, match=f"split '{stolen}' is in the snapshots"):
        engine.checkpoint()
    engine.close()


def test_timers_events_and_coordinator_tasks_reach_their_targets():
    @attrs.frozen
    class Hello(SourceEvent):
        text: str

    seen: list[str] = []

    class Chatty(ListEnumerator):
        def start(self) -> None:
            self.context.call_async(lambda: "listed", self.discovered, 100, 100)
            self.context.run_in_coordinator_thread(lambda: seen.append("task"))

        def discovered(self, result: Any, error: BaseException | None) -> None:
            seen.append(f"timer:{result}")

        def add_reader(self, subtask_id: int) -> None:
            self.context.send_event_to_source_reader(subtask_id, Hello("to reader"))

        def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
            seen.append(f"enumerator got {source_event.text}")  # type: ignore[attr-defined]

    class Polite(ListSourceReader):
        def handle_source_events(self, source_event: SourceEvent) -> None:
            seen.append(f"reader got {source_event.text}")  # type: ignore[attr-defined]
            self.context.send_source_event_to_coordinator(Hello("to enumerator"))

    class Source(ListSource):
        enumerator_class = Chatty
        reader_class = Polite

    engine = LocalSourceEngine(Source(splits=1, per_split=3), 1)
    engine.run()
    assert {"task", "reader got to reader", "enumerator got to enumerator"} <= set(seen)
    while not any(item.startswith("timer") for item in seen):
        assert engine.step() is EngineStep.FINISHED or True
        engine.clock_ms += 100
        engine.step()
    assert "timer:listed" in seen
    engine.finish()


def test_an_unbounded_source_with_nothing_to_read_goes_idle():
    class Waiting(ListEnumerator):
        def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
            pass  # new splits would come from discovery, which finds none

    class Source(ListSource):
        enumerator_class = Waiting

    engine = LocalSourceEngine(Source(), 1, idle_timeout=0.05)
    assert engine.run() is EngineStep.IDLE
    engine.close()


def test_the_enumerator_state_round_trips_or_the_engine_says_so():
    class Broken(ListSource):
        def get_enumerator_checkpoint_serializer(self) -> Any:
            inner = super().get_enumerator_checkpoint_serializer()

            class Lossy:
                def get_version(self) -> int:
                    return 1

                def serialize(self, obj: ListEnumeratorState) -> bytes:
                    return inner.serialize(ListEnumeratorState(obj.remaining[:1]))  # type: ignore[no-any-return]

                def deserialize(self, version: int, data: bytes) -> ListEnumeratorState:
                    return inner.deserialize(version, data)  # type: ignore[no-any-return]

            return Lossy()

    engine = LocalSourceEngine(Broken(splits=8), 1)
    with pytest.raises(SourceContractError, match="does not round-trip the enumerator checkpoint"):
        engine.checkpoint()
    engine.close()


class _SlowFirstFetch(flip27_fixtures.ListSplitReader):
    """The first fetch takes three idle timeouts (a cold start on a loaded machine)."""

    slept = False

    def fetch(self):
        if not _SlowFirstFetch.slept:
            _SlowFirstFetch.slept = True
            time.sleep(0.3)
        return super().fetch()


def test_a_bounded_run_waits_for_a_slow_fetch_instead_of_ending_idle(monkeypatch):
    """A reader holding splits of a bounded source is reading, not idle: run() goes on
    until END_OF_INPUT, so finish() does not fail it as a reader that never ended."""
    monkeypatch.setattr(_SlowFirstFetch, "slept", False)
    monkeypatch.setattr(flip27_fixtures, "ListSplitReader", _SlowFirstFetch)
    engine = LocalSourceEngine(ListSource(splits=2, per_split=5), 1, idle_timeout=0.1)
    assert engine.run() is EngineStep.FINISHED
    engine.finish()
    assert sorted(r.record["value"] for r in engine.committed) == list(range(10))
