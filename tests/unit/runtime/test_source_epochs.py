"""The source coordinator: epochs recorded before they are read, replayed exactly, acked once.

Real SQLite stores under tmp_path; a restart is a new coordinator on the same store
(the old one closed, or abandoned as a killed driver leaves it). Records are read
back with `read_epoch_slice`, as a Spark task reads them.
"""

from __future__ import annotations

import itertools
import re
import shlex

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2._cli import main
from sinkv2.errors import CommitStateError, ConcurrentCommitError, SinkConfigurationError
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SourceOffset,
    SqliteCommitStateStore,
    check_streamable,
    read_epoch_slice,
)
from sinkv2.source import Boundedness, SourceContractError, SplitCut
from sinkv2.source.lib import NumberSequenceSource
from tests.unit.runtime.log_fixtures import LOGS, NOTIFIED, LogSource

_NAMES = itertools.count()


@pytest.fixture
def store(tmp_path):
    return SqliteCommitStateStore(tmp_path / "state.sqlite")


@pytest.fixture
def log():
    name = f"log{next(_NAMES)}"
    LOGS[name] = [[], [], []]
    yield name
    LOGS.pop(name, None)
    NOTIFIED.pop(name, None)


def coordinator(source, store, parallelism=2, source_id="src"):
    return SourceEpochCoordinator(source, store, source_id, parallelism=parallelism)


def rows(source, coord, epoch):
    schema = source.get_produced_type()
    out = []
    for piece in coord.slices(epoch):
        for batch in read_epoch_slice(source, schema, piece):
            out += batch.to_pylist()
    return out


def append(log, partition, count):
    values = LOGS[log][partition]
    base = partition * 1_000_000 + len(values)
    values.extend(range(base, base + count))


# -- epoch 0 and the offset ---------------------------------------------------------


def test_epoch_zero_is_recorded_once_and_is_the_same_on_every_call_and_run(store):
    source = NumberSequenceSource(1, 10)
    first = coordinator(source, store)
    assert first.initial_epoch() == first.initial_epoch() == 0
    first.close()
    again = coordinator(source, store)
    assert again.initial_epoch() == 0
    assert [r.epoch for r in store.source_epochs("src")] == [0]
    again.close()


def test_the_offset_is_a_small_pointer_and_refuses_another_source_id():
    offset = SourceOffset("orders", 7)
    assert offset.to_dict() == {"v": 1, "source_id": "orders", "epoch": 7}
    assert SourceOffset.from_dict(offset.to_dict(), source_id="orders") == offset
    with pytest.raises(SinkConfigurationError, match=r"'orders'.*'payments'"):
        SourceOffset.from_dict(offset.to_dict(), source_id="payments")
    with pytest.raises(SinkConfigurationError, match="not written by a sinkv2 source"):
        SourceOffset.from_dict({"pos": 3}, source_id="orders")


# -- a bounded source, split by split -----------------------------------------------


def test_a_bounded_source_is_read_split_by_split_within_the_limit_then_nothing(store):
    source = NumberSequenceSource(1, 100)
    coord = coordinator(source, store)
    start = coord.initial_epoch()
    seen = []
    while (end := coord.next_epoch(start, ReadLimit(max_splits=1))) != start:
        assert end == start + 1
        assert len([s for piece in coord.slices(end) for s in piece.splits]) == 1
        seen += [row["value"] for row in rows(source, coord, end)]
        start = end
    assert sorted(seen) == list(range(1, 101))
    assert start == 2
    coord.close()


def test_all_available_reads_every_split_of_a_bounded_source_in_one_epoch(store):
    source = NumberSequenceSource(1, 50)
    coord = coordinator(source, store, parallelism=3)
    assert coord.next_epoch(coord.initial_epoch(), ReadLimit()) == 1
    assert sorted(r["value"] for r in rows(source, coord, 1)) == list(range(1, 51))
    assert coord.next_epoch(1, ReadLimit()) == 1
    coord.close()


# -- replay and restart -------------------------------------------------------------


def test_a_replay_after_a_restart_reads_exactly_what_the_first_run_planned(store, log):
    source = LogSource(log)
    append(log, 0, 5)
    append(log, 1, 3)
    coord = coordinator(source, store)
    assert coord.next_epoch(coord.initial_epoch(), ReadLimit()) == 1
    first = rows(source, coord, 1)
    coord.close()
    append(log, 0, 10)  # more data since: the replay must not see it
    again = coordinator(source, store)
    assert rows(source, again, 1) == first
    assert len(first) == 8
    again.close()


