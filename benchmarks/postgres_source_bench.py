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
- ``csv``: the decoder the reader does not use, for comparison: ``psql`` runs the one
  reader's query as ``COPY (...) TO STDOUT (FORMAT csv)`` (ISO dates, UTC, exact
  floats) into a pipe that pyarrow's CSV reader parses into the source's produced
  type (its own threads; quoted empty strings are not NULL). It needs the ``psql``
  binary (as the ``psql`` path does), which a Spark worker need not have;
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

Each run also prints the CPU seconds it cost (Linux ``/proc``), split into the
client (this process and everything under it: Spark's JVM, its Python workers,
psql) and the server (the PostgreSQL server's processes). On a machine shared with
other work the wall time depends on the share of the cores each side gets; the CPU
seconds do not, so they compare paths better there. (With the kernel's autogroup
scheduling the server, started in a session of its own, gets a share apart from the
client's: then the client's CPU seconds are what a busy machine's wall time follows.)
"""

from __future__ import annotations

import argparse
import os
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
PATHS = ("psql", "local", "csv", "from_source", "jdbc")
TABLE = """
CREATE TABLE bench (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12, 2),
                    at timestamptz, flag boolean, qty integer, score double precision);
INSERT INTO bench
SELECT g, 'name-' || g, CASE WHEN g % 10 = 0 THEN NULL ELSE g / 7.0 END,
       timestamptz '2020-01-01 00:00+00' + g * interval '1 second', g % 3 = 0, g % 1000,
       g * 1.5
FROM generate_series(1, {rows}) g;
"""


def _cpu_seconds(root: int | None) -> float:
    """CPU seconds of ``root`` and every process under it, ended ones included (0 off Linux).

    A process's own user and system time plus those of its children it has waited for:
    summed over the live tree this counts every process that ran under ``root``.
    """
    if root is None or not Path("/proc").is_dir():
        return 0.0
    parents: dict[int, int] = {}
    spent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        spent[int(entry.name)] = sum(int(value) for value in fields[11:15])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    ticks, stack = 0, [root]
    while stack:
        pid = stack.pop()
        ticks += spent.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return ticks / os.sysconf("SC_CLK_TCK")


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


def _csv(url: str) -> int:
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from reference_sinks.postgres import PostgresSource

    schema = PostgresSource(url, "bench", chunks=1).get_produced_type()
    query = f"COPY (SELECT {', '.join(schema.names)} FROM bench ORDER BY id) TO STDOUT CSV"
    settings = "-c DateStyle=ISO -c TimeZone=UTC -c extra_float_digits=1"
    env = {**os.environ, "PGOPTIONS": settings}
    with subprocess.Popen(
        ["psql", url, "-X", "-q", "-c", query], stdout=subprocess.PIPE, env=env
    ) as psql:
        assert psql.stdout is not None
        reader = pa_csv.open_csv(
            pa.PythonFile(psql.stdout, mode="r"),
            read_options=pa_csv.ReadOptions(column_names=schema.names, block_size=1 << 22),
            convert_options=pa_csv.ConvertOptions(
                column_types=dict(zip(schema.names, schema.types, strict=True)),
                null_values=[""],  # PostgreSQL CSV: NULL unquoted empty, "" quoted
                quoted_strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
        rows = sum(batch.num_rows for batch in reader)
    if psql.returncode:
        raise RuntimeError(f"psql failed with exit code {psql.returncode}")
    return rows


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


def _report(
    times: dict[str, list[float]], cpu: dict[str, list[tuple[float, float]]], rows: int
) -> None:
    print("\nmedians:")
    medians = {path: statistics.median(found) for path, found in times.items()}
    for path, seconds in medians.items():
        client = statistics.median(spent[0] for spent in cpu[path])
        server = statistics.median(spent[1] for spent in cpu[path])
        print(
            f"  {path:12s} {seconds:7.2f} s {rows / seconds:12,.0f} rows/s; "
            f"CPU client {client:5.2f} s, server {server:5.2f} s"
        )
    if "from_source" in medians and "jdbc" in medians:
        print(f"from_source / spark.read.jdbc: {medians['jdbc'] / medians['from_source']:.2f} x")
        per_round = [
            jdbc / ours for jdbc, ours in zip(times["jdbc"], times["from_source"], strict=True)
        ]
        print("  per round: " + ", ".join(f"{ratio:.2f}" for ratio in per_round))
        for side, index in (("client", 0), ("server", 1)):
            ours_cpu = statistics.median(spent[index] for spent in cpu["from_source"])
            jdbc_cpu = statistics.median(spent[index] for spent in cpu["jdbc"])
            print(f"  {side} CPU s, from_source / jdbc: {ours_cpu:.2f} / {jdbc_cpu:.2f}")
    for path in ("local", "csv", "from_source"):
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
            "csv": lambda: _csv(url),
            "from_source": lambda: _from_source(spark, url, args.partitions),
            "jdbc": lambda: _jdbc(spark, url, args.partitions, (low, high)),
        }
        # Warm (JVM classes, Python workers, the JDBC driver) and check each Spark path's count.
        if "from_source" in paths:
            assert _from_source(spark, url, args.partitions, count=True) == args.rows
        if "jdbc" in paths:
            assert _jdbc(spark, url, args.partitions, (low, high), count=True) == args.rows
        times: dict[str, list[float]] = {path: [] for path in paths}
        cpu: dict[str, list[tuple[float, float]]] = {path: [] for path in paths}
        print(f"load average at start: {os.getloadavg()}", flush=True)
        for round_ in range(args.repeat):
            for path in paths:
                client, server_cpu = _cpu_seconds(os.getpid()), _cpu_seconds(server.pid())
                started = time.perf_counter()
                counted = runs[path]()
                elapsed = time.perf_counter() - started
                time.sleep(0.2)  # the server reaps the run's backends (their CPU counts then)
                spent = (
                    _cpu_seconds(os.getpid()) - client,
                    _cpu_seconds(server.pid()) - server_cpu,
                )
                assert counted in (-1, args.rows), (path, counted)
                times[path].append(elapsed)
                cpu[path].append(spent)
                print(
                    f"round {round_} {path:12s} {elapsed:7.2f} s "
                    f"{args.rows / elapsed:12,.0f} rows/s; CPU client {spent[0]:5.2f} s, "
                    f"server {spent[1]:5.2f} s; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        _report(times, cpu, args.rows)
        print(f"load average at end: {os.getloadavg()}", flush=True)
        if spark is not None:
            spark.stop()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
