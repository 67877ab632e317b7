"""``maxRecordsPerTrigger`` on splits read whole: one WARNING when the query starts.

No Spark session: the stream reader is made as the read door makes it, and its
first offset is asked as Spark's planner asks it. The sources are real
(`FileSource` over real files, SQLite stores under tmp_path). The same warning
from `from_source` in the user's process, and the stream still moving on through
files larger than the limit, is checked on Spark in
``tests/reference_sinks/files/test_file_source_spark_stream.py``.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.files import FileSource
from sinkv2.runtime import SqliteCommitStateStore
from sinkv2.source import SourceContractError, SupportsUncountedSplits
from sinkv2_spark._doors.source_stream import SourceStreamReader
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    rows,
    write_csv,
    write_jsonl,
    write_parquet,
)

WRITERS = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}


def reader(source: Any, tmp_path: Path, **limits: int) -> SourceStreamReader:
    return SourceStreamReader(
        source,
        source.get_produced_type(),
        source_id="notice",
        store=SqliteCommitStateStore(tmp_path / "state.sqlite"),
        parallelism=1,
        batch_rows=100,
        **limits,
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "sinkv2.spark" and r.levelno == logging.WARNING
    ]


def file_source(tmp_path: Path, kind: str) -> FileSource:
    WRITERS[kind](tmp_path / "in" / f"a.{kind}", rows(0, 10))
    return FileSource(tmp_path / "in", kind, schema=SCHEMA)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "named"), [("jsonl", "JSON lines"), ("csv", "CSV")])
def test_a_record_limit_on_whole_files_is_warned_once_when_the_query_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, named: str
) -> None:
    caplog.set_level(logging.WARNING, logger="sinkv2")
    source = file_source(tmp_path, kind)
    door = reader(source, tmp_path, max_records=5)
    shipped = pickle.dumps(door)  # Spark ships the reader before its planner asks anything
    assert warnings_of(caplog) == []  # made in Spark's planner too, which never plans epochs
    start = door.initialOffset()  # the query's first question: the coordinator is made
    door.partitions(start, door.latestOffset(start, door.getDefaultReadLimit()))
    door.stop()
    (warning,) = warnings_of(caplog)
    for part in (
        "maxRecordsPerTrigger (max_records_per_trigger) is 5",
        repr(source),
        f"its {named} files are read whole",
        "not counted by the limit",
        "maxSplitsPerTrigger (max_splits_per_trigger) instead",
    ):
        assert part in warning, (part, warning)
    door.warn_record_limit()  # told already
    assert len(warnings_of(caplog)) == 1
    caplog.clear()
    planner = pickle.loads(shipped)
    planner.warn_record_limit()  # a copy shipped before the warning: the read door's own run
    assert len(warnings_of(caplog)) == 1
    told = pickle.loads(pickle.dumps(door))  # from_source: warned, then shipped: not again
    told.warn_record_limit()
    assert len(warnings_of(caplog)) == 1


def test_no_warning_where_the_limit_holds_or_no_record_limit_is_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sinkv2")
    parquet = file_source(tmp_path / "p", "parquet")
    assert isinstance(parquet, SupportsUncountedSplits)
    assert parquet.uncounted_splits() is None  # cut at a row: the limit bounds it
    jsonl = file_source(tmp_path / "j", "jsonl")
    for door in (
        reader(parquet, tmp_path / "p", max_records=5),
        reader(jsonl, tmp_path / "j", max_splits=1),
        reader(jsonl, tmp_path / "j"),
    ):
        door.initialOffset()
        door.warn_record_limit()
        door.stop()
    assert warnings_of(caplog) == []


@pytest.mark.parametrize("answer", ["", 3, b"whole"])
def test_an_uncounted_splits_answer_that_is_not_a_reason_is_refused(
    tmp_path: Path, answer: object
) -> None:
    class Confused(FileSource):
        def uncounted_splits(self) -> Any:
            return answer

    write_jsonl(tmp_path / "in" / "a.jsonl", rows(0, 3))
    source = Confused(tmp_path / "in", "jsonl", schema=SCHEMA)
    with pytest.raises(SourceContractError, match=r"uncounted_splits\(\) returned") as caught:
        reader(source, tmp_path, max_records=5)
    assert caught.value.method == "uncounted_splits"
    reader(source, tmp_path, max_splits=2).stop()  # asked only when a record limit is set


def test_the_answer_is_the_source_configuration_not_its_files(tmp_path: Path) -> None:
    """Said before any split exists: an empty directory of CSV files is uncounted too."""
    (tmp_path / "empty").mkdir()
    source = FileSource(tmp_path / "empty", "csv", schema=pa.schema(SCHEMA))
    assert "CSV files are read whole" in (source.uncounted_splits() or "")
