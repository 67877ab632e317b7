"""Throughput of reference_sinks.http.HttpSink against the local test server.

One command; the server runs in its own process (so its CPU does not share the
client's GIL), the client is the HttpSink writer driven engine-free (write loop,
``flush(True)``, ``close()``)::

    .venv/bin/python benchmarks/http_sink_bench.py
    .venv/bin/python benchmarks/http_sink_bench.py --latency-ms 5 --capacity 20000

(a) Latency-bound: every request takes ``latency`` ms on the server, capacity is
unlimited. Little's law bounds the throughput at
``max_in_flight_requests x max_batch_size / latency``; each ``--scenario
latency:in_flight:batch`` is run as:

- ``raw aiohttp``: the baseline - ``in_flight`` coroutines posting the same JSON
  bodies with one aiohttp session, no sink (what the transport, the server and the
  machine allow);
- ``default AIMD``: Flink's AIMD congestion control as the writer builds it. It starts
  at ``max_batch_size`` messages in flight (one full request) and adds 10 per
  successful request, so it needs ``(in_flight - 1) x batch / 10`` requests to open
  up fully (the ramp is part of the number);
- ``warmed-up``: the same strategy configured to start fully open
  (``initial_max_in_flight_messages = in_flight x batch``).

(b) Capacity-bound: the server admits ``--capacity`` records/s (token bucket;
beyond it 429 with ``Retry-After``). Sustained throughput vs capacity, and every
record must be stored exactly as often as it was sent (checked via ``GET /stats``
and ``GET /records``).

Rounds are interleaved (a slow minute hits every variant alike); medians are shown
with every run. Targets: (a) warmed-up >= 90 % of the bound; (b) >= 80 % of
capacity, nothing lost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: F401  # puts the repository on sys.path

from reference_sinks.http import HttpSink
from sinkv2.asyncsink import (
    AIMDScalingStrategy,
    AsyncSinkWriterConfiguration,
    CongestionControlRateLimitingStrategy,
    ExponentialBackoff,
)
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext
from tests.servers.http_server import LocalServer


def records(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "key": f"key-{i % 1000}", "value": i / 3} for i in range(n)]


def run(server: LocalServer, configuration: AsyncSinkWriterConfiguration, rows: list[Any]) -> float:
    """Seconds from the first write to the end of ``flush(True)``; the writer is closed after."""
    writer = HttpSink(server.ingest_url, configuration=configuration).create_writer(
        BasicWriterInitContext()
    )
    context = BasicSinkWriterContext()
    started = time.perf_counter()
    for row in rows:
        writer.write(row, context)
    writer.flush(True)
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


def raw_aiohttp(server: LocalServer, batch: int, in_flight: int, rows: list[Any]) -> float:
    """Seconds for ``in_flight`` coroutines to post ``rows`` in batches, without the sink."""
    import aiohttp

    from reference_sinks.http import encode_json

    async def post_all() -> float:
        headers = {"Content-Type": "application/json"}
        connector = aiohttp.TCPConnector(limit=in_flight)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
            starts = iter(range(0, len(rows), batch))

            async def worker() -> None:
                for start in starts:
                    body = encode_json({"records": rows[start : start + batch]})
                    async with session.post(server.ingest_url, data=body) as response:
                        await response.read()

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            return time.perf_counter() - started

    return asyncio.run(post_all())


def hints(batch: int, in_flight: int, *, warmed_up: bool) -> AsyncSinkWriterConfiguration:
    strategy = None
    if warmed_up:
        strategy = CongestionControlRateLimitingStrategy(
            max_in_flight_requests=in_flight,
            initial_max_in_flight_messages=batch * in_flight,
            scaling_strategy=AIMDScalingStrategy(rate_threshold=batch * in_flight),
        )
    return AsyncSinkWriterConfiguration(
        max_batch_size=batch,
        max_in_flight_requests=in_flight,
        max_buffered_requests=batch * in_flight * 4,
        rate_limiting_strategy=strategy,
        retry_backoff=ExponentialBackoff(initial_ms=10, max_ms=200),
        max_retries_per_entry=None,
        request_timeout_ms=60_000,
    )


def latency_bound(
    args: argparse.Namespace, server: LocalServer, latency_ms: float, in_flight: int, batch: int
) -> list[tuple[str, ...]]:
    bound = in_flight * batch / (latency_ms / 1000)
    rows = records(args.rows)
    variants = {
        "raw aiohttp": lambda: raw_aiohttp(server, batch, in_flight, rows),
        "default AIMD": lambda: run(server, hints(batch, in_flight, warmed_up=False), rows),
        "warmed-up": lambda: run(server, hints(batch, in_flight, warmed_up=True), rows),
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, variant in variants.items():
            server.reset()
            server.control(latency_ms=latency_ms)
            elapsed = variant()
            stored = server.stats()["records"]
            assert stored == args.rows, f"{name}: stored {stored} of {args.rows}"
            rates[name].append(args.rows / elapsed)
    table = []
    for name, runs in rates.items():
        rate = statistics.median(runs)
        table.append(
            (
                f"(a) {name}",
                f"{latency_ms:g} ms, {in_flight} x {batch}",
                f"{rate:,.0f}",
                f"{bound:,.0f}",
                f"{rate / bound:.0%}",
                ", ".join(f"{r:,.0f}" for r in runs),
            )
        )
    return table


def capacity_bound(args: argparse.Namespace, server: LocalServer) -> list[tuple[str, ...]]:
    n = int(args.capacity * args.seconds)
    rows = records(n)
    server.reset()
    server.control(capacity=args.capacity, throttle_retry_after=args.retry_after)
    elapsed = run(server, hints(args.batch, args.in_flight, warmed_up=False), rows)
    stats = server.stats()
    stored = server.records()
    ids = {r["id"] for r in stored}
    lost = n - len(ids)
    duplicated = len(stored) - len(ids)
    rate = n / elapsed
    return [
        (
            "(b) capacity",
            f"{args.capacity:,.0f}/s, Retry-After {args.retry_after or 'whole s'}",
            f"{rate:,.0f}",
            f"{args.capacity:,.0f}",
            f"{rate / args.capacity:.0%}",
            f"{n:,} records, lost {lost}, duplicated {duplicated}, "
            f"429s {stats['statuses'].get('429', 0)}",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="records per run of (a)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of (a) per limiter")
    parser.add_argument(
        "--scenario",
        action="append",
        help="(a) latency_ms:in_flight:batch, repeatable; default 5:2:100, 50:8:100 and 200:32:100",
    )
    parser.add_argument("--batch", type=int, default=500, help="max_batch_size in (b)")
    parser.add_argument("--in-flight", type=int, default=4, help="max_in_flight_requests in (b)")
    parser.add_argument("--capacity", type=float, default=20_000)
    parser.add_argument("--seconds", type=float, default=10, help="length of (b) at capacity")
    parser.add_argument(
        "--retry-after", default=None, help="Retry-After of 429s in (b); default whole seconds"
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval for the client (CPython's default: 0.005 s)",
    )
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    scenarios = [
        tuple(map(float, s.split(":")))
        for s in args.scenario or ["5:2:100", "50:8:100", "200:32:100"]
    ]
    table = []
    with LocalServer.start() as server:
        for latency_ms, in_flight, batch in scenarios:
            table += latency_bound(args, server, latency_ms, int(in_flight), int(batch))
        table += capacity_bound(args, server)
    header = ("scenario", "setting", "records/s", "bound", "of bound", "runs / check")
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    for row in [header, *table]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
