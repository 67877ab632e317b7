"""Load throughput of reference_sinks.postgres.PostgresSink against Spark's JDBC writer and psql.

One command, one child process (local[2]) and a private PostgreSQL server::

    .venv/bin/python benchmarks/postgres_bench.py                  # 2M rows, 3 rounds, both shapes
    .venv/bin/python benchmarks/postgres_bench.py --rows 5000000 --repeat 5 --shape events
    .venv/bin/python benchmarks/postgres_bench.py --partitions 1 --path sink --path raw --path psql

Needs PostgreSQL's server programs (``apt-get install postgresql``) and, for Spark's
JDBC writer, PostgreSQL's JDBC driver: ``apt-get install -y libpostgresql-jdbc-java``
(``/usr/share/java/postgresql.jar``; ``--jdbc-jar`` points elsewhere).

The same rows (``spark.range(N)`` plus generated columns, see ``SHAPES``) go into
identical tables of one server (``LocalPostgresServer``: 127.0.0.1, a free port,
fsync off) by:

- ``PostgresSink apply()``: ``SinkTopologyTranslator(state_store=SqliteCommitStateStore
  (...)).apply(df, PostgresSink(url, "t1"))``: one writer per partition COPYs CSV
  made by pyarrow inside its own transaction, PREPARE TRANSACTION, the committer
  COMMIT PREPARED;
- ``mapInArrow + COPY (no sink)``: raw ``mapInArrow``, each partition one psycopg
  connection and one plain transaction, COPYing each batch as the sink encodes it
  (``_encode.encode_csv``), COMMIT - no translator, no two-phase commit, no
  bookkeeping: what the sink's machinery costs on top of Spark -> Python -> COPY;
- ``df.write.jdbc``: Spark's JDBC writer, ``mode="append"``, default ``batchsize``
  (1000), one plain transaction per partition (not exactly once: a retried task
  inserts its rows again);
- ``df.write.jdbc rewriteBatchedInserts``: the same with ``rewriteBatchedInserts=true``
  in the URL (the driver folds each batch into multi-row INSERTs);
- ``psql \\copy``: ``psql -c "\\copy t3 FROM 'rows.csv' CSV"``, one process, the same
  rows as a CSV file written beforehand (not timed) by pyarrow.

Every path gets ``df.rdd.getNumPartitions()`` writer tasks (2 under local[2];
``--partitions 1`` makes one: a single writer task against psql's single process,
the plainest reading of "per core"); psql is one client process and one server
backend. ``--path`` picks paths (all by default).

Paths run in interleaved rounds (a slow minute hits every path alike), each timed
run right after the same path loaded 20,000 rows (Spark ends Python workers idle for
a minute: the first Python path of a round would otherwise start its workers while
the next reuses them), the tables (autovacuum off) truncated and a CHECKPOINT taken
before each run; every run's
table must hold the same rows (count and a hash of every row's text); the median is
reported, with every run. Beside the wall time, CPU seconds: the server's (the
postmaster, its reaped children and live backends), the client's (this process and
its descendants: the JVM, the Python workers, psql; sampled every 0.1 s, see
``TreeCpu``) and the whole machine's busy time (``/proc/stat``, other people's work included).
Targets: PostgresSink >= Spark's JDBC writer (the faster of the two settings);
PostgresSink >= 0.7 x psql's COPY per core, reported two ways: rows/s per writer
task against psql's rows/s, and rows per CPU second (client + server) against
psql's.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, session  # the benchmarks folder is not a package

JDBC_JAR = "/usr/share/java/postgresql.jar"
JDBC_INSTALL = "apt-get install -y libpostgresql-jdbc-java"

# name -> (Spark expressions over spark.range's ``id``, the table's columns)
SHAPES: dict[str, tuple[list[str], str]] = {
    "events": (
        [
            "id",
            "concat('name-', cast(id % 1000 as string)) as name",
            "cast(id as double) / 3 as score",
            "timestamp_micros(1700000000000000 + id * 1000) as ts",
        ],
        "id bigint, name text, score double precision, ts timestamptz",
    ),
    "wide": (
        [
            "id",
            "cast(id % 100000 as int) as n",
            "id % 3 = 0 as flag",
            "concat('customer-', cast(id % 50000 as string)) as customer",
            "concat('https://example.com/items/', cast(id * 7919 % 1000003 as string)) as url",
            "repeat(char(97 + cast(id % 26 as int)), 40) as note",
            "cast(id as double) / 7 as a",
            "cast(id % 1000 as double) * 1.5 as b",
            "sqrt(cast(id as double)) as c",
            "date_add(date'2024-01-01', cast(id % 365 as int)) as day",
            "timestamp_micros(1700000000000000 + id * 1000) as ts",
            "cast(id % 100000 as decimal(12, 2)) / 100 as amount",
        ],
        "id bigint, n integer, flag boolean, customer text, url text, note text, "
        "a double precision, b double precision, c double precision, day date, "
        "ts timestamptz, amount numeric(14, 4)",
    ),
}

SINK = "PostgresSink apply()"
RAW = "mapInArrow + COPY (no sink)"
JDBC = "df.write.jdbc"
JDBC_REWRITE = "df.write.jdbc rewriteBatchedInserts"
PSQL = "psql \\copy"
PATHS = (SINK, RAW, JDBC, JDBC_REWRITE, PSQL)
TABLES = {SINK: "t1", RAW: "t2", JDBC: "t3", JDBC_REWRITE: "t3", PSQL: "t4"}


PATH_NAMES = {"sink": SINK, "raw": RAW, "jdbc": JDBC, "jdbc-rewrite": JDBC_REWRITE, "psql": PSQL}


def frame(spark: Any, shape: str, rows: int, partitions: int | None = None) -> Any:
    return spark.range(0, rows, 1, partitions).selectExpr(*SHAPES[shape][0])


def postgres_sink(df: Any, url: str, table: str, scratch: str) -> None:
    from reference_sinks.postgres import PostgresSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    store = SqliteCommitStateStore(Path(tempfile.mkdtemp(dir=scratch)) / "state.sqlite")
    SinkTopologyTranslator(state_store=store).apply(df, PostgresSink(url, table), sink_id="bench")


def plain_copy(df: Any, url: str, table: str) -> None:
    """Each partition COPYs its batches, encoded as the sink encodes them, and commits."""

    def load(batches: Iterator[Any]) -> Iterator[Any]:
        import psycopg
        import pyarrow as pa

        from reference_sinks.postgres._encode import encode_csv
        from reference_sinks.postgres._table import Encoding

        count = 0
        statement = f"COPY {table} FROM STDIN (FORMAT csv)"
        # One plain transaction, committed when the connection's block ends.
        with psycopg.connect(url) as connection, connection.cursor().copy(statement) as copy:
            for batch in batches:
                copy.write(encode_csv(batch, [Encoding.NATIVE] * batch.num_columns))
                count += batch.num_rows
        yield pa.RecordBatch.from_pydict({"n": pa.array([count], pa.int64())})

    df.mapInArrow(load, "n long").collect()


def spark_jdbc(df: Any, jdbc_url: str, table: str, user: str) -> None:
    df.write.jdbc(
        jdbc_url, table, mode="append", properties={"driver": "org.postgresql.Driver", "user": user}
    )


def psql_copy(url: str, table: str, csv_path: str) -> None:
    subprocess.run(
        [
            "psql",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            url,
            "-c",
            f"\\copy {table} FROM '{csv_path}' CSV",
        ],
        check=True,
        capture_output=True,
    )


def _processes(*, reaped: bool = False) -> dict[int, tuple[int, int]]:
    """pid -> (ppid, utime + stime in ticks, + cutime + cstime if ``reaped``) of every process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parts = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except OSError:  # gone meanwhile
            continue
        ticks = parts[11:15] if reaped else parts[11:13]
        found[int(entry.name)] = (int(parts[1]), sum(int(value) for value in ticks))
    return found