def test_an_epoch_recorded_before_a_crash_but_never_logged_is_the_next_epoch_again(store, log):
    source = LogSource(log)
    append(log, 0, 4)
    crashed = coordinator(source, store)
    assert crashed.next_epoch(crashed.initial_epoch(), ReadLimit()) == 1
    planned = rows(source, crashed, 1)
    crashed._lease.release()  # the driver died after recording epoch 1
    append(log, 0, 4)
    restarted = coordinator(source, store)
    assert restarted.next_epoch(0, ReadLimit()) == 1
    assert rows(source, restarted, 1) == planned
    assert restarted.next_epoch(1, ReadLimit()) == 2
    assert [r["value"] for r in rows(source, restarted, 2)] == [4, 5, 6, 7]
    restarted.close()


def test_a_restart_goes_on_from_the_committed_epoch_with_nothing_lost_or_repeated(store, log):
    source = LogSource(log)
    coord = coordinator(source, store)
    start = coord.initial_epoch()
    seen = []
    for round_ in range(6):
        append(log, round_ % 3, 3)
        end = coord.next_epoch(start, ReadLimit(max_records=4))
        seen += rows(source, coord, end)
        start = end
        if round_ % 2:
            coord.close()
            coord = coordinator(source, store, parallelism=1 + round_ % 3)
    while (end := coord.next_epoch(start, ReadLimit())) != start:
        seen += rows(source, coord, end)
        start = end
    expected = [{"partition": p, "value": v} for p, part in enumerate(LOGS[log]) for v in part]
    assert sorted(seen, key=lambda r: (r["partition"], r["value"])) == expected
    coord.close()


# -- the limit, cut split by split ---------------------------------------------------


def test_max_records_cuts_unbounded_splits_and_the_rest_goes_on_next_epoch(store, log):
    source = LogSource(log)
    append(log, 0, 10)
    coord = coordinator(source, store, parallelism=1)
    start = coord.initial_epoch()
    sizes = []
    while (end := coord.next_epoch(start, ReadLimit(max_records=4))) != start:
        sizes.append(len(rows(source, coord, end)))
        assert all(piece.records == sizes[-1] for piece in coord.slices(end))
        start = end
    assert sizes == [4, 4, 2]
    coord.close()


# -- acknowledgement ----------------------------------------------------------------


def test_an_epoch_is_acknowledged_once_when_the_next_is_asked_and_older_ones_pruned(store, log):
    source = LogSource(log)
    coord = coordinator(source, store)
    start = coord.initial_epoch()
    for _ in range(3):
        append(log, 0, 2)
        start = coord.next_epoch(start, ReadLimit())
    coord.acknowledge(3)  # the engine's own, late commit of the last epoch
    coord.acknowledge(3)
    assert NOTIFIED[log] == [1, 2, 3]
    assert [r.epoch for r in store.source_epochs("src")] == [2, 3]
    coord.close()
    restarted = coordinator(source, store)
    assert restarted.next_epoch(3, ReadLimit()) == 3
    assert NOTIFIED[log] == [1, 2, 3]
    restarted.close()


# -- refusals -----------------------------------------------------------------------


def test_a_second_query_on_the_same_source_id_is_refused_before_it_plans(store, log):
    first = coordinator(LogSource(log), store)
    first.initial_epoch()
    second = coordinator(LogSource(log), store)
    with pytest.raises(ConcurrentCommitError):
        second.initial_epoch()
    first.close()


def test_a_store_without_the_logged_epoch_is_a_clear_error_never_a_restart(store, tmp_path, log):
    coord = coordinator(LogSource(log), store)
    append(log, 0, 1)
    coord.next_epoch(coord.initial_epoch(), ReadLimit())
    coord.close()
    other = coordinator(LogSource(log), SqliteCommitStateStore(tmp_path / "other.sqlite"))
    with pytest.raises(CommitStateError, match="epoch 1 of source id 'src'"):
        other.slices(1)
    with pytest.raises(CommitStateError, match="epoch 1 of source id 'src'"):
        other.next_epoch(1, ReadLimit())
    other.close()


