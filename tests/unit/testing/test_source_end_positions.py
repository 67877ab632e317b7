"""The source kit and `SupportsEndPositions`: the log source passes; broken cuts are caught.

The source is the append-only log source of the Spark tests (``tests/spark/log_source.py``,
real files under tmp_path); each broken variant plants one mistake a log source's
author makes: a cut that ignores ``max_records``, a reader that reads past its stop, a
cut that moves with time, a rest that skips a line, a cut that miscounts.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2.source import SplitCut, SupportsEndPositions
from sinkv2.testing import check_source
from sinkv2.testing._source_end_check import check_end_positions
from tests.spark.log_source import LogSource, LogSplit, LogSplitReader, append, records_of


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("logs")
    for index in range(3):
        append(
            directory, f"part-{index}.log", (f'{{"n": {n}}}' if n % 9 else "" for n in range(150))
        )
    with open(directory / "part-0.log", "ab") as file:
        file.write(b"a partial last line")  # not complete: never read
    return directory


def split_records(logs: Path):
    return lambda split_id: iter(records_of(logs, split_id))


def test_the_log_source_implements_the_extension_and_passes_the_kit(logs):
    source = LogSource(logs, batch_lines=7, discovery_interval_ms=20)
    assert isinstance(source, SupportsEndPositions)
    check_source(
        lambda: LogSource(logs, batch_lines=7, discovery_interval_ms=20),
        split_records=split_records(logs),
        records_to_read=300,
        max_examples=10,
    )


def test_a_cut_reads_complete_lines_only_and_the_rest_goes_on(logs):
    source = LogSource(logs)
    (end,) = source.end_positions([LogSplit("part-0.log")])
    assert end == (logs / "part-0.log").stat().st_size - len(b"a partial last line")
    cut = source.cut_split(LogSplit("part-0.log"), end, 40)
    assert cut.records == 40
    assert cut.rest == LogSplit("part-0.log", cut.read.stop, 40)
    assert source.cut_split(cut.rest, cut.rest.offset, None) == SplitCut(None, cut.rest, 0)
    assert source.end_positions([cut.read]) == [None]  # a stopped split ends by itself


@pytest.mark.parametrize(
    ("end", "message"),
    [(-1, "must be an int >= its offset"), ("7", "must be an int"), (5, "not just after")],
)
def test_a_bad_end_position_is_refused_clearly(logs, end, message):
    with pytest.raises(ValueError, match=message):
        LogSource(logs).cut_split(LogSplit("part-1.log"), end, None)


# -- broken cuts --------------------------------------------------------------------------


class IgnoresTheLimit(LogSource):
    def cut_split(self, split: LogSplit, end: object, max_records: int | None) -> SplitCut[Any]:
        return super().cut_split(split, end, None)


class ReadsPastItsStop(LogSource):
    def create_reader(self, reader_context: Any) -> Any:
        reader = super().create_reader(reader_context)
        add = reader.add_splits
        reader.add_splits = lambda splits: add([attrs.evolve(s, stop=None) for s in splits])
        return reader


class MovesWithTime(LogSource):
    """Its rest's line number depends on how many cuts it made (a clock, a counter)."""

    calls = itertools.count()

    def cut_split(self, split: LogSplit, end: object, max_records: int | None) -> SplitCut[Any]:
        cut = super().cut_split(split, end, max_records)
        if cut.rest is None:
            return cut
        return attrs.evolve(cut, rest=attrs.evolve(cut.rest, line=next(self.calls)))


class SkipsALine(LogSource):
    def cut_split(self, split: LogSplit, end: object, max_records: int | None) -> SplitCut[Any]:
        cut = super().cut_split(split, end, max_records)
        if max_records is None or cut.rest is None or cut.rest.offset >= end:  # type: ignore[operator]
            return cut
        path = self.path_of(split.file).read_bytes()
        skipped = path.index(b"\n", cut.rest.offset) + 1
        rest = attrs.evolve(cut.rest, offset=skipped, line=cut.rest.line + 1)
        return attrs.evolve(cut, rest=rest)