class TreeCpu:
    """CPU seconds of ``root``'s process tree while in the block, ``exclude``'s subtree left out.

    ``/proc`` is sampled every 0.1 s and each process counted by its own utime +
    stime, so a process that ends (a Python worker, psql) keeps what it used up to its
    last sample. Summing ``cutime`` instead would lose Spark's Python workers: their
    daemon ignores SIGCHLD, so the kernel reaps them and their time reaches nobody's
    ``cutime``. The sampling thread's own CPU time is subtracted.
    """

    def __init__(self, root: int, *, exclude: int) -> None:
        self._root, self._exclude = root, exclude
        self._start: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._sampler_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.seconds = 0.0

    def _sample(self) -> dict[int, int]:
        processes = _processes()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _) in processes.items():
            children[ppid].append(pid)
        found, todo = {}, [self._root]
        while todo:
            pid = todo.pop()
            if pid == self._exclude or pid not in processes:
                continue
            found[pid] = processes[pid][1]
            todo.extend(children[pid])
        return found

    def _run(self) -> None:
        begin = time.thread_time()
        while not self._stop.wait(0.1):
            self._last.update(self._sample())
        self._sampler_seconds = time.thread_time() - begin

    def __enter__(self) -> TreeCpu:
        self._start = self._sample()
        self._last = dict(self._start)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._last.update(self._sample())
        used = sum(ticks - self._start.get(pid, 0) for pid, ticks in self._last.items())
        self.seconds = used / os.sysconf("SC_CLK_TCK") - self._sampler_seconds


