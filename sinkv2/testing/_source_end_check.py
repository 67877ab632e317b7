"""The kit's check of `SupportsEndPositions`: cuts that are deterministic and cover exactly.

A micro-batch engine cuts each unbounded split at the end position the source told
(`SupportsEndPositions.end_positions`), reads the cut's ``read`` part in one task and
carries the ``rest`` on; a replay cuts nothing again but reads the recorded ``read``.
So for every split a run of the local engine left in a reader's checkpoint, at the
position it reached, this check asks:

- one end position per split, in order;
- the same split and end always give the same cut (compared through the split
  serializer), which the serializer round-trips;
- the ``read`` part, read alone by a fresh reader told ``notify_no_more_splits``,
  reaches ``END_OF_INPUT`` with nothing left in its snapshot, and emits exactly
  ``SplitCut.records`` records (when told) - the records that follow the split's
  committed ones, when the caller gave ``split_records``;
- the ``rest`` cut again at the same end has nothing to read (read and rest cover
  exactly up to the end position, no record twice, none skipped);
- cut with ``max_records`` (1, and about half), the cut tells its records, holds no
  more than allowed, and the capped read followed by the rest's read to the same
  end gives exactly the uncapped read's records.

The data must not change while the kit runs (it never writes to the source).
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import cloudpickle

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.source import InputStatus, SourceEvent, SplitCut, SupportsEndPositions
from sinkv2.testing._freeze import freeze
from sinkv2.testing._source_engine import EngineStep, LocalSourceEngine

__all__ = ["check_end_positions"]

Row = Mapping[str, Any]
_STEPS: Final = 60
_WAIT_SECONDS: Final = 30.0


class _Context:
    """A lone reader's context: subtask 0 of 1, nothing to ask for."""

    def __init__(self) -> None:
        self._metrics = InMemoryMetricGroup()

    def get_index_of_subtask(self) -> int:
        return 0

    def current_parallelism(self) -> int:
        return 1

    def send_split_request(self) -> None:
        """Nothing to ask for: the reader has its one split."""

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        """No enumerator listens."""

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


