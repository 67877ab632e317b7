"""Read throughput of reference_sinks.redis.RedisStreamSource, engine-free, against a bare loop.

Starts its own redis-server on a free port of 127.0.0.1 (stopped by its PID)::

    .venv/bin/python benchmarks/redis_stream_source_bench.py
    .venv/bin/python benchmarks/redis_stream_source_bench.py --entries 400000 --repeat 5

The streams: 4 keys, ``--entries`` entries in all, each with fields ``user``
(string), ``amount`` (double as text), ``n`` (integer as text) and one undeclared
field. Two paths, in interleaved rounds (a slow minute hits both alike):

- ``bare XRANGE``: redis-py, ``XRANGE key (last + COUNT 1000`` per key in a loop, each
  reply turned into an Arrow batch with the same casts (string -> double, int64): what
  Python does with no source around it.
- ``RedisStreamSource``: one epoch planned by `SourceEpochCoordinator` (4 subtasks,
  ends asked in one pipeline) and its 4 slices read with `read_epoch_slice`, one after
  another in this process (the path a Spark task takes, without Spark).

The median per path is reported, with every run; each run's entry count is checked.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference_sinks.redis import RedisStreamSource
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from tests.reference_sinks.redis.stream_data import FIELDS, append
from tests.servers.redis_server import LocalRedisServer

KEYS = ("a", "b", "c", "d")


def bare(server: LocalRedisServer) -> int:
    rows = 0
    with server.client() as client:
        for key in KEYS:
            last = "0-0"
            while entries := client.xrange(key, f"({last}", "+", count=1000):
                names = (b"user", b"amount", b"n")
                columns = [
                    pa.array([f.get(name) for _, f in entries], pa.binary()) for name in names
                ]
                batch = pa.record_batch(
                    [
                        columns[0].cast(pa.string()),
                        columns[1].cast(pa.string()).cast(pa.float64()),
                        columns[2].cast(pa.string()).cast(pa.int64()),
                    ],
                    names=["user", "amount", "n"],
                )
                rows += batch.num_rows
                last = entries[-1][0].decode()
    return rows


def source(server: LocalRedisServer) -> int:
    stream_source = RedisStreamSource(server.url, FIELDS, keys=list(KEYS))
    store = SqliteCommitStateStore(Path(tempfile.mkdtemp()) / "state.sqlite")
    coordinator = SourceEpochCoordinator(stream_source, store, "bench", parallelism=4)
    try:
        epoch = coordinator.next_epoch(coordinator.initial_epoch(), ReadLimit())
        schema = stream_source.get_produced_type()
        return sum(
            batch.num_rows
            for piece in coordinator.slices(epoch)
            for batch in read_epoch_slice(stream_source, schema, piece)
        )
    finally:
        coordinator.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    paths = {"bare XRANGE": bare, "RedisStreamSource": source}
    runs: dict[str, list[float]] = {name: [] for name in paths}
    with LocalRedisServer.start() as server:
        try:
            with server.client() as client:
                for key in KEYS:
                    for _ in range(args.entries // len(KEYS) // 1000):
                        append(client, key, 1000)
                total = sum(client.xlen(key) for key in KEYS)
            for _ in range(args.repeat):
                for name, path in paths.items():
                    began = time.perf_counter()
                    rows = path(server)
                    seconds = time.perf_counter() - began
                    assert rows == total, f"{name} read {rows} of {total} entries"
                    runs[name].append(total / seconds)
        finally:
            server.stop()
    for name, rates in runs.items():
        shown = ", ".join(f"{rate:,.0f}" for rate in rates)
        print(f"{name:>18}: median {statistics.median(rates):,.0f} entries/s ({shown})")
    ratio = statistics.median(runs["RedisStreamSource"]) / statistics.median(runs["bare XRANGE"])
    print(f"RedisStreamSource / bare XRANGE: {ratio:.2f} x")


if __name__ == "__main__":
    main()
