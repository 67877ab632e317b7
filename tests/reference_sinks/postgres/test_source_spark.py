"""PostgresSource on the shared local Spark: from_source and the read door.

One test: the rows of a DataFrame of the common types go into PostgreSQL (by psycopg's
COPY: the sink's own round trip is `test_source_types`, without Spark), come back
through `from_source` (four chunks on the primary key, two reader subtasks) and
through ``spark.read.format("sinkv2").option("source", "postgres")`` (a query split
on a date key), and equal the DataFrame: the same rows, the same Spark types, the
primary key non-nullable.
"""

import psycopg
import pytest
from pyspark.sql import types as T

from reference_sinks.postgres import PostgresSource
from sinkv2_spark import from_source, register

pytestmark = pytest.mark.spark

DDL = (
    "CREATE TABLE typed (id bigint PRIMARY KEY, small integer, name text, "
    "amount numeric(12, 2), at timestamptz, day date, pair bigint[], ok boolean)"
)


def test_a_table_reads_back_through_from_source_and_the_read_door_as_its_dataframe(
    spark, postgres_url
):
    frame = spark.range(600).selectExpr(
        "id",
        "cast(id % 7 as int) as small",
        "if(id % 9 = 0, null, concat('n', cast(id as string))) as name",
        "if(id % 5 = 0, null, cast(id * 1.25 as decimal(12, 2))) as amount",
        "timestamp_seconds(id * 3600 - 100000000) as at",
        "date_add(date'1999-12-01', cast(id as int)) as day",
        "array(id, null) as pair",
        "id % 2 = 0 as ok",
    )
    want = sorted(frame.collect())
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(DDL)
        with connection.cursor() as cursor, cursor.copy("COPY typed FROM STDIN") as copy:
            for row in want:
                copy.write_row(tuple(row))

    source = PostgresSource(postgres_url, "typed", chunks=4)
    assert len(source.plan()) == 4
    ours = from_source(spark, source, parallelism=2)
    assert [(f.name, f.dataType) for f in ours.schema] == [
        (f.name, f.dataType) for f in frame.schema
    ]
    assert ours.schema["id"].nullable is False
    assert ours.schema["name"].nullable is True
    assert sorted(ours.collect()) == want

    register(spark)
    door = (
        spark.read.format("sinkv2")
        .option("source", "postgres")
        .option("url", postgres_url)
        .option("query", "SELECT id, day, name FROM typed")
        .option("split_key", "day")
        .option("chunks", "3")
        .option("parallelism", "3")
        .load()
    )
    assert door.schema["day"].dataType == T.DateType()
    assert sorted(door.collect()) == sorted(frame.select("id", "day", "name").collect())