class _Rows:
    """A `ReaderOutput` that keeps every record as a dict keyed by column."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.rows: list[Row] = []

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        if isinstance(record, Mapping):
            self.rows.append(dict(record))
        else:
            self.rows.append(dict(zip(self.names, record, strict=True)))

    def collect_batch(self, batch: Any) -> None:
        self.rows.extend(batch.to_pylist())

    def create_output_for_split(self, split_id: str) -> _Rows:
        return self

    def release_output_for_split(self, split_id: str) -> None:
        """Nothing to release."""


def _fail(split_id: str, problem: str) -> AssertionError:
    return AssertionError(f"check_source: end positions, split {split_id!r}: {problem}")


def _frame(source: Any, split: Any) -> bytes:
    return SimpleVersionedSerialization.write_version_and_serialize(
        source.get_split_serializer(), split
    )


def _read_alone(source: Any, split: Any, split_id: str) -> list[Row]:
    """Every record of ``split`` (a cut's read part), read by a fresh reader to its end."""
    output = _Rows(source.get_produced_type().names)
    reader = source.create_reader(_Context())
    deadline = time.monotonic() + _WAIT_SECONDS
    try:
        reader.start()
        reader.add_splits([split])
        reader.notify_no_more_splits()
        while (status := reader.poll_next(output)) is not InputStatus.END_OF_INPUT:
            if time.monotonic() > deadline:
                raise _fail(
                    split_id,
                    f"the read part of a cut, {short_repr(split)}, did not reach END_OF_INPUT "
                    f"in {_WAIT_SECONDS:.0f} s ({len(output.rows)} records so far); a cut's "
                    "read part must end at its stop position",
                )
            if status is InputStatus.NOTHING_AVAILABLE:
                try:
                    reader.is_available().result(max(0.0, deadline - time.monotonic()))
                except concurrent.futures.TimeoutError:
                    continue
        left = reader.snapshot_state(0)
        if left:
            raise _fail(
                split_id,
                f"after END_OF_INPUT the reader still holds {short_repr(left)}; a cut's read "
                "part is finished at its stop position",
            )
    finally:
        reader.close()
    return output.rows


def _cut(source: Any, split: Any, end: object, max_records: int | None) -> SplitCut[Any]:
    split_id = split.split_id()
    cut = source.cut_split(split, end, max_records)
    if not isinstance(cut, SplitCut):
        raise _fail(split_id, f"cut_split() returned {describe(cut)}; return a SplitCut")
    again = source.cut_split(split, end, max_records)
    for part in ("read", "rest"):
        first, second = getattr(cut, part), getattr(again, part)
        if (first is None) != (second is None) or (
            first is not None and _frame(source, first) != _frame(source, second)
        ):
            raise _fail(
                split_id,
                f"cut_split(split, {end!r}, {max_records!r}) gave {part} {short_repr(first)}, "
                f"then {short_repr(second)}; the same split and end must always give the same "
                "cut (a replay reads what the first attempt read)",
            )
        if first is not None:
            serializer = source.get_split_serializer()
            back = SimpleVersionedSerialization.read_version_and_deserialize(
                serializer, _frame(source, first)
            )
            if _frame(source, back) != _frame(source, first):
                raise _fail(split_id, f"the cut's {part} does not survive the split serializer")
    if cut.records != again.records:
        raise _fail(split_id, f"cut_split() told {cut.records} records, then {again.records}")
    if max_records is not None and cut.read is not None:
        if cut.records is None:
            raise _fail(
                split_id,
                f"cut_split(..., max_records={max_records}) did not tell SplitCut.records; "
                "a cut under a limit must say how many records it holds",
            )
        if cut.records > max_records:
            raise _fail(
                split_id,
                f"cut_split(..., max_records={max_records}) cut {cut.records} records",
            )
    return cut


def _rows_of(source: Any, cut: SplitCut[Any], split_id: str) -> list[Row]:
    if cut.read is None:
        return []
    rows = _read_alone(source, cut.read, split_id)
    if cut.records is not None and len(rows) != cut.records:
        how = "stopped early" if len(rows) < cut.records else "read past its stop position"
        raise _fail(
            split_id,
            f"the cut told {cut.records} records and its read part gave {len(rows)}: the "
            f"reader {how}",
        )
    return rows


def _check_split(
    source: Any,
    split: Any,
    end: object,
    done: int,
    split_records: Callable[[str], Iterable[Row]] | None,
) -> None:
    split_id = split.split_id()
    whole = _cut(source, split, end, None)
    rows = _rows_of(source, whole, split_id)
    if split_records is not None:
        want = list(itertools.islice(split_records(split_id), done, done + len(rows)))
        if [freeze(r) for r in rows] != [freeze(r) for r in want]:
            raise _fail(
                split_id,
                f"after {done} committed records the cut read {short_repr(rows)}; the split "
                f"holds {short_repr(want)} there",
            )
    if whole.rest is not None:
        again = _cut(source, whole.rest, end, None)
        if again.read is not None and (again.records or _rows_of(source, again, split_id)):
            raise _fail(
                split_id,
                f"the rest {short_repr(whole.rest)} cut at the same end {end!r} still reads "
                f"{short_repr(again.read)}; read and rest must meet exactly at the end position",
            )
    for cap in sorted({1, len(rows) // 2} - {0}):
        if cap >= len(rows):
            continue
        first = _cut(source, split, end, cap)
        if first.rest is None:
            raise _fail(split_id, f"a cut capped at {cap} records left no rest")
        second = _cut(source, first.rest, end, None)
        pieced = _rows_of(source, first, split_id) + _rows_of(source, second, split_id)
        if [freeze(r) for r in pieced] != [freeze(r) for r in rows]:
            raise _fail(
                split_id,
                f"cut at {cap} records and then the rest to {end!r}, the reads gave "
                f"{short_repr(pieced)}; the whole cut to {end!r} gave {short_repr(rows)}",
            )


def check_end_positions(
    source_factory: Callable[[], Any],
    split_records: Callable[[str], Iterable[Row]] | None,
    *,
    parallelism: int = 2,
    seed: int = 11,
) -> None:
    """Check a `SupportsEndPositions` source's cuts on the splits a short local run left.

    Raises:
        AssertionError: A rule of the module docstring is broken; the message names
            the split.
    """
    made = cloudpickle.loads(cloudpickle.dumps(source_factory()))
    if not isinstance(made, SupportsEndPositions):
        return
    source: Any = made  # a whole Source too; the protocol above names only the extension
    engine = LocalSourceEngine(source, parallelism, seed=seed)
    try:
        for _ in range(_STEPS):
            if engine.step() is not EngineStep.PROGRESS:
                break
        checkpoint = engine.checkpoint()
        done = collections.Counter(record.split_id for record in engine.committed)
    finally:
        engine.close()
    serializer = source.get_split_serializer()
    splits = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
        for reader in checkpoint.readers
        for framed in reader
    ]
    if not splits:
        return
    ends = source.end_positions(splits)
    if not isinstance(ends, Sequence) or len(ends) != len(splits):
        raise AssertionError(
            f"check_source: end_positions() returned {short_repr(ends)} for {len(splits)} "
            "split(s); return one position (or None) per split, in order"
        )
    for split, end in zip(splits, ends, strict=True):
        if end is not None:
            _check_split(source, split, end, done[split.split_id()], split_records)
