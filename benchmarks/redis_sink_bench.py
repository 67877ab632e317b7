"""Write throughput of reference_sinks.redis.RedisSink against redis-benchmark.

One command; starts its own redis-server on a free port on 127.0.0.1 and stops it
by its PID::

    .venv/bin/python benchmarks/redis_sink_bench.py                 # 1M records
    .venv/bin/python benchmarks/redis_sink_bench.py --records 200000 --pipeline 1000

- ``RedisSink writer``: engine-free, one writer driven by hand (write per record,
  flush(True), close): key ``k:{i}``, a 16-byte value, SET, one pipeline per batch;
  once with per-key order kept (the SET default) and once without.
- ``redis-benchmark``: ``-t set -n N -P <pipeline> -q``, the server's own C client
  with the same pipeline depth: the ceiling for one connection.
- ``redis-py pipeline``: the same SETs through redis-py's asyncio pipeline, one
  batch after the other, no sink: the ceiling for a Python client in one process.

Both write to the same server (flushed between runs). Prints records/s and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402 - after the path setup
import redis.asyncio  # noqa: E402

from reference_sinks.redis import RedisSink, SetMode  # noqa: E402
from sinkv2 import (  # noqa: E402
    AsyncSinkWriterConfiguration,
    BasicSinkWriterContext,
    BasicWriterInitContext,
)
from tests.servers.redis_server import LocalRedisServer  # noqa: E402

VALUE = b"v" * 16


def sink_run(port: int, records: int, batch: int, in_flight: int, keep_order: bool) -> float:
    config = AsyncSinkWriterConfiguration(
        max_batch_size=batch,
        max_in_flight_requests=in_flight,
        max_buffered_requests=batch * (in_flight + 2),
        request_timeout_ms=30_000,
    )
    sink = RedisSink(
        f"redis://127.0.0.1:{port}/0",
        SetMode(key="k:{i}", value=lambda row: VALUE),
        configuration=config,
        keep_key_order=keep_order,
    )
    context = BasicWriterInitContext()
    element_context = BasicSinkWriterContext()
    rows = [{"i": i} for i in range(records)]
    start = time.perf_counter()
    writer = sink.create_writer(context)
    write = writer.write
    for row in rows:
        write(row, element_context)
    writer.flush(True)
    writer.close()
    elapsed = time.perf_counter() - start
    assert context.metrics.get_num_records_send_counter().get_count() == records
    return records / elapsed


def redis_py_run(port: int, records: int, batch: int) -> float:
    """The same SETs through redis-py's asyncio pipeline, one batch at a time, no sink."""

    async def run() -> None:
        client = redis.asyncio.Redis(port=port)
        try:
            for start in range(0, records, batch):
                pipeline = client.pipeline(transaction=False)
                for i in range(start, min(start + batch, records)):
                    pipeline.execute_command("SET", f"k:{i}", VALUE)
                await pipeline.execute(raise_on_error=False)
        finally:
            await client.aclose()

    start = time.perf_counter()
    asyncio.run(run())
    return records / (time.perf_counter() - start)


def benchmark_run(port: int, records: int, pipeline: int) -> float:
    out = subprocess.run(
        [
            "redis-benchmark",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-t",
            "set",
            "-n",
            str(records),
            "-P",
            str(pipeline),
            "-q",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"SET: ([\d.]+) requests per second", out.replace("\r", "\n"))
    if match is None:
        sys.exit(f"unexpected redis-benchmark output: {out!r}")
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--pipeline", type=int, default=1_000, help="redis-benchmark -P")
    args = parser.parse_args()
    try:
        server = LocalRedisServer.start()
    except RuntimeError as error:
        sys.exit(str(error))
    port = server.port
    admin = server.client()
    try:
        results = {}
        for name, run in (
            ("redis-benchmark -P", lambda: benchmark_run(port, args.records, args.pipeline)),
            ("redis-py pipeline", lambda: redis_py_run(port, args.records, args.batch)),
            (
                "RedisSink, key order",
                lambda: sink_run(port, args.records, args.batch, args.in_flight, True),
            ),
            (
                "RedisSink, no key order",
                lambda: sink_run(port, args.records, args.batch, args.in_flight, False),
            ),
        ):
            admin.flushall()
            results[name] = run()
            print(f"{name:26s} {results[name]:>12,.0f} records/s", flush=True)
        assert admin.dbsize() == args.records
        base = results["redis-benchmark -P"]
        client = results["redis-py pipeline"]
        for name in ("RedisSink, key order", "RedisSink, no key order"):
            print(
                f"{name} / redis-benchmark: {results[name] / base:.2f}, "
                f"/ redis-py pipeline: {results[name] / client:.2f}"
            )
        print(
            f"records={args.records} batch={args.batch} in_flight={args.in_flight} "
            f"pipeline={args.pipeline}"
        )
    finally:
        admin.close()
        server.stop()


if __name__ == "__main__":
    main()
