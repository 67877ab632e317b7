"""PostgresSink through SinkTopologyTranslator on the shared local Spark (local[2,4])."""

import datetime as dt
import decimal
import itertools

import psycopg
import pytest

from reference_sinks.postgres import PostgresSink
from sinkv2 import DeliveryGuarantee
from sinkv2.errors import SinkConfigurationError, SinkWriterError
from sinkv2.runtime import CommitStatus
from sinkv2.testing import SinkUnderTest
from sinkv2_spark.testing import check_sink_on_spark
from tests.reference_sinks.postgres.helpers import (
    EVENTS_DDL,
    KEYED_DDL,
    create_table,
    prepared,
    read_rows,
)

pytestmark = pytest.mark.spark
_tables = itertools.count()


def frame(spark, count, partitions=4):
    return (
        spark.range(count)
        .selectExpr("id", "concat('n', cast(id as string)) as name", "id / 2 as score")
        .repartition(partitions)
    )


def expected(count):
    return [{"id": i, "name": f"n{i}", "score": i / 2} for i in range(count)]


def test_a_checkpoint_commits_once_and_a_rerun_is_a_no_op(spark, translator, postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    first = translator.apply(frame(spark, 2000), sink, sink_id="pg", checkpoint_id=1)
    assert first.status is CommitStatus.COMMITTED
    again = translator.apply(frame(spark, 2000), sink, sink_id="pg", checkpoint_id=1)
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert read_rows(postgres_url) == expected(2000)
    assert prepared(postgres_url) == []


def test_upserts_through_spark_keep_the_last_row_of_each_key(spark, translator, postgres_url):
    create_table(postgres_url, KEYED_DDL)
    sink = PostgresSink(postgres_url, "events", upsert_key="id")
    translator.apply(frame(spark, 500), sink, sink_id="up", checkpoint_id=1)
    changed = frame(spark, 1000).selectExpr("id", "'new' as name", "score")
    translator.apply(changed, sink, sink_id="up", checkpoint_id=2)
    rows = read_rows(postgres_url)
    assert [row["id"] for row in rows] == list(range(1000))
    assert {row["name"] for row in rows} == {"new"}
    assert prepared(postgres_url) == []


def fresh(url, ddl, **options):
    def make():
        name = f"events_{next(_tables)}"
        create_table(url, ddl, name)
        sink = PostgresSink(url, name, **options)
        return SinkUnderTest(sink, read_back=lambda: read_rows(url, name))

    return make


@pytest.mark.parametrize(
    ("ddl", "options"),
    [(EVENTS_DDL, {}), (KEYED_DDL, {"upsert_key": "id"})],
    ids=["insert", "upsert"],
)
def test_the_kit_s_spark_scenarios_with_random_task_failures(spark, postgres_url, ddl, options):
    check_sink_on_spark(
        spark,
        fresh(postgres_url, ddl, **options),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        data=frame(spark, 300, partitions=3),
        expected=expected(300),
        examples=3,
        # a failure mid-partition, one after everything was prepared, and a second retry
        always=[{(0, 0): 5, (1, 0): 10_000, (1, 1): 0}],
    )
    assert prepared(postgres_url) == []


def test_a_bad_row_fails_the_job_naming_row_and_column_and_nothing_is_visible(
    spark, translator, postgres_url
):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE events (id bigint, name varchar(4), score float8)")
    sink = PostgresSink(postgres_url, "events")
    data = frame(spark, 100, partitions=1).selectExpr(
        "id", "CASE WHEN id = 42 THEN 'too long' ELSE 'ok' END AS name", "score"
    )
    with pytest.raises(SinkWriterError, match=r"row 42 .*column 'name'.*value too long"):
        translator.apply(data, sink, sink_id="bad", checkpoint_id=1)
    assert read_rows(postgres_url) == []
    assert prepared(postgres_url) == []


def test_columns_that_do_not_fit_fail_before_any_job(spark, translator, postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    wrong = frame(spark, 10).withColumnRenamed("score", "points")
    with pytest.raises(SinkConfigurationError, match="column 'points' is not in the table"):
        translator.apply(wrong, PostgresSink(postgres_url, "events"), sink_id="s", checkpoint_id=1)
    assert read_rows(postgres_url) == []


def test_spark_types_read_back_as_spark_wrote_them(spark, translator, postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE typed (id int, b smallint, f real, d numeric(20, 4), t text, "
            "raw bytea, day date, at timestamptz, local timestamp, xs int[], doc jsonb)"
        )
    data = spark.sql(
        """
        SELECT 1 AS id, CAST(-5 AS TINYINT) AS b, CAST('NaN' AS FLOAT) AS f,
               CAST('1234567890123456.1234' AS DECIMAL(20, 4)) AS d, 'é "q", \\\\' AS t,
               X'00FF' AS raw, DATE'0001-01-01' AS day,
               TIMESTAMP'2024-02-29 23:59:59.999999 UTC' AS at,
               TIMESTAMP_NTZ'9999-12-31 23:59:59.999999' AS local,
               array(1, NULL, 3) AS xs,
               named_struct('m', map('k', 1.5D), 'l', array(NULL)) AS doc
        UNION ALL
        SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        """
    )
    translator.apply(data, PostgresSink(postgres_url, "typed"), sink_id="types", checkpoint_id=1)
    [first, second] = read_rows(postgres_url, "typed", "*")
    assert first["b"] == -5
    assert first["f"] != first["f"]  # NaN
    assert first["d"] == decimal.Decimal("1234567890123456.1234")
    assert first["t"] == 'é "q", \\'
    assert bytes(first["raw"]) == b"\x00\xff"
    assert first["day"] == dt.date(1, 1, 1)
    assert first["at"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC)
    assert first["local"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert first["xs"] == [1, None, 3]
    assert first["doc"] == {"m": {"k": 1.5}, "l": [None]}
    assert all(value is None for key, value in second.items() if key != "id")
