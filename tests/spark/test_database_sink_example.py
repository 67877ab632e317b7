"""docs/examples/sqlite_sink.py, the database-sink how-to's example, on local Spark.

Every Spark type of the how-to's value table goes through ``apply()`` into SQLite,
and what arrives in the table shows the Python value the writer got (a decimal's
exact digits as text, an aware UTC datetime, a list of pairs for a map, ...). The
same checkpoint again writes nothing; a task that fails midway leaves no row twice
and no staging table behind.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path

import pytest

from sinkv2.runtime import CommitStatus
from sinkv2_spark.testing import with_task_failures

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "sqlite_sink.py"
ROWS = 200
COLUMNS = (
    "id INTEGER, flag, small, big, f, d, dec, s, b, day, ts, ts_ntz, span, arr, st, m, missing"
)
QUERY = f"""
SELECT id, id % 2 = 0 AS flag, CAST(id AS SMALLINT) AS small, id * 10000000000 AS big,
       CAST(id AS FLOAT) / 4 AS f, CAST(id AS DOUBLE) / 4 AS d, 0.5 + id AS dec,
       concat('row ', CAST(id AS STRING)) AS s, CAST('b' AS BINARY) AS b,
       date_add(DATE'2024-01-01', CAST(id AS INT)) AS day,
       TIMESTAMP'2024-01-01 12:00:00 UTC' AS ts, TIMESTAMP_NTZ'2024-01-01 12:00:00' AS ts_ntz,
       INTERVAL '1 02:03:04' DAY TO SECOND AS span,
       array(id, id + 1) AS arr, named_struct('a', id, 'b', 'x') AS st, map('k', id) AS m,
       NULL AS missing
FROM range({ROWS})
"""


@pytest.fixture(scope="module")
def example():  # type: ignore[no-untyped-def]
    """The example module; its classes travel to Spark's workers by value.

    (A reader's job imports it from a module the workers can import, or ships it with
    ``addPyFile``; ``apply()`` checks that before any job.)
    """
    from pyspark import cloudpickle

    spec = importlib.util.spec_from_file_location("docs_sqlite_sink", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the classes' module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    yield module
    cloudpickle.unregister_pickle_by_value(module)
    del sys.modules[spec.name]


def read(database: Path, query: str) -> list[tuple]:  # type: ignore[type-arg]
    with sqlite3.connect(database) as connection:
        rows = connection.execute(query).fetchall()
    connection.close()
    return rows


def test_every_spark_type_arrives_once_in_the_python_form_the_table_says(
    spark, translator, tmp_path, example
):
    database = tmp_path / "shop.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute(f"CREATE TABLE events ({COLUMNS})")
    connection.close()
    sink = example.SqliteSink(database, "events")
    df = spark.sql(QUERY).repartition(3)
    first = translator.apply(df, sink, sink_id="sqlite-events", checkpoint_id=1)
    again = translator.apply(df, sink, sink_id="sqlite-events", checkpoint_id=1)
    assert first.status is CommitStatus.COMMITTED
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert read(database, "SELECT count(*), count(DISTINCT id) FROM events") == [(ROWS, ROWS)]
    [row] = read(database, "SELECT * FROM events WHERE id = 2")
    assert row == (
        2,
        1,  # bool -> int
        2,
        20000000000,
        0.5,  # float
        0.5,  # float
        "2.5",  # decimal.Decimal, its exact digits (0.5 + id is a decimal)
        "row 2",
        b"b",  # bytes
        "2024-01-03",  # datetime.date
        "2024-01-01T12:00:00+00:00",  # datetime.datetime, aware, UTC
        "2024-01-01T12:00:00",  # datetime.datetime, naive
        93784.0,  # datetime.timedelta, as seconds
        "[2, 3]",  # list
        '{"a": 2, "b": "x"}',  # dict
        '[["k", 2]]',  # a map: a list of (key, value) tuples
        None,
    )
    assert read(database, "SELECT name FROM sqlite_master WHERE name LIKE 'stage_%'") == []


def test_a_failed_task_attempt_leaves_no_row_twice_and_no_staging_table(
    spark, translator, tmp_path, example
):
    database = tmp_path / "shop.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE events (id INTEGER, s TEXT)")
    connection.close()
    sink = with_task_failures(example.SqliteSink(database, "events"), {(0, 0): 50, (2, 0): 10})
    df = spark.sql(f"SELECT id, CAST(id AS STRING) AS s FROM range({ROWS})").repartition(3)
    result = translator.apply(df, sink, sink_id="sqlite-failing", checkpoint_id=1)
    assert result.status is CommitStatus.COMMITTED
    assert read(database, "SELECT count(*), count(DISTINCT id) FROM events") == [(ROWS, ROWS)]
    assert read(database, "SELECT name FROM sqlite_master WHERE name LIKE 'stage_%'") == []
