"""A record limit bounds a FileSource stream: Parquet splits cut at a row, JSON lines read whole.

Engine-neutral (no Spark): epochs are planned with `SourceEpochCoordinator` as Spark's
stream reader asks for them (``maxRecordsPerTrigger`` is ``ReadLimit.max_records``)
and each epoch's slices read with `read_epoch_slice`. A "restart" is a new
coordinator over a new source on the same store. On Spark, the read door's
``maxRecordsPerTrigger`` is checked in ``test_file_source_spark_stream`` (with the
clean-up, in the same query).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_sinks._row_cut import COUNT_WHEN_CUT
from reference_sinks.files import FileSource
from reference_sinks.files._source_listing import make_splits
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from sinkv2.source import SourceContractError
from tests.reference_sinks.files.file_source_data import rows, write_jsonl, write_parquet


class Run:
    """One query run: a coordinator over a fresh source, and the rows each epoch reads."""

    def __init__(self, make: Any, store: Any, parallelism: int) -> None:
        self.source = make()
        self.coordinator = SourceEpochCoordinator(
            self.source, store, "files", parallelism=parallelism
        )

    def ids_of(self, epoch: int) -> list[int]:
        schema = self.source.get_produced_type()
        return [
            row["id"]
            for piece in self.coordinator.slices(epoch)
            for batch in read_epoch_slice(self.source, schema, piece, batch_rows=5)
            for row in batch.to_pylist()
        ]

    def close(self) -> None:
        self.coordinator.close()


def stream(
    make: Any, store: Any, parallelism: int, actions: list[tuple[Any, ...]], drain_limit: int
) -> dict[int, tuple[int, list[int]]]:
    """Plan and read epochs (restarting when told), then drain: each epoch's limit and ids."""
    run = Run(make, store, parallelism)
    epochs: dict[int, tuple[int, list[int]]] = {}
    epoch = run.coordinator.initial_epoch()

    def step(limit: int) -> bool:
        nonlocal epoch
        end = run.coordinator.next_epoch(epoch, ReadLimit(max_records=limit))
        if end == epoch:
            return False
        epochs[end] = (limit, run.ids_of(end))
        assert run.ids_of(end) == epochs[end][1]  # read again: the same rows
        epoch = end
        return True

    for action in actions:
        if action[0] == "restart":
            run.close()
            run = Run(make, store, parallelism)
            if epoch in epochs:  # a replay after a restart reads the same rows
                assert run.ids_of(epoch) == epochs[epoch][1]
        else:
            step(action[1])
    for _ in range(200):
        if not step(drain_limit):
            break
    else:
        raise AssertionError("200 epochs after the last action still read something")
    run.close()
    return epochs


FILES = st.lists(
    st.tuples(st.integers(0, 30), st.sampled_from([3, 7, 100])), min_size=1, max_size=5
)
ACTIONS = st.lists(
    st.one_of(st.tuples(st.just("epoch"), st.sampled_from([1, 4, 11])), st.just(("restart",))),
    max_size=8,
)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    files=FILES,
    split_bytes=st.sampled_from([1, 1 << 30]),
    parallelism=st.integers(1, 3),
    actions=ACTIONS,
    limit=st.sampled_from([1, 6, 25]),
)
def test_a_record_limit_bounds_every_parquet_epoch_and_every_row_is_read_once(
    files: list[tuple[int, int]],
    split_bytes: int,
    parallelism: int,
    actions: list[tuple[Any, ...]],
    limit: int,
) -> None:
    """Parquet files of any size (empty, one row group, row-group splits with ``split_bytes=1``):
    each epoch holds at most its limit, replays read the same rows (after a restart too), and
    the epochs together hold every row once."""
    directory = Path(tempfile.mkdtemp())
    first, everything = 0, []
    for index, (count, group_rows) in enumerate(files):
        write_parquet(directory / f"f{index}.parquet", rows(first, count), group_rows)
        everything += list(range(first, first + count))
        first += count
    store = SqliteCommitStateStore(directory / "state.sqlite")

    def make() -> FileSource:
        return FileSource(directory, split_bytes=split_bytes, batch_rows=4)

    epochs = stream(make, store, parallelism, actions, limit)
    got = [i for e in sorted(epochs) for i in epochs[e][1]]
    assert sorted(got) == everything
    assert len(got) == len(set(got))
    for epoch, (most, ids) in epochs.items():
        assert len(ids) <= most, (epoch, most, ids)