def test_a_new_checkpoint_on_a_pruned_history_is_refused(store, log):
    coord = coordinator(LogSource(log), store)
    start = coord.initial_epoch()
    for _ in range(2):
        append(log, 1, 1)
        start = coord.next_epoch(start, ReadLimit())
    coord.next_epoch(start, ReadLimit())
    coord.close()
    fresh = coordinator(LogSource(log), store)
    with pytest.raises(CommitStateError, match="forget-source") as refused:
        fresh.initial_epoch()
    fresh.close()
    # the command the message gives runs as written, and then a new checkpoint may start
    command = re.search(r"`sinkv2 (state forget-source [^`]+)`", str(refused.value))
    assert command is not None, str(refused.value)
    assert main(shlex.split(command.group(1))) == 0
    again = coordinator(LogSource(log), store)
    assert again.initial_epoch() == 0
    again.close()


def test_an_unbounded_source_without_end_positions_is_refused():
    class Unbounded(NumberSequenceSource):
        def get_boundedness(self):
            return Boundedness.CONTINUOUS_UNBOUNDED

    with pytest.raises(SourceContractError, match="SupportsEndPositions"):
        check_streamable(Unbounded(1, 5))


def test_a_reader_that_reads_past_its_stop_fails_the_task_naming_the_split(store, log):
    class Greedy(LogSource):
        def cut_split(self, split, end, max_records):
            cut = super().cut_split(split, end, max_records)
            return SplitCut(cut.read, cut.rest, (cut.records or 0) - 1 if cut.read else 0)

    source = Greedy(log)
    append(log, 0, 3)
    coord = coordinator(source, store)
    coord.next_epoch(coord.initial_epoch(), ReadLimit())
    with pytest.raises(SourceContractError, match=r"\['p0'\].*read past its stop"):
        rows(source, coord, 1)
    coord.close()


def test_a_cut_over_the_limit_is_refused(store, log):
    class Overfull(LogSource):
        def cut_split(self, split, end, max_records):
            return super().cut_split(split, end, None)

    append(log, 0, 9)
    coord = coordinator(Overfull(log), store)
    with pytest.raises(SourceContractError, match="at most 2 record"):
        coord.next_epoch(coord.initial_epoch(), ReadLimit(max_records=2))
    coord.close()


@pytest.mark.parametrize("part", ["read", "rest"])
def test_a_cut_whose_part_is_another_split_is_refused(store, log, part):
    class Renaming(LogSource):
        def cut_split(self, split, end, max_records):
            cut = super().cut_split(split, end, max_records)
            other = attrs.evolve(getattr(cut, part), partition=split.partition + 1)
            return attrs.evolve(cut, **{part: other})

    append(log, 0, 3)
    coord = coordinator(Renaming(log), store)
    with pytest.raises(SourceContractError, match=f"whose {part} is split 'p1'"):
        coord.next_epoch(coord.initial_epoch(), ReadLimit())
    coord.close()


@pytest.mark.parametrize("call", ["start", "snapshot_state"])
def test_an_enumerator_s_own_error_names_the_call_and_the_source(store, log, call):
    class Failing(LogSource):
        def create_enumerator(self, context):
            enumerator = super().create_enumerator(context)

            def fail(*args):
                raise OSError("the listing service is down")

            setattr(enumerator, call, fail)
            return enumerator

    append(log, 0, 3)
    coord = coordinator(Failing(log), store, source_id="orders")
    with pytest.raises(OSError, match="the listing service is down") as raised:
        coord.next_epoch(coord.initial_epoch(), ReadLimit())
    coord.close()
    assert f"raised by the split enumerator's {call}() " in "\n".join(raised.value.__notes__)
    assert "source 'orders'" in raised.value.__notes__[-1]


