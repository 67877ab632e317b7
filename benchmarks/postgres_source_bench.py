"""Snapshot read throughput of reference_sinks.postgres.PostgresSource against psql and Spark JDBC.

One command, one Spark session (local[2]) and a private PostgreSQL server::

    .venv/bin/python benchmarks/postgres_source_bench.py                 # 2M rows, 3 rounds
    .venv/bin/python benchmarks/postgres_source_bench.py --rows 500000 --repeat 5
    .venv/bin/python benchmarks/postgres_source_bench.py --path psql --path local

The table (``id bigint PRIMARY KEY``, text, ``numeric(12, 2)``, ``timestamptz``,
boolean, integer, double precision; made by ``generate_series``, vacuumed and
analyzed) is read whole by:

- ``psql \\copy``: ``psql -c "\\copy bench TO '/dev/null' CSV"``, one client process
  and one server backend: the plainest bulk read there is;
- ``PostgresSource (no Spark)``: every split of ``PostgresSource(url, "bench",
  chunks=1)`` read in this process, one connection: what one reader task does
  (one ``SELECT`` of the chunk's rows in key order through the ADBC PostgreSQL
  driver, which fetches it as ``COPY ... (FORMAT binary)`` and decodes it into Arrow
  in C++). To
  compare two versions of the reader, run this file from each tree in turn (each run
  starts its own server), e.g. ``git archive HEAD~1 | tar -x -C /tmp/before`` and
  alternate ``--path psql --path local`` runs with ``PYTHONPATH`` set to each tree;
- ``from_source``: ``from_source(spark, PostgresSource(url, "bench", chunks=P),
  parallelism=P)`` written to Spark's ``noop`` sink, P = ``--partitions`` (2);
- ``spark.read.jdbc``: Spark's JDBC reader with ``partitionColumn=id``, ``lowerBound``/
  ``upperBound`` the key's min and max, ``numPartitions=P``, ``fetchsize=10000``,
  into the ``noop`` sink. PostgreSQL's JDBC driver is ``--jdbc-jar`` (default
  ``/usr/share/java/postgresql.jar``: ``apt-get install -y libpostgresql-jdbc-java``)
  or, when that file is missing, fetched through ``spark.jars.packages``
  (``--jdbc-package``); ``--path`` without ``jdbc`` skips it.

Paths run in interleaved rounds (a slow minute hits every path alike); each Spark
path runs once untimed first (JVM and Python workers warm). Each run must read the
table's row count. The median of each path is reported with every run, as rows/s;
targets (issue 25): from_source >= 1 x spark.read.jdbc, and the ratio to psql.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, session  # the benchmarks folder is not a package

DEFAULT_JDBC_PACKAGE = "org.postgresql:postgresql:42.7.4"
JDBC_JAR = "/usr/share/java/postgresql.jar"  # apt-get install -y libpostgresql-jdbc-java
PATHS = ("psql", "local", "from_source", "jdbc")
TABLE = """
CREATE TABLE bench (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12, 2),
                    at timestamptz, flag boolean, qty integer, score double precision);
INSERT INTO bench
SELECT g, 'name-' || g, CASE WHEN g % 10 = 0 THEN NULL ELSE g / 7.0 END,
       timestamptz '2020-01-01 00:00+00' + g * interval '1 second', g % 3 = 0, g % 1000,
       g * 1.5