def test_each_epoch_holds_at_most_its_own_limit_and_a_file_goes_on_from_its_cut(
    tmp_path: Path,
) -> None:
    write_parquet(tmp_path / "a.parquet", rows(0, 10), 3)
    write_parquet(tmp_path / "b.parquet", rows(10, 5), 3)
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    run = Run(lambda: FileSource(tmp_path), store, 1)
    epoch = run.coordinator.initial_epoch()
    sizes = []
    for limit in (4, 4, 1, 100, 100):
        step = run.coordinator.next_epoch(epoch, ReadLimit(max_records=limit))
        if step == epoch:
            break
        ids = run.ids_of(step)
        assert len(ids) <= limit
        assert all(piece.records == len(ids) for piece in run.coordinator.slices(step))
        sizes.append(len(ids))
        epoch = step
    run.close()
    assert sizes == [4, 4, 1, 6]  # a: 0-3, 4-7, 8, then 9 and all of b


def test_json_lines_files_are_read_whole_and_not_counted(tmp_path: Path) -> None:
    """Not counted on the driver (that is a read of every file): each file whole, in one epoch.

    A limit smaller than every file stalls nothing: no split can be cut, so the epoch
    admits the files whole (a whole split is not counted; every epoch admits at least one
    read), and the next epoch finds nothing left. The source says so before listing
    (`uncounted_splits`), for the stream's warning at the start of a query."""
    write_jsonl(tmp_path / "a.jsonl", rows(0, 9))
    write_jsonl(tmp_path / "b.jsonl", rows(9, 3))
    source = FileSource(tmp_path, "jsonl", schema=pa.schema(rows_schema()))
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    coordinator = SourceEpochCoordinator(source, store, "files", parallelism=1)
    epoch = coordinator.initial_epoch()
    end = coordinator.next_epoch(epoch, ReadLimit(max_records=2))
    (piece,) = coordinator.slices(end)
    assert piece.records is None  # not counted: the limit does not bound it
    schema = source.get_produced_type()
    read = [r["id"] for b in read_epoch_slice(source, schema, piece) for r in b.to_pylist()]
    assert read == list(range(12))
    assert coordinator.next_epoch(end, ReadLimit(max_records=2)) == end  # all read: no epoch
    coordinator.close()
    assert "JSON lines files are read whole" in (source.uncounted_splits() or "")


def test_a_cut_tells_its_rows_stops_exactly_and_is_never_read_natively(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", rows(0, 10), 4)
    source = FileSource(tmp_path)
    (split,) = _splits(source)
    (end,) = source.end_positions([split])
    assert end == COUNT_WHEN_CUT  # a small file: its footer is read only when a limit cuts it
    whole = source.cut_split(split, end, None)
    assert (whole.read, whole.rest, whole.records) == (split, None, None)
    cut = source.cut_split(split, end, 7)
    assert cut.records == 7
    assert cut.read is not None
    assert cut.rest is not None
    assert source.cut_split(split, end, 7) == cut  # the same split and end: the same cut
    assert [r["id"] for b in source._read(cut.read) for r in b.to_pylist()] == list(range(7))
    assert source.end_positions([cut.rest]) == [10]  # counted once, carried by the rest
    last = source.cut_split(cut.rest, 10, 7)
    assert (last.records, last.rest) == (3, None)
    assert last.read is not None
    assert [r["id"] for b in source._read(last.read) for r in b.to_pylist()] == [7, 8, 9]
    reason = source.native_read([cut.read])
    assert "stops at record 7" in getattr(reason, "reason", "")
    with pytest.raises(SourceContractError, match="already stops at record 7"):
        source.cut_split(cut.read, 10, 1)
    with pytest.raises(SourceContractError, match="holds 10 record"):
        source.cut_split(split.at(11), end, 1)


def rows_schema() -> list[tuple[str, pa.DataType]]:
    return [("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())]


def _splits(source: FileSource) -> list[Any]:
    fs, root = source.resolve()
    return [
        s for status in source._list(fs, root) for s in make_splits(fs, status, "parquet", 1 << 30)
    ]
