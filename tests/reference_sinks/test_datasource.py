"""The reference sinks' option factories, as ``format("sinkv2")`` calls them."""

from __future__ import annotations

import pytest

from reference_sinks import datasource
from sinkv2.errors import SinkConfigurationError


@pytest.mark.parametrize(
    ("given", "made"),
    [("parquet", "parquet"), ("Parquet", "parquet"), ("JSONL", "jsonl"), (" json ", "jsonl")],
)
def test_the_files_sinks_format_option_takes_spark_s_spellings_in_any_case(tmp_path, given, made):
    assert datasource.files(path=str(tmp_path), format=given).format == made


def test_a_files_format_it_does_not_write_is_refused_naming_the_two_it_does(tmp_path):
    with pytest.raises(
        SinkConfigurationError, match="must be 'parquet' or 'jsonl' \\(got 'csv'\\)"
    ):
        datasource.files(path=str(tmp_path), format="csv")