class Miscounts(LogSource):
    def cut_split(self, split: LogSplit, end: object, max_records: int | None) -> SplitCut[Any]:
        cut = super().cut_split(split, end, max_records)
        if cut.read is None or max_records is not None:
            return cut
        return attrs.evolve(cut, records=(cut.records or 0) + 1)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (IgnoresTheLimit, r"max_records=1\) cut"),
        (ReadsPastItsStop, "did not reach END_OF_INPUT"),
        (MovesWithTime, "must always give the same cut"),
        (SkipsALine, "then the rest to"),
        (Miscounts, "stopped early"),
    ],
    ids=lambda value: getattr(value, "__name__", None) or "",
)
def test_a_broken_cut_is_caught_naming_the_split(logs, broken, message, monkeypatch):
    monkeypatch.setattr("sinkv2.testing._source_end_check._WAIT_SECONDS", 2.0)
    with pytest.raises(AssertionError, match=message) as info:
        check_end_positions(
            lambda: broken(logs, batch_lines=5, discovery_interval_ms=20), split_records(logs)
        )
    assert "check_source: end positions, split 'part-" in str(info.value)


def test_a_source_without_the_extension_is_not_checked(logs):
    from sinkv2.source.lib import NumberSequenceSource

    check_end_positions(lambda: NumberSequenceSource(0, None), None)


def test_the_reader_stops_exactly_at_the_stop_even_when_the_file_grew(tmp_path):
    append(tmp_path, "a.log", range(10))
    source = LogSource(tmp_path, batch_lines=3)
    (end,) = source.end_positions([LogSplit("a.log")])
    cut = source.cut_split(LogSplit("a.log"), end, None)
    append(tmp_path, "a.log", range(10, 20))  # after the cut: not in it
    reader = LogSplitReader(source)
    reader.handle_splits_changes(type("Add", (), {"splits": (cut.read,)})())
    values = []
    for _ in range(10):
        fetch = reader.fetch()
        while fetch.next_split() is not None:
            for chunk in iter(fetch.next_record_from_split, None):
                values += chunk.batch.column("value").to_pylist()
        if "a.log" in fetch.finished_splits():
            break
    assert values == [str(n) for n in range(10)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    # no surrogates: a line is text a file can hold (UTF-8 cannot encode a lone one)
    lines=st.lists(
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\n\r"), max_size=12),
        max_size=30,
    ),
    tail=st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\n"), max_size=5),
    caps=st.lists(st.one_of(st.none(), st.integers(0, 7)), min_size=1, max_size=8),
)
def test_cuts_cover_every_complete_line_once(tmp_path_factory, lines, tail, caps):
    """Cut after cut (capped or not) to the end position: the reads tile the complete lines."""
    directory = tmp_path_factory.mktemp("cuts")
    (directory / "a.log").write_bytes(
        "".join(f"{line}\n" for line in lines).encode() + tail.encode()
    )
    source = LogSource(directory)
    split = LogSplit("a.log")
    (end,) = source.end_positions([split])
    assert end == len("".join(f"{line}\n" for line in lines).encode())
    covered, offsets = 0, []
    for cap in itertools.islice(itertools.cycle(caps), 2 * len(lines) + 2):
        cut = source.cut_split(split, end, cap)
        assert cut.records is not None
        if cut.read is None:
            assert cut.rest == split
            continue
        assert cut.read.offset == split.offset == (offsets[-1] if offsets else 0)
        assert cap is None or cut.records <= cap
        assert cut.rest == LogSplit("a.log", cut.read.stop, split.line + cut.records)
        covered += cut.records
        offsets.append(cut.read.stop)
        split = cut.rest
    if None in caps or all(cap for cap in caps):
        assert covered == len(lines)
        assert split.offset == end
