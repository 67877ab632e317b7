"""Write throughput of reference_sinks.redis.RedisSink: engine-free and through apply() on Spark.

One command per part; each starts its own redis-server on a free port of 127.0.0.1
and stops it by its PID::

    .venv/bin/python benchmarks/redis_sink_bench.py                  # engine-free, 1M rows
    .venv/bin/python benchmarks/redis_sink_bench.py --spark          # apply() on local[2], 2M rows
    .venv/bin/python benchmarks/redis_sink_bench.py --rows 500000 --repeat 5

Every path writes the same rows (``common.data``: ``id`` long, ``key`` string,
``value`` double) as the same commands: ``SET k:{id} <the row as compact JSON>``,
or ``HSET h:{id} id .. key .. value ..``, in batches of 1,000 commands. Paths run in
interleaved rounds (a slow minute hits every path alike) on a flushed server; the
median per path is reported, with every run, and each run's key count is checked.

Engine-free (Arrow batches of 10,000 rows, made before the clock starts):

- ``raw RESP pipeline``: each row to JSON (``to_pylist`` + a compact JSON encoder),
  ``hiredis.pack_command``, 1,000 commands per write on one asyncio socket, 4
  batches in flight, replies parsed with one ``hiredis.Reader``: what Python can
  drive, with no sink.
- ``redis-py pipeline``: the same SETs through redis-py's asyncio pipeline, one
  batch after the other.
- ``RedisSink write()``: one writer driven by hand, a row dict per ``write``
  (the per-element path, as on an engine without Arrow), then ``flush(True)``.
- ``RedisSink Arrow``: the same writer fed ``write_arrow_batch`` (the path Spark
  takes): keys and JSON built per column.
- ``redis-benchmark -t set -P 1000``: the server's own C client (its own 3-byte
  values), the ceiling of one connection.

Spark (``--spark``, local[2], 2 partitions):

- ``bare mapInArrow SET`` / ``HSET``: per task one socket, rows to JSON (or
  fields), ``hiredis.pack_command``, 1,000 commands per write, replies read with
  ``hiredis.Reader``: no sink, no retries, no state.
- ``RedisSink SET, key order`` / ``no key order`` / ``RedisSink HSET``:
  ``SinkTopologyTranslator.apply`` with the sink's default configuration.

Target: each RedisSink path >= 0.7 x the bare mapInArrow path of the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, data, session  # the benchmarks folder is not a package

sys.path.insert(0, str(ROOT))

import hiredis
import pyarrow as pa
import redis.asyncio

from reference_sinks.redis import HashMode, RedisSink, SetMode
from sinkv2.asyncsink import AsyncSinkWriterConfiguration
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext
from tests.servers.redis_server import LocalRedisServer

BATCH = 1_000
IN_FLIGHT = 4
ARROW_ROWS = 10_000


def arrow_batches(rows: int) -> list[pa.RecordBatch]:
    """``common.data``'s rows, engine-free: id, ``key-<id % 1000>``, id / 3."""
    batches = []
    for start in range(0, rows, ARROW_ROWS):
        ids = range(start, min(start + ARROW_ROWS, rows))
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "id": pa.array(ids, pa.int64()),
                    "key": [f"key-{i % 1000}" for i in ids],
                    "value": [i / 3 for i in ids],
                }
            )
        )
    return batches


def set_commands(batch: pa.RecordBatch, pack: Callable[..., bytes]) -> list[bytes]:
    """The batch's SETs, packed: what every path sends, built the plain Python way."""
    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    return [pack((b"SET", b"k:%d" % row["id"], encode(row).encode())) for row in batch.to_pylist()]


# -- engine-free ---------------------------------------------------------------------


def raw_pipeline_run(port: int, batches: list[pa.RecordBatch]) -> float:
    """Rows -> JSON -> packed SETs, 1,000 per write, 4 writes in flight on one socket."""

    async def run() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        parser = hiredis.Reader()
        in_flight: deque[int] = deque()
        replies = 0

        async def read_one_batch() -> None:
            nonlocal replies
            wanted = in_flight.popleft()
            got = 0
            while got < wanted:
                reply = parser.gets()
                if reply is False:
                    parser.feed(await reader.read(1 << 16))
                    continue
                if isinstance(reply, hiredis.ReplyError):
                    raise reply
                got += 1
            replies += got

        pending: list[bytes] = []
        for batch in batches:
            pending += set_commands(batch, hiredis.pack_command)
            while len(pending) >= BATCH or (batch is batches[-1] and pending):
                chunk, pending = pending[:BATCH], pending[BATCH:]
                if len(in_flight) == IN_FLIGHT:
                    await read_one_batch()
                writer.write(b"".join(chunk))
                in_flight.append(len(chunk))
        while in_flight:
            await read_one_batch()
        writer.close()
        await writer.wait_closed()

    start = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - start


