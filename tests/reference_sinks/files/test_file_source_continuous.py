"""FileSource, continuous: discovery, exactly-once under restores, half-written files, clean-up."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinkv2.runtime._source_epochs as epochs
from reference_sinks.files import FileSource
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from sinkv2.testing import LocalSourceEngine, SourceCheckpoint, check_source
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    rows,
    touch_old,
    write_jsonl,
    write_parquet,
)

INTERVAL_MS = 1000


def monitored(path: Path, batch_rows: int = 8192, **kwargs: Any) -> FileSource:
    source = FileSource(path, schema=SCHEMA, batch_rows=batch_rows)
    return source.monitor_continuously(INTERVAL_MS / 1000, **kwargs)


def run_to(engine: LocalSourceEngine, clock_ms: int) -> None:
    """Step until the engine's clock reaches ``clock_ms``: every listing due before it ran."""
    engine.run(until=lambda e: e.clock_ms >= clock_ms)


def committed_ids(records: Any) -> list[int]:
    return sorted(record.record["id"] for record in records)


def test_files_present_at_start_pass_the_source_kit(tmp_path: Path):
    by_path: dict[str, list[dict[str, Any]]] = {}
    for index in range(5):
        path = write_parquet(tmp_path / f"day={index}" / "part.parquet", rows(index * 12, 12))
        by_path[str(path)] = [{**r, "day": index} for r in rows(index * 12, 12)]
    check_source(
        lambda: FileSource(tmp_path, batch_rows=5).monitor_continuously(1),
        split_records=lambda split_id: by_path[split_id],
        records_to_read=60,
    )


def test_a_file_is_read_once_two_listings_saw_it_unchanged(tmp_path: Path):
    path = write_jsonl(tmp_path / "a.jsonl", rows(0, 2))
    source = FileSource(tmp_path, "jsonl", schema=SCHEMA).monitor_continuously(1)
    engine = LocalSourceEngine(source, 2)
    run_to(engine, 1000)  # the listing at 0 saw it once: not read
    engine.checkpoint()
    assert engine.committed == []
    with path.open("a", encoding="utf-8") as still_writing:  # it grows between listings
        still_writing.write('{"id": 2, "name": "x", "score": 0.5}\n')
    run_to(engine, 2000)  # the listing at 1000 saw another size: not read
    engine.checkpoint()
    assert engine.committed == []
    run_to(engine, 3000)  # the listing at 2000 saw it unchanged: read, whole
    engine.run(until=lambda e: sum(len(slot.pending) for slot in e.readers) >= 3)
    engine.checkpoint()
    assert committed_ids(engine.committed) == [0, 1, 2]
    engine.close()


def test_hidden_and_in_progress_names_are_never_read_until_renamed(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet.inprogress", rows(0, 3))
    write_parquet(tmp_path / "b.parquet.tmp", rows(10, 3))
    write_parquet(tmp_path / ".c.parquet", rows(20, 3))
    write_parquet(tmp_path / "_temporary" / "d.parquet", rows(30, 3))
    engine = LocalSourceEngine(monitored(tmp_path), 2)
    run_to(engine, 5000)
    engine.checkpoint()
    assert engine.committed == []
    os.rename(tmp_path / "b.parquet.tmp", tmp_path / "b.parquet")
    engine.run(until=lambda e: len(e.committed) >= 3, checkpoint_every=5)
    assert committed_ids(engine.committed) == [10, 11, 12]
    engine.close()


@st.composite
def schedules(draw: st.DrawFn) -> list[tuple[str, int]]:
    op = st.one_of(
        st.tuples(st.just("write"), st.integers(0, 9)),
        st.tuples(st.just("steps"), st.integers(1, 40)),
        st.tuples(st.just("checkpoint"), st.just(0)),
        st.tuples(st.just("fail"), st.integers(0, 2)),
        st.tuples(st.just("restore"), st.integers(1, 3)),
    )
    return draw(st.lists(op, max_size=16))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=schedules(), seed=st.integers(0, 2**16))
def test_files_arriving_while_it_runs_are_read_exactly_once_through_restores(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[str, int]], seed: int
):
    """Hypothesis chooses when files arrive, checkpoints, reader failures and restores."""
    base = tmp_path_factory.mktemp("arrivals")
    written: list[int] = []
    committed: list[Any] = []
    last: SourceCheckpoint | None = None
    engine = LocalSourceEngine(monitored(base, batch_rows=3), 2, seed=seed)
    try:
        for index, (kind, value) in enumerate(plan):
            if kind == "write":
                first = len(written)
                write_parquet(base / f"f{index:03}.parquet", rows(first, value))
                written += range(first, first + value)
            elif kind == "steps":
                for _ in range(value):
                    engine.step()
            elif kind == "checkpoint":
                last = engine.checkpoint()
            elif kind == "fail":
                engine.fail_reader(value % engine.parallelism)
            else:
                committed += engine.committed
                engine.close()
                engine = LocalSourceEngine(
                    monitored(base, batch_rows=3), value, seed=seed + index, checkpoint=last
                )
        target = len(written)
        engine.run(
            until=lambda e: len(committed) + len(e.committed) >= target,
            checkpoint_every=7,
            max_steps=20_000,
        )
        engine.checkpoint()
        committed += engine.committed
    finally:
        engine.close()
    assert committed_ids(committed) == written


