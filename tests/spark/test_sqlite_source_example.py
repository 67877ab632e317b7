"""docs/examples/sqlite_source.py, the source half of the test-your-sink how-to, on local Spark.

The source the kit checks in process (``tests/unit/testing/test_source_kit_sqlite.py``)
reads the same rows through ``from_source``: every row once, with fewer and more
readers than ranges, and an empty table gives an empty DataFrame (no split at all).
"""

from __future__ import annotations

import collections
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from sinkv2_spark import from_source

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "sqlite_source.py"


@pytest.fixture(scope="module")
def example():  # type: ignore[no-untyped-def]
    """The example module; its classes travel to Spark's workers by value."""
    from pyspark import cloudpickle

    spec = importlib.util.spec_from_file_location("docs_sqlite_source", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the classes' module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    yield module
    cloudpickle.unregister_pickle_by_value(module)
    del sys.modules[spec.name]


def rows(df: Any) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter((row["id"], row["item"]) for row in df.collect())


def test_the_example_source_reads_every_row_once_on_spark(
    spark: Any, example: Any, tmp_path: Path
) -> None:
    table = tmp_path / "orders.sqlite"
    expected = collections.Counter((r["id"], r["item"]) for r in example.make_table(table, 50))
    source = example.SqliteTableSource(str(table), "orders", example.ORDERS)

    for parallelism in (3, 8):  # 5 ranges: fewer readers than ranges, and more
        df = from_source(spark, source, parallelism=parallelism)
        assert df.schema.simpleString() == "struct<id:bigint,item:string>"
        assert rows(df) == expected, parallelism

    empty = tmp_path / "empty.sqlite"
    example.make_table(empty, 0)
    df = from_source(spark, example.SqliteTableSource(str(empty), "orders", example.ORDERS))
    assert df.count() == 0