def server_cpu_seconds(postmaster: int) -> float:
    """CPU seconds of the server: the postmaster, its reaped children and its live children."""
    processes = _processes(reaped=True)  # the postmaster waits for its backends
    total = processes[postmaster][1]
    total += sum(ticks for ppid, ticks in processes.values() if ppid == postmaster)
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    with open("/proc/stat") as stat:
        cpu = [int(value) for value in stat.readline().split()[1:]]
    idle = cpu[3] + cpu[4]  # idle + iowait
    return (sum(cpu[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def fingerprint(connection: Any, table: str) -> tuple[int, int]:
    """The table's row count and the sum of a hash of each row's text."""
    row = connection.execute(
        f"SELECT count(*), coalesce(sum(hashtext(t::text)::bigint), 0) FROM {table} AS t"
    ).fetchone()
    return int(row[0]), int(row[1])


def measure(
    server: Any, postmaster: int, tables: list[str], load: Callable[[], None]
) -> dict[str, float]:
    """Run ``load`` into truncated tables; its wall time and CPU seconds."""
    with server.connect() as connection:
        connection.execute(f"TRUNCATE {', '.join(tables)}")
        connection.execute("CHECKPOINT")
    time.sleep(0.2)
    server_before = server_cpu_seconds(postmaster)
    with TreeCpu(os.getpid(), exclude=postmaster) as client:
        machine_before = machine_busy_seconds()
        start = time.perf_counter()
        load()
        seconds = time.perf_counter() - start
        machine = machine_busy_seconds() - machine_before
        time.sleep(0.2)  # backends exit and are reaped
    return {
        "runs": seconds,
        "server_cpu": server_cpu_seconds(postmaster) - server_before,
        "client_cpu": client.seconds,
        "machine_cpu": machine,
    }


def child(  # noqa: PLR0917 - the command line's options, one by one
    rows: int,
    repeat: int,
    shapes: list[str],
    jdbc_jar: str,
    partitions: int | None,
    paths: list[str],
) -> None:
    import pyarrow.csv as pacsv

    from tests.servers.postgres_server import LocalPostgresServer

    server = LocalPostgresServer.start()
    try:
        spark = session(
            "sinkv2-postgres-bench",
            **{"spark.jars": jdbc_jar, "spark.sql.session.timeZone": "UTC"},
        )
        jdbc_url = f"jdbc:postgresql://127.0.0.1:{server.port}/postgres"
        runners: dict[str, Callable[[Any, str, str, str], None]] = {
            SINK: lambda df, table, csv, scratch: postgres_sink(df, server.url, table, scratch),
            RAW: lambda df, table, csv, scratch: plain_copy(df, server.url, table),
            JDBC: lambda df, table, csv, scratch: spark_jdbc(df, jdbc_url, table, server.user),
            JDBC_REWRITE: lambda df, table, csv, scratch: spark_jdbc(
                df, jdbc_url + "?rewriteBatchedInserts=true", table, server.user
            ),
            PSQL: lambda df, table, csv, scratch: psql_copy(server.url, table, csv),
        }
        postmaster = server.pid()
        assert postmaster is not None
        tables = sorted(set(TABLES.values()))
        with tempfile.TemporaryDirectory(prefix="sinkv2-postgres-bench-") as scratch:
            for shape in shapes:
                columns = SHAPES[shape][1]
                with server.connect() as connection:
                    for table in tables:
                        connection.execute(f"DROP TABLE IF EXISTS {table}")
                        connection.execute(
                            f"CREATE TABLE {table} ({columns}) WITH (autovacuum_enabled = false)"
                        )
                df = frame(spark, shape, rows, partitions)
                tasks = df.rdd.getNumPartitions()
                csv_path = os.path.join(scratch, f"{shape}.csv")
                pacsv.write_csv(df.toArrow(), csv_path, pacsv.WriteOptions(include_header=False))
                warm = frame(spark, shape, 20_000, partitions)
                warm_csv = os.path.join(scratch, f"{shape}-warm.csv")
                pacsv.write_csv(warm.toArrow(), warm_csv, pacsv.WriteOptions(include_header=False))
                measured: dict[str, dict[str, list[float]]] = {
                    name: {"runs": [], "server_cpu": [], "client_cpu": [], "machine_cpu": []}
                    for name in paths
                }
                expected: tuple[int, int] | None = None
                for round_ in range(repeat):
                    for name in paths:
                        # Warm right before each timed run: the JVM's classes, the JDBC
                        # driver, and Python workers (Spark ends those idle for a minute).
                        runners[name](warm, TABLES[name], warm_csv, scratch)
                        load = functools.partial(
                            runners[name],
                            frame(spark, shape, rows, partitions),
                            TABLES[name],
                            csv_path,
                            scratch,
                        )
                        run = measure(server, postmaster, tables, load)
                        with server.connect() as connection:
                            loaded = fingerprint(connection, TABLES[name])
                        if loaded[0] != rows:
                            raise RuntimeError(f"{name} loaded {loaded[0]} rows, expected {rows}")
                        expected = expected or loaded
                        if loaded != expected:
                            raise RuntimeError(f"{name} loaded other rows: {loaded} != {expected}")
                        for key, value in run.items():
                            measured[name][key].append(value)
                        print(
                            f"# {shape} round {round_ + 1}/{repeat} {name}: {run['runs']:.2f} s, "
                            f"CPU s server {run['server_cpu']:.2f} client {run['client_cpu']:.2f} "
                            f"machine {run['machine_cpu']:.2f}",
                            file=sys.stderr,
                            flush=True,
                        )
                for name, values in measured.items():
                    line = {"shape": shape, "rows": rows, "tasks": tasks, "path": name, **values}
                    print(json.dumps(line), flush=True)
        spark.stop()
    finally:
        server.stop()


def _median(result: dict[str, Any], key: str) -> float:
    return float(statistics.median(result[key]))


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| shape | path | median s | runs (s) | rows/s | x best jdbc | x psql "
        "| server CPU s | client CPU s | rows per CPU s | machine busy s |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    targets = ["| shape | target | measured | met |", "|---|---|---:|---|"]
    for shape in dict.fromkeys(r["shape"] for r in results):
        of_shape = [r for r in results if r["shape"] == shape]
        rows = of_shape[0]["rows"]
        tasks = of_shape[0]["tasks"]
        rate = {r["path"]: rows / _median(r, "runs") for r in of_shape}
        per_cpu = {
            r["path"]: rows / (_median(r, "server_cpu") + _median(r, "client_cpu"))
            for r in of_shape
        }
        jdbc = max((rate[p] for p in (JDBC, JDBC_REWRITE) if p in rate), default=math.nan)
        for r in of_shape:
            each = ", ".join(f"{run:.2f}" for run in r["runs"])
            path = r["path"]
            lines.append(
                f"| {shape} | {path} | {_median(r, 'runs'):.2f} | {each} | "
                f"{rate[r['path']]:,.0f} | {rate[r['path']] / jdbc:.2f} | "
                f"{rate[r['path']] / rate.get(PSQL, math.nan):.2f} | "
                f"{_median(r, 'server_cpu'):.2f} | "
                f"{_median(r, 'client_cpu'):.2f} | {per_cpu[r['path']]:,.0f} | "
                f"{_median(r, 'machine_cpu'):.2f} |"
            )
        sink, psql = rate.get(SINK, math.nan), rate.get(PSQL, math.nan)
        checks = [
            ("PostgresSink >= the faster Spark JDBC writer", sink / jdbc, 1.0),
            (
                f"PostgresSink per writer task ({tasks} tasks) >= 0.7 x psql \\copy",
                sink / tasks / psql,
                0.7,
            ),
            (
                "PostgresSink rows per CPU second (client + server) >= 0.7 x psql \\copy's",
                per_cpu.get(SINK, math.nan) / per_cpu.get(PSQL, math.nan),
                0.7,
            ),
        ]
        for target, ratio, floor in checks:
            if math.isnan(ratio):
                continue  # a path it needs was not run
            targets.append(
                f"| {shape} | {target} | {ratio:.2f} x | {'yes' if ratio >= floor else 'NO'} |"
            )
    return "\n".join([*lines, "", *targets])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    parser.add_argument("--jdbc-jar", default=JDBC_JAR)
    parser.add_argument("--partitions", type=int, help="writer tasks (Spark's default: 2)")
    parser.add_argument("--path", choices=list(PATH_NAMES), action="append")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shapes = args.shape or list(SHAPES)
    if not Path(args.jdbc_jar).is_file():
        raise SystemExit(
            f"PostgreSQL's JDBC driver is not at {args.jdbc_jar}: {JDBC_INSTALL} "
            "(or pass --jdbc-jar PATH)"
        )
    paths = [PATH_NAMES[name] for name in args.path] if args.path else list(PATHS)
    if args.child:
        child(args.rows, args.repeat, shapes, args.jdbc_jar, args.partitions, paths)
        return
    command = [sys.executable, __file__, "--child", "--rows", str(args.rows)]
    if args.partitions is not None:
        command += ["--partitions", str(args.partitions)]
    for name in args.path or []:
        command += ["--path", name]
    command += ["--repeat", str(args.repeat), "--jdbc-jar", args.jdbc_jar]
    for shape in shapes:
        command += ["--shape", shape]
    load_before = os.getloadavg()
    start = time.perf_counter()
    # The child's stderr (progress, Spark's own messages) passes through.
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed (exit {done.returncode}; its stderr is above)")
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    print(report(results))
    load_after = os.getloadavg()
    print(
        f"\n{len(os.sched_getaffinity(0))} cores; load average before "
        f"{', '.join(f'{v:.2f}' for v in load_before)}, after "
        f"{', '.join(f'{v:.2f}' for v in load_after)}; {time.perf_counter() - start:.0f} s in all"
    )


if __name__ == "__main__":
    main()