def test_max_file_age_ignores_old_files_and_bounds_the_processed_set(tmp_path: Path):
    old = write_parquet(tmp_path / "old.parquet", rows(0, 2))
    touch_old(old, 3 * 3600)
    touch_old(write_parquet(tmp_path / "new.parquet", rows(10, 2)), 2 * 3600)
    engine = LocalSourceEngine(monitored(tmp_path, max_file_age=60), 1)
    engine.run(until=lambda e: len(e.committed) >= 2, checkpoint_every=5)
    assert committed_ids(engine.committed) == [10, 11]
    processed = [path for path, _ in engine.enumerator.snapshot_state(99).processed]
    assert [Path(p).name for p in processed] == ["new.parquet"]
    # two hours newer (now: a file dated in the future counts as now): new.parquet falls
    write_parquet(tmp_path / "newer.parquet", rows(20, 2))  # behind the cut-off
    engine.run(until=lambda e: len(e.committed) >= 4, checkpoint_every=5)
    assert committed_ids(engine.committed) == [10, 11, 20, 21]
    processed = [path for path, _ in engine.enumerator.snapshot_state(100).processed]
    assert [Path(p).name for p in processed] == ["newer.parquet"]
    engine.close()


def archived_ids(archive: Path) -> list[int]:
    return sorted(
        i for path in archive.rglob("*.parquet") for i in pq.read_table(path)["id"].to_pylist()
    )


@pytest.mark.parametrize("seed", range(12))
def test_clean_up_archives_a_file_only_after_the_checkpoint_that_read_it(tmp_path: Path, seed: int):
    """At every step, through failures and restores: an archived file's records are committed."""
    base, archive = tmp_path / "in", tmp_path / "archive"
    total = 0
    for index in range(6):
        write_parquet(base / f"k={index % 2}" / f"f{index}.parquet", rows(total, 5 + index))
        total += 5 + index

    def source() -> FileSource:
        return FileSource(base, batch_rows=2).monitor_continuously(
            1, clean_source="archive", archive_dir=archive
        )

    committed: list[Any] = []
    last = None
    engine = LocalSourceEngine(source(), 3, seed=seed)
    try:
        for step in range(4000):
            if len(committed) + len(engine.committed) >= total and step % 9 == 0:
                break
            engine.step()
            if step % 13 == 12:
                last = engine.checkpoint()
            if step % 101 == 50:
                engine.fail_reader(step % 3)
            if step % 257 == 200:
                committed += engine.committed
                engine.close()
                engine = LocalSourceEngine(
                    source(), 1 + step % 3, seed=seed + step, checkpoint=last
                )
            done = Counter(committed_ids(committed + list(engine.committed)))
            for record_id in archived_ids(archive):
                assert done[record_id] == 1, f"archived id {record_id} is not committed"
        engine.checkpoint()  # commits the rest; readers report what it holds when it completes
        for _ in range(200):  # their reports reach the enumerator, which archives
            engine.step()
        committed += engine.committed
    finally:
        engine.close()
    assert committed_ids(committed) == list(range(total))
    # A report lost with a failed reader leaves its file in place (never removed early).
    left = sorted(i for p in base.rglob("*.parquet") for i in pq.read_table(p)["id"].to_pylist())
    assert sorted(archived_ids(archive) + left) == list(range(total))
    assert {p.relative_to(archive).parts[0] for p in archive.rglob("*.parquet")} <= {"k=0", "k=1"}


def test_clean_up_deletes_files_only_after_a_completed_checkpoint(tmp_path: Path):
    ids_of = {
        tmp_path / f"f{index}.parquet": set(range(index * 4, index * 4 + 4)) for index in range(3)
    }
    for path, ids in ids_of.items():
        write_parquet(path, rows(min(ids), len(ids)))
    source = FileSource(tmp_path).monitor_continuously(1, clean_source="delete")
    engine = LocalSourceEngine(source, 2)
    try:
        engine.run(until=lambda e: sum(len(slot.pending) for slot in e.readers) >= 12)
        for _ in range(50):
            engine.step()
        assert len(list(tmp_path.glob("*.parquet"))) == 3  # read, not yet committed
        # A reader learns a split ended on its fetcher thread, so the checkpoint whose
        # completion reports it comes when that thread gets to run: checkpoint until every
        # file is gone, checking at every step that no file went before its records.
        deadline = time.monotonic() + 60
        while any(path.exists() for path in ids_of) and time.monotonic() < deadline:
            engine.checkpoint()
            for _ in range(50):
                engine.step()
                committed = set(committed_ids(engine.committed))
                for path, ids in ids_of.items():
                    assert path.exists() or ids <= committed, f"{path.name} removed uncommitted"
            time.sleep(0.01)  # the fetcher threads' turn
        assert committed_ids(engine.committed) == list(range(12))
        assert list(tmp_path.glob("*.parquet")) == []
    finally:
        engine.close()


def test_available_now_reads_a_file_written_just_before_it_under_a_long_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Monitoring every minute, a file written a moment ago is stable only once a second
    # listing saw it unchanged: an available-now run lists again after SETTLE_S at most,
    # as Spark's available-now reads every file there at its start.
    monkeypatch.setattr(epochs, "SETTLE_S", 0.2)
    (tmp_path / "in").mkdir()
    write_parquet(tmp_path / "in" / "fresh.parquet", rows(0, 7))
    source = FileSource(tmp_path / "in", schema=SCHEMA).monitor_continuously(60)
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    coordinator = SourceEpochCoordinator(source, store, "fresh", parallelism=1)
    try:
        coordinator.prepare_available_now()
        start = coordinator.initial_epoch()
        end = coordinator.next_epoch(start, ReadLimit())
        assert end == start + 1
        read = [
            row
            for piece in coordinator.slices(end)
            for batch in read_epoch_slice(source, source.get_produced_type(), piece)
            for row in batch.to_pylist()
        ]
        assert sorted(row["id"] for row in read) == list(range(7))
    finally:
        coordinator.close()
