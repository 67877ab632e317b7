"""A streaming FLIP-27 read whose tasks fail at random points: the retries read the same rows.

The source is the append-only log source (``tests/spark/log_source.py``) with a reader
that fails once: the first task to emit a chosen record (a random line of a random
file, so a random task of a random micro-batch) emits the rows before it, writes what
it emitted to a marker file, and raises. The shared session (``local[2,4]``) retries
the task; the retry finds the marker and reads on. Hypothesis picks the files, their
lengths, the read limit, the parallelism and the record.

Every log line must arrive exactly once, each file's lines in order, in micro-batches
equal row for row to those of a run without the failure (planning is deterministic
for the same logs and limits, so a replay must reproduce them), and what the failed
attempt emitted of each file must be the start of what the micro-batch holds of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2.source.reader import SingleThreadMultiplexSourceReaderBase
from sinkv2_spark import from_source
from tests.spark.log_source import LogSource, LogSplit, LogSplitReader, LogSplitState, append
from tests.spark.stream_reading import Collector, by_file, expected_by_file, run_available_now

pytestmark = pytest.mark.spark


class FailingEmitter:
    """Emits the log reader's chunks; fails the first attempt to emit one chosen record."""

    def __init__(self, source: FailingLogSource) -> None:
        self._source = source
        self._emitted: list[list[Any]] = []

    def emit_record(self, element: Any, output: Any, split_state: LogSplitState) -> None:
        batch: pa.RecordBatch = element.batch
        file, first = batch.column(0)[0].as_py(), batch.column(1)[0].as_py()
        index = self._source.fail_line - first
        marker = Path(self._source.marker)
        if file == self._source.fail_file and 0 <= index < batch.num_rows and not marker.exists():
            if index:
                output.collect_batch(batch.slice(0, index))
            self._emitted += [[file, line] for line in range(first, first + index)]
            marker.write_text(json.dumps(self._emitted))
            raise RuntimeError(f"fails on purpose at line {self._source.fail_line} of {file}")
        output.collect_batch(batch)
        self._emitted += [[file, line] for line in range(first, first + batch.num_rows)]
        split_state.offset = element.offset
        split_state.line = element.line


class FailingReader(SingleThreadMultiplexSourceReaderBase[Any, Any, LogSplit, LogSplitState]):
    """The log source's reader with a `FailingEmitter`."""

    def __init__(self, context: Any, source: FailingLogSource) -> None:
        super().__init__(lambda: LogSplitReader(source), FailingEmitter(source), context)

    def initialized_state(self, split: LogSplit) -> LogSplitState:
        return LogSplitState(split, split.offset, split.line)

    def to_split_type(self, split_id: str, split_state: LogSplitState) -> LogSplit:
        return LogSplit(split_state.split.file, split_state.offset, split_state.line)

    def on_split_finished(self, finished_split_ids: dict[str, LogSplitState]) -> None:
        """The enumerator pushes splits."""


class FailingLogSource(LogSource):
    """The log source whose reader fails once, at line ``fail_line`` of ``fail_file``."""

    def __init__(self, directory: Path, fail_file: str, fail_line: int, marker: Path) -> None:
        super().__init__(directory, discovery_interval_ms=50, batch_lines=7)
        self.fail_file = fail_file
        self.fail_line = fail_line
        self.marker = str(marker)

    def create_reader(self, reader_context: Any) -> Any:
        return FailingReader(reader_context, self)


def read(spark: Any, source: LogSource, base: Path, name: str, **options: Any) -> Collector:
    """Read ``source`` under ``availableNow`` into a new collector."""
    collector = Collector()
    df = from_source(
        spark,
        source,
        source_id=name,
        streaming=True,
        state_store=str(base / "state.sqlite"),
        **options,
    )
    run_available_now(df, base / f"checkpoint-{name}", collector)
    return collector


def batches(collector: Collector) -> dict[int, list[tuple[str, int, str | None]]]:
    """Each micro-batch's rows, sorted (a task's splits interleave in any order)."""
    return {
        batch: sorted((row["file"], row["line"], row["value"]) for row in rows)
        for batch, rows in collector.batches.items()
    }


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=3),
    limit=st.one_of(st.none(), st.integers(5, 50)),
    parallelism=st.integers(1, 3),
    pick=st.tuples(st.integers(0, 2), st.floats(0, 1, exclude_max=True)),
)
def test_a_task_failing_at_a_random_record_is_retried_with_the_same_rows(
    spark, tmp_path_factory, *, lengths, limit, parallelism, pick
):
    base = tmp_path_factory.mktemp("source-faults")
    logs = base / "logs"
    logs.mkdir()
    for index, length in enumerate(lengths):
        append(logs, f"part-{index}.log", (f"{index}-{n}" for n in range(length)))
    fail_index = pick[0] % len(lengths)
    fail_file, fail_line = f"part-{fail_index}.log", int(pick[1] * lengths[fail_index])
    marker = base / "failed.json"
    options = {"parallelism": parallelism, "max_records_per_trigger": limit}

    failed = read(
        spark, FailingLogSource(logs, fail_file, fail_line, marker), base, "failed", **options
    )
    clean = read(
        spark, LogSource(logs, discovery_interval_ms=50, batch_lines=7), base, "clean", **options
    )

    assert marker.exists(), f"no task reached line {fail_line} of {fail_file}"
    assert by_file(failed.rows()) == expected_by_file(logs)
    assert [batch for batch, _ in failed.calls] == sorted(failed.batches)  # no batch ran twice
    assert batches(failed) == batches(clean)
    [batch] = [
        b
        for b, rows in failed.batches.items()
        if {"file": fail_file, "line": fail_line}
        in [{"file": r["file"], "line": r["line"]} for r in rows]
    ]
    attempted = by_file({"file": f, "line": n} for f, n in json.loads(marker.read_text()))
    replayed = by_file(failed.batches[batch])
    for file, rows in attempted.items():
        lines = [row["line"] for row in rows]
        assert [row["line"] for row in replayed[file]][: len(lines)] == lines, file