# -- exactly once under random schedules ---------------------------------------------


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 2),  # partition to append to
            st.integers(0, 5),  # how many
            st.sampled_from([None, 1, 3]),  # max records
            st.sampled_from(["go", "restart", "crash", "replay"]),
            st.integers(1, 4),  # parallelism after a restart
        ),
        max_size=12,
    )
)
def test_every_record_is_read_once_under_random_limits_restarts_crashes_and_replays(
    tmp_path_factory, steps
):
    log = f"prop{next(_NAMES)}"
    LOGS[log] = [[], [], []]
    store = SqliteCommitStateStore(tmp_path_factory.mktemp("p") / "s.sqlite")
    source = LogSource(log)
    coord = coordinator(source, store)
    committed = coord.initial_epoch()
    seen: list[dict[str, int]] = []
    try:
        for partition, count, max_records, what, parallelism in steps:
            append(log, partition, count)
            end = coord.next_epoch(committed, ReadLimit(max_records=max_records))
            batch = rows(source, coord, end) if end != committed else []
            if what == "crash":  # planned, never committed: the batch is lost and replayed
                coord._lease.release()
                coord = coordinator(source, store, parallelism=parallelism)
                if end != committed:
                    assert rows(source, coord, end) == batch
                continue
            seen += batch
            planned, committed = end != committed, end
            if what == "restart":
                coord.close()
                coord = coordinator(source, store, parallelism=parallelism)
            elif what == "replay" and planned:  # no new epoch: nothing to replay
                assert rows(source, coord, end) == batch
        while (end := coord.next_epoch(committed, ReadLimit())) != committed:
            seen += rows(source, coord, end)
            committed = end
        expected = [{"partition": p, "value": v} for p, part in enumerate(LOGS[log]) for v in part]
        assert sorted(seen, key=lambda r: (r["partition"], r["value"])) == expected
    finally:
        coord.close()
        LOGS.pop(log, None)
        NOTIFIED.pop(log, None)


def test_a_busy_split_cannot_keep_the_others_waiting_under_a_record_limit(store, log):
    source = LogSource(log)
    append(log, 1, 6)
    append(log, 2, 6)
    coord = coordinator(source, store, parallelism=1)
    start = coord.initial_epoch()
    read_of = {1: 0, 2: 0}
    for _ in range(4):
        append(log, 0, 10)  # partition 0 always has more than the limit
        start = coord.next_epoch(start, ReadLimit(max_records=4))
        got = rows(source, coord, start)
        assert len(got) <= 4
        for row in got:
            read_of[row["partition"]] = read_of.get(row["partition"], 0) + 1
    assert read_of[1] > 0
    assert read_of[2] > 0
    coord.close()


# -- a new checkpoint, a forgetful enumerator (red team, wt96) ------------------------


def test_a_new_checkpoint_after_a_run_that_read_epoch_one_is_refused(store):
    """trigger(once=True) ends after epoch 1 with epoch 0 kept: a new checkpoint must not reread."""
    source = NumberSequenceSource(1, 10)
    first = coordinator(source, store)
    end = first.next_epoch(first.initial_epoch(), ReadLimit())
    assert sorted(r["value"] for r in rows(source, first, end)) == list(range(1, 11))
    first.slices(end, start=0)  # Spark plans the micro-batch once its offsets are logged
    first.close()  # the run ends: no latestOffset(start=1), no commit(1)
    fresh = coordinator(source, store)  # a new checkpoint location
    assert fresh.initial_epoch() == 0
    with pytest.raises(CommitStateError, match=r"'src' was read before, up to epoch 1"):
        fresh.next_epoch(0, ReadLimit())
    fresh.close()


def test_the_same_checkpoint_replays_epoch_one_before_and_after_it_was_logged(store):
    source = NumberSequenceSource(1, 10)
    first = coordinator(source, store)
    end = first.next_epoch(first.initial_epoch(), ReadLimit())
    first.close()  # killed before Spark logged the offsets: the epoch is planned again
    again = coordinator(source, store)
    assert again.next_epoch(again.initial_epoch(), ReadLimit()) == end
    again.slices(end, start=0)
    again.close()  # killed after: Spark replays the micro-batch from its log
    replay = coordinator(source, store)
    assert replay.initial_epoch() == 0
    assert sorted(r["value"] for r in rows(source, replay, end)) == list(range(1, 11))
    replay.slices(end, start=0)
    assert replay.next_epoch(end, ReadLimit()) == end
    replay.close()


class ForgetfulSequence(NumberSequenceSource):
    """Restores its enumerator from nothing: it hands out splits readers still hold."""

    def restore_enumerator(self, enum_context, checkpoint):
        return self.create_enumerator(enum_context)


def test_a_restored_enumerator_assigning_a_split_a_reader_holds_is_refused(store):
    source = ForgetfulSequence(1, 40)
    first = coordinator(source, store)
    end = first.next_epoch(first.initial_epoch(), ReadLimit(max_splits=1))  # one split waits
    first.close()
    again = coordinator(source, store)
    with pytest.raises(SourceContractError, match="assigned twice") as raised:
        again.next_epoch(end, ReadLimit())
    assert raised.value.split_id is not None
    again.close()