def redis_py_run(port: int, batches: list[pa.RecordBatch]) -> float:
    """The same SETs through redis-py's asyncio pipeline, one batch at a time."""
    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    async def run() -> None:
        client = redis.asyncio.Redis(port=port)
        try:
            pipeline = client.pipeline(transaction=False)
            for batch in batches:
                for row in batch.to_pylist():
                    pipeline.execute_command("SET", b"k:%d" % row["id"], encode(row).encode())
                    if len(pipeline) == BATCH:
                        await pipeline.execute(raise_on_error=True)
            if len(pipeline):
                await pipeline.execute(raise_on_error=True)
        finally:
            await client.aclose()

    start = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - start


def sink_run(port: int, batches: list[pa.RecordBatch], *, key_order: bool, arrow: bool) -> float:
    config = AsyncSinkWriterConfiguration(
        max_batch_size=BATCH,
        max_in_flight_requests=IN_FLIGHT,
        max_buffered_requests=BATCH * (IN_FLIGHT + 6),
        request_timeout_ms=30_000,
    )
    sink = RedisSink(
        f"redis://127.0.0.1:{port}/0",
        SetMode(key="k:{id}"),
        configuration=config,
        keep_key_order=key_order,
    )
    context = BasicWriterInitContext()
    element_context = BasicSinkWriterContext()
    rows = None if arrow else [row for batch in batches for row in batch.to_pylist()]
    start = time.perf_counter()
    writer = sink.create_writer(context)
    if rows is None:
        for batch in batches:
            writer.write_arrow_batch(batch, element_context)
    else:
        write = writer.write
        for row in rows:
            write(row, element_context)
    writer.flush(True)
    writer.close()
    elapsed = time.perf_counter() - start
    sent = context.metrics.get_num_records_send_counter().get_count()
    if sent != sum(batch.num_rows for batch in batches):
        raise RuntimeError(f"the sink sent {sent} records")
    return elapsed


