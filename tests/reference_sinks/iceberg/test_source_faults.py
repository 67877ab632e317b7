"""IcebergSource against what pyiceberg commits: deletes, expired history, filters, bad input.

No Spark. Each test builds its tables with pyiceberg on the embedded `local_catalog`
and compares the source with pyiceberg's own scan (and a filter applied here).
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest

from reference_sinks.iceberg import (
    IcebergSource,
    iceberg_source_from_options,
    local_catalog,
)
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.iceberg.test_source import (
    FLAT_ARROW,
    append,
    by_id,
    flat_rows,
    flat_table,
    read_all,
)


def test_bad_arguments_and_options_fail_when_made_naming_them(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    append(table, flat_rows(0, 3))
    catalog = local_catalog(tmp_path)
    where = {"table": "ns.t", "warehouse": str(tmp_path)}
    for make, message in [
        (
            lambda: IcebergSource(catalog, "ns.t", row_filter="id >> 3"),
            r"row_filter 'id >> 3' does not parse \(at character",
        ),
        (
            lambda: iceberg_source_from_options(**where, row_filter="id = = 1"),
            "row_filter 'id = = 1' does not parse",
        ),
        (
            lambda: IcebergSource(catalog, "ns.t", row_filter="nope > 1"),
            "row_filter 'nope > 1'.*nope",
        ),
        (lambda: IcebergSource(catalog, "ns.t", row_filter="id > 'x'"), "row_filter"),
        (lambda: IcebergSource(catalog, "ns.t", selected_fields=[]), "selected_fields is empty"),
        (
            lambda: iceberg_source_from_options(**where, selected_fields=" , "),
            "selected_fields is empty",
        ),
        (
            lambda: IcebergSource(catalog, "ns.t", selected_fields=["id", "nope"]),
            r"selected_fields \['id', 'nope'\].*nope",
        ),
        (lambda: IcebergSource(catalog, "ns.t").monitor_continuously(math.inf), "finite"),
        (lambda: IcebergSource(catalog, "ns.t").monitor_continuously(math.nan), "finite"),
        (
            lambda: iceberg_source_from_options(**where, monitor_interval="inf"),
            "'monitor_interval' option",
        ),
        (
            lambda: iceberg_source_from_options(**where, monitor_interval="0"),
            "'monitor_interval' option",
        ),
        (
            lambda: iceberg_source_from_options(
                **where, monitor_interval="1", start="2024-03-30T10:00:00"
            ),
            "'start' option .* with its zone",
        ),
        (lambda: iceberg_source_from_options(**where, as_of="2024-03-30"), "'as_of' option"),
        (
            lambda: IcebergSource(catalog, "ns.t", as_of=before),
            r"no snapshot current at \d{4}-.*as_of",
        ),
        (
            lambda: iceberg_source_from_options(**where, asof="x"),
            r"does not know the options \['asof'\]; it takes table, .*as_of",
        ),
        (
            lambda: iceberg_source_from_options(table="ns.t", **{"catalog.type": "bogus"}),
            r"catalog options \['catalog.type'\]",
        ),
        (lambda: IcebergSource(catalog, "nope.t"), "'nope.t' does not exist"),
    ]:
        with pytest.raises(SinkConfigurationError, match=message):
            make()
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat()
    assert by_id(read_all(iceberg_source_from_options(**where, as_of=at))) == flat_rows(0, 3)
    assert FLAT_ARROW.names == ["id", "key", "value"]
