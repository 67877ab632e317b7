"""FileSource's options refuse what cannot work, naming the option, as Spark spells it
where the read door takes Spark's names (no Spark).

Each test failed before its fix.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import pytest

from reference_sinks.files import CsvOptions, FileSource, file_source_from_options
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.files.file_source_data import (
    read_all,
    rows,
    write_csv,
    write_parquet,
)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s: s.monitor_continuously(math.inf),
            "must be a positive number of seconds or a timedelta, finite",
        ),
        (lambda s: s.monitor_continuously(1, max_file_age=math.inf), "max_file_age must be"),
        (
            lambda s: s.monitor_continuously(1, max_file_age=dt.timedelta(days=10**6)),
            "max_file_age must be",
        ),
    ],
)
def test_infinite_intervals_and_ages_are_refused_when_set(tmp_path: Path, call: Any, message: str):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match=message):
        call(FileSource(tmp_path))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"monitor_interval": "inf"},
            "'monitor_interval' option must be a positive number of seconds, finite",
        ),
        ({"monitor_interval": "1", "max_file_age": "Infinity"}, "'max_file_age' option"),
    ],
)
def test_infinite_string_options_are_refused(tmp_path: Path, options: dict[str, str], message: str):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match=message):
        file_source_from_options(path=str(tmp_path), **options)


def test_no_extensions_at_all_is_refused_rather_than_reading_nothing(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(
        SinkConfigurationError, match=r"extensions must be a list of name endings .*, not empty"
    ):
        FileSource(tmp_path, extensions=[])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "csv", "sep": ";;"}, "'sep' option must be one character"),
        ({"format": "csv", "sep": "\n"}, "'sep' option must be one character"),
        ({"format": "csv", "inferschema": "sure"}, "'inferSchema' option must be 'true'"),
    ],
)
def test_bad_csv_string_options_are_named_as_spark_spells_them(
    tmp_path: Path, options: dict[str, str], message: str
):
    write_csv(tmp_path / "a.csv", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match=message):
        file_source_from_options(path=str(tmp_path), **options)


def test_spark_spellings_of_csv_options_are_read(tmp_path: Path):
    (tmp_path / "a.csv").write_text("id\tname\n1\tx\n", encoding="utf-8")
    source = file_source_from_options(
        path=str(tmp_path), format="csv", sep="\\t", inferschema="true"
    )
    assert read_all(source) == [{"id": 1, "name": "x"}]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delimiter": '"'}, "delimiter and quote_char are both '\"'"),
        ({"delimiter": "\n"}, "delimiter must be a one-character str other than a line break"),
        ({"quote_char": "\r"}, "quote_char must be a one-character str other than a line"),
    ],
)
def test_csv_options_that_cannot_parse_are_refused_naming_the_option(
    kwargs: dict[str, str], message: str
):
    """Before: a FileReadError blaming the file, or (delimiter == quote) one garbled column."""
    with pytest.raises(SinkConfigurationError, match=message):
        CsvOptions(**kwargs)


def test_spark_spellings_of_the_file_stream_options_are_taken(tmp_path: Path):
    """Spark's ``maxFileAge`` (a time string; bare: ms), ``cleanSource``, ``sourceArchiveDir``
    and ``format`` ``json`` (lower-cased, as Spark passes option names)."""
    archive, data = tmp_path / "done", tmp_path / "in"
    data.mkdir()
    (data / "a.json").write_text('{"id": 1}\n')
    source = file_source_from_options(
        path=str(data),
        format="json",
        monitor_interval="5",
        maxfileage="7d",
        cleansource="archive",
        sourcearchivedir=str(archive),
    )
    assert source.format == "jsonl"
    assert source.max_file_age == 7 * 86400
    assert source.clean_source == "archive"
    assert Path(source.archive_dir) == archive
    bare = file_source_from_options(
        path=str(data), format="json", monitor_interval="5", maxfileage="1500"
    )
    assert bare.max_file_age == 1.5
    with pytest.raises(SinkConfigurationError, match="'maxFileAge' option must be a positive"):
        file_source_from_options(
            path=str(data), format="json", monitor_interval="5", maxfileage="a week"
        )
    with pytest.raises(SinkConfigurationError, match=r"\['max_file_age', 'maxFileAge'\]"):
        file_source_from_options(
            path=str(data), format="json", monitor_interval="5", max_file_age="60", maxfileage="1m"
        )
    with pytest.raises(SinkConfigurationError, match=r"\['cleanSource'\] are for a continuous"):
        file_source_from_options(path=str(data), format="json", cleansource="delete")