def redis_benchmark_run(port: int, rows: int) -> float:
    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set"]
    out = subprocess.run(
        [*command, "-n", str(rows), "-P", str(BATCH), "-q"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"SET: ([\d.]+) requests per second", out.replace("\r", "\n"))
    if match is None:
        sys.exit(f"unexpected redis-benchmark output: {out!r}")
    return rows / float(match.group(1))


def engine_free(rows: int, repeat: int) -> None:
    batches = arrow_batches(rows)
    paths: dict[str, Callable[[int], float]] = {
        "raw RESP pipeline": lambda port: raw_pipeline_run(port, batches),
        "redis-py pipeline": lambda port: redis_py_run(port, batches),
        "RedisSink write(), key order": lambda port: sink_run(
            port, batches, key_order=True, arrow=False
        ),
        "RedisSink write(), no key order": lambda port: sink_run(
            port, batches, key_order=False, arrow=False
        ),
        "RedisSink Arrow, key order": lambda port: sink_run(
            port, batches, key_order=True, arrow=True
        ),
        "RedisSink Arrow, no key order": lambda port: sink_run(
            port, batches, key_order=False, arrow=True
        ),
        "redis-benchmark -P 1000": lambda port: redis_benchmark_run(port, rows),
    }
    server = LocalRedisServer.start()
    admin = server.client()
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for round_ in range(repeat):
            for name, path in paths.items():
                admin.flushall()
                seconds[name].append(path(server.port))
                if name != "redis-benchmark -P 1000" and admin.dbsize() != rows:
                    raise RuntimeError(f"{name} left {admin.dbsize()} keys, expected {rows}")
                print(f"round {round_}: {name}: {rows / seconds[name][-1]:,.0f} rows/s", flush=True)
    finally:
        admin.close()
        server.stop()
    print(report(rows, seconds, {"RedisSink": "raw RESP pipeline"}))
    print(f"\nrows={rows} batch={BATCH} in_flight={IN_FLIGHT} repeat={repeat}")


# -- Spark ---------------------------------------------------------------------------
# The bare paths repeat the packing above on purpose: functions imported from another
# module are pickled by reference, and Spark's executors cannot import this script.


Batches = Iterator[pa.RecordBatch]


def _bare(port: int, command: str) -> Callable[[Batches], Batches]:
    def write(batches: Batches) -> Batches:
        import json
        import socket

        import hiredis
        import pyarrow as pa

        connection = socket.create_connection(("127.0.0.1", port))
        parser = hiredis.Reader()
        pack = hiredis.pack_command
        encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
        pending: list[bytes] = []
        count = 0

        def send() -> None:
            connection.sendall(b"".join(pending))
            got = 0
            while got < len(pending):
                reply = parser.gets()
                if reply is False:
                    parser.feed(connection.recv(1 << 16))
                elif isinstance(reply, hiredis.ReplyError):
                    raise reply
                else:
                    got += 1
            pending.clear()

        for batch in batches:
            for row in batch.to_pylist():
                if command == "SET":
                    pending.append(pack((b"SET", b"k:%d" % row["id"], encode(row).encode())))
                else:
                    fields = (b"id", b"%d" % row["id"], b"key", row["key"].encode())
                    fields += (b"value", repr(row["value"]).encode())
                    pending.append(pack((b"HSET", b"h:%d" % row["id"], *fields)))
                if len(pending) == 1_000:
                    send()
            count += batch.num_rows
        if pending:
            send()
        connection.close()
        yield pa.RecordBatch.from_pydict({"n": [count]}, schema=pa.schema([("n", pa.int64())]))

    return write


def spark_paths(port: int, scratch: str) -> dict[str, Callable[[Any, int], None]]:
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    url = f"redis://127.0.0.1:{port}/0"
    runs = iter(range(1_000_000))

    def apply(spark: Any, rows: int, sink: RedisSink) -> None:
        store = SqliteCommitStateStore(Path(scratch) / f"state-{next(runs)}.sqlite")
        SinkTopologyTranslator(state_store=store).apply(
            data(spark, rows), sink, sink_id="redis-bench"
        )

    def bare(command: str) -> Callable[[Any, int], None]:
        def run(spark: Any, rows: int) -> None:
            total = data(spark, rows).mapInArrow(_bare(port, command), "n long").collect()
            if sum(row.n for row in total) != rows:
                raise RuntimeError(f"bare {command} wrote {total}")

        return run

    return {
        "bare mapInArrow SET": bare("SET"),
        "RedisSink SET, key order": lambda spark, rows: apply(
            spark, rows, RedisSink(url, SetMode(key="k:{id}"))
        ),
        "RedisSink SET, no key order": lambda spark, rows: apply(
            spark, rows, RedisSink(url, SetMode(key="k:{id}"), keep_key_order=False)
        ),
        "bare mapInArrow HSET": bare("HSET"),
        "RedisSink HSET, key order": lambda spark, rows: apply(
            spark, rows, RedisSink(url, HashMode(key="h:{id}"))
        ),
    }


def on_spark(rows: int, repeat: int) -> None:
    spark = session("sinkv2-redis-sink-bench", **{"spark.sql.shuffle.partitions": "2"})
    server = LocalRedisServer.start()
    admin = server.client()
    seconds: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="sinkv2-redis-bench-") as scratch:
            paths = spark_paths(server.port, scratch)
            seconds = {name: [] for name in paths}
            for path in paths.values():  # warm up the JVM and the Python workers
                path(spark, 20_000)
            for round_ in range(repeat):
                for name, path in paths.items():
                    admin.flushall()
                    start = time.perf_counter()
                    path(spark, rows)
                    seconds[name].append(time.perf_counter() - start)
                    if admin.dbsize() != rows:
                        raise RuntimeError(f"{name} left {admin.dbsize()} keys, expected {rows}")
                    rate = rows / seconds[name][-1]
                    print(f"round {round_}: {name}: {rate:,.0f} rows/s", flush=True)
    finally:
        admin.close()
        server.stop()
        spark.stop()
    print(
        report(
            rows,
            seconds,
            {"RedisSink SET": "bare mapInArrow SET", "RedisSink HSET": "bare mapInArrow HSET"},
        )
    )
    print(f"\nrows={rows} repeat={repeat} local[2], data partitions: Spark's default")


def report(rows: int, seconds: dict[str, list[float]], baselines: dict[str, str]) -> str:
    """A markdown table: median rows/s per path, every run, and x its baseline."""
    median = {name: statistics.median(runs) for name, runs in seconds.items()}
    lines = ["| path | rows/s (median) | runs (rows/s) | x baseline |", "|---|---:|---|---:|"]
    for name, runs in seconds.items():
        rate = rows / median[name]
        each = ", ".join(f"{rows / run:,.0f}" for run in runs)
        base = next((b for prefix, b in baselines.items() if name.startswith(prefix)), None)
        ratio = f"{median[base] / median[name]:.2f} x {base}" if base else "-"
        lines.append(f"| {name} | {rate:,.0f} | {each} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spark", action="store_true", help="apply() on local[2]")
    parser.add_argument("--rows", type=int, default=None, help="1M engine-free, 2M on Spark")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.spark:
        on_spark(args.rows or 2_000_000, args.repeat)
    else:
        engine_free(args.rows or 1_000_000, args.repeat)


if __name__ == "__main__":
    main()