FROM generate_series(1, {rows}) g;
"""


def _psql(url: str) -> int:
    out = subprocess.run(
        ["psql", url, "-X", "-c", "\\copy bench TO '/dev/null' CSV"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.split()[-1])  # "COPY <rows>"


def _local(url: str) -> int:
    from reference_sinks.postgres import PostgresSource

    source = PostgresSource(url, "bench", chunks=1)
    connection = source._reader_connection()  # one reader task's read, alone
    try:
        return sum(
            batch.num_rows for split in source.plan() for batch in source._read(connection, split)
        )
    finally:
        connection.close()


def _from_source(spark: Any, url: str, partitions: int, *, count: bool = False) -> int:
    from reference_sinks.postgres import PostgresSource
    from sinkv2_spark import from_source

    df = from_source(spark, PostgresSource(url, "bench", chunks=partitions), parallelism=partitions)
    if count:
        return int(df.count())
    df.write.format("noop").mode("overwrite").save()
    return -1


def _jdbc(
    spark: Any, url: str, partitions: int, bounds: tuple[int, int], *, count: bool = False
) -> int:
    host = url.split("@", 1)[1]
    user = url.split("://", 1)[1].split("@", 1)[0]
    df = spark.read.jdbc(
        f"jdbc:postgresql://{host}",
        "bench",
        column="id",
        lowerBound=bounds[0],
        upperBound=bounds[1],
        numPartitions=partitions,
        properties={"user": user, "driver": "org.postgresql.Driver", "fetchsize": "10000"},
    )
    if count:
        return int(df.count())
    df.write.format("noop").mode("overwrite").save()
    return -1


def _spark_conf(paths: list[str], args: argparse.Namespace) -> dict[str, str]:
    if "jdbc" not in paths:
        return {}
    if Path(args.jdbc_jar).is_file():
        return {"spark.jars": args.jdbc_jar}
    return {"spark.jars.packages": args.jdbc_package}


def _report(times: dict[str, list[float]], rows: int) -> None:
    print("\nmedians:")
    medians = {path: statistics.median(found) for path, found in times.items()}
    for path, seconds in medians.items():
        print(f"  {path:12s} {seconds:7.2f} s {rows / seconds:12,.0f} rows/s")
    if "from_source" in medians and "jdbc" in medians:
        print(f"from_source / spark.read.jdbc: {medians['jdbc'] / medians['from_source']:.2f} x")
    for path in ("local", "from_source"):
        if path in medians and "psql" in medians:
            print(f"{path} / psql: {medians['psql'] / medians[path]:.2f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--path", action="append", choices=PATHS)
    parser.add_argument("--jdbc-package", default=DEFAULT_JDBC_PACKAGE)
    parser.add_argument("--jdbc-jar", default=JDBC_JAR)
    args = parser.parse_args()
    paths = args.path or list(PATHS)
    sys.path.insert(0, str(ROOT))
    import psycopg

    from tests.servers.postgres_server import LocalPostgresServer

    server = LocalPostgresServer.start()
    try:
        url = server.url
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(TABLE.replace("{rows}", str(int(args.rows))))
            connection.execute("VACUUM ANALYZE bench")
            low, high = connection.execute("SELECT min(id), max(id) FROM bench").fetchone()
            size = connection.execute("SELECT pg_table_size('bench')").fetchone()[0]
        print(f"table: {args.rows:,} rows, {size / 2**20:.0f} MiB; paths {paths}", flush=True)
        spark = None
        if {"from_source", "jdbc"} & set(paths):
            spark = session("postgres-source-bench", **_spark_conf(paths, args))
        runs: dict[str, Callable[[], int]] = {
            "psql": lambda: _psql(url),
            "local": lambda: _local(url),
            "from_source": lambda: _from_source(spark, url, args.partitions),
            "jdbc": lambda: _jdbc(spark, url, args.partitions, (low, high)),
        }
        # Warm (JVM classes, Python workers, the JDBC driver) and check each Spark path's count.
        if "from_source" in paths:
            assert _from_source(spark, url, args.partitions, count=True) == args.rows
        if "jdbc" in paths:
            assert _jdbc(spark, url, args.partitions, (low, high), count=True) == args.rows
        times: dict[str, list[float]] = {path: [] for path in paths}
        for round_ in range(args.repeat):
            for path in paths:
                started = time.perf_counter()
                counted = runs[path]()
                elapsed = time.perf_counter() - started
                assert counted in (-1, args.rows), (path, counted)
                times[path].append(elapsed)
                print(
                    f"round {round_} {path:12s} {elapsed:7.2f} s "
                    f"{args.rows / elapsed:12,.0f} rows/s",
                    flush=True,
                )
        _report(times, args.rows)
        if spark is not None:
            spark.stop()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
