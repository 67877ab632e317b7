"""PostgresCdcSource: changes per second through the epoch protocol, against the bare slot.

One command, a throwaway PostgreSQL (``tests/servers/postgres_server.py``), no Spark::

    .venv/bin/python benchmarks/postgres_cdc_bench.py                 # 100,000 changes, 3 rounds
    .venv/bin/python benchmarks/postgres_cdc_bench.py --changes 50000 --rounds 5

Per round, ``--changes`` inserts (transactions of 100 rows, 4 columns: int, text,
numeric, timestamptz) are written after the slot, then read two ways, interleaved:

- ``bare``: ``pg_logical_slot_peek_binary_changes`` of the whole range, rows fetched
  and dropped - the server's decoding and the transfer, the floor for any reader;
- ``source``: what a Spark stream does per micro-batch, without Spark: the source
  coordinator plans epochs of at most ``--per-epoch`` changes (the driver's cut peeks
  the slot), each epoch's slice is read into Arrow (`read_epoch_slice`, as a task
  does), and the next epoch's planning acknowledges it (the slot advances).

Reported: changes/s of each, and the source's time per epoch (planning plus reading).

``--spark``: end to end on Spark (one ``local[2]`` session): a writer commits
transactions of ``--txn-rows`` inserts (``synchronous_commit = on``, as a production
server) at ``--rate`` changes/s, one rate after another, while one stream -
``from_source(PostgresCdcSource(...), streaming=True)`` into ``PostgresSink`` (upsert
by ``id``, two-phase commit), Spark's default trigger (the next micro-batch as soon as
the last one ends), at most ``--per-epoch`` changes a micro-batch - mirrors the table.
A poller reads ``max(id)`` of the target every 10 ms: a change's end-to-end latency is
from its transaction's commit (the writer's clock right after ``COMMIT``) to the poll
that first sees it in the target. Per rate, after ``--warmup`` s: changes/s landed,
latency p50/p95/max, and Spark's micro-batches (count, median ``triggerExecution`` and
rows). ``--rate 0``: a backlog of ``--changes`` written before the stream starts,
drained as fast as it goes (the sustained maximum)::

    .venv/bin/python benchmarks/postgres_cdc_bench.py --spark --rate 200 --rate 1000 --rate 0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference_sinks.postgres import PostgresCdcSource
from reference_sinks.postgres._cdc_server import flush_lsn, format_lsn
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from tests.servers.postgres_server import LocalPostgresServer


def _write(connection: object, first: int, changes: int) -> None:
    for start in range(first, first + changes, 100):
        connection.execute(  # type: ignore[attr-defined]
            "INSERT INTO items SELECT n, 'name ' || n, n / 7.0, now() "
            "FROM generate_series(%s::int, %s::int) n",
            (start, start + 99),
        )
    lsn = flush_lsn(connection)  # type: ignore[arg-type]
    while flush_lsn(connection) < lsn:  # type: ignore[arg-type]
        time.sleep(0.01)


def _bare(connection: object, slot: str, publication: str) -> tuple[float, int]:
    started = time.perf_counter()
    cursor = connection.execute(  # type: ignore[attr-defined]
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
        "'proto_version', '1', 'publication_names', %s)",
        (slot, format_lsn(flush_lsn(connection)), publication),  # type: ignore[arg-type]
    )
    rows = sum(1 for _ in cursor)
    return time.perf_counter() - started, rows


class _Writer(threading.Thread):
    """Transactions of ``txn_rows`` inserts at ``rate`` changes/s; (last id, commit time)."""

    def __init__(self, url: str, first: int, rate: float, txn_rows: int) -> None:
        super().__init__(daemon=True)
        self.url, self.next_id, self.rate, self.txn_rows = url, first, rate, txn_rows
        self.commits: list[tuple[int, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute("SET synchronous_commit = on")
            started = time.perf_counter()
            written = 0
            while not self.done.is_set():
                last = self.next_id + self.txn_rows - 1
                connection.execute(
                    "INSERT INTO items SELECT n, 'name ' || n, n / 7.0, now() "
                    "FROM generate_series(%s::int, %s::int) n",
                    (self.next_id, last),
                )
                self.commits.append((last, time.perf_counter()))
                self.next_id, written = last + 1, written + self.txn_rows
                pause = started + written / self.rate - time.perf_counter()
                if pause > 0:
                    self.done.wait(pause)


class _Poller(threading.Thread):
    """``max(id)`` of the target every 10 ms: (id, when first seen)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: list[tuple[int, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            newest = -1
            while not self.done.wait(0.01):
                row = connection.execute("SELECT coalesce(max(id), -1) FROM mirror").fetchone()
                if row is not None and row[0] > newest:
                    newest = int(row[0])
                    self.seen.append((newest, time.perf_counter()))


def _latencies(commits: list[tuple[int, float]], seen: list[tuple[int, float]]) -> list[float]:
    """Per committed transaction: from its commit to the first poll that saw its last id."""
    out, k = [], 0
    for last, committed in commits:
        while k < len(seen) and seen[k][0] < last:
            k += 1
        if k == len(seen):
            break
        out.append(seen[k][1] - committed)
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _batches(progress: list[Any]) -> str:
    """Spark's micro-batches that read rows: count, median duration and rows."""
    if not progress:
        return "no micro-batch with rows"
    took = statistics.median(p["durationMs"]["triggerExecution"] for p in progress)
    rows = statistics.median(p["numInputRows"] for p in progress)
    return f"{len(progress)} micro-batches with rows, median {took:.0f} ms and {rows:.0f} rows"


def _one_rate(
    spark: Any, url: str, tmp: str, args: argparse.Namespace, *, rate: float, first: int
) -> int:
    """The stream (re)started from its checkpoint, the writer at ``rate``; the next free id."""
    from sinkv2_spark import from_source

    source = PostgresCdcSource(url, "items", publication="items_pub", slot_name="e2e")
    if rate == 0:  # the backlog, before the stream starts again
        with LocalConnection(url) as db:
            _write(db, first, args.changes)
        first += args.changes
    writer = _Writer(url, first, rate or 1, args.txn_rows)
    poller = _Poller(url)
    frame = from_source(
        spark,
        source,
        source_id="e2e",
        streaming=True,
        state_store=str(Path(tmp) / "source.sqlite"),
        parallelism=1,
        max_records_per_trigger=args.per_epoch,
    )
    started = time.perf_counter()
    query = (
        frame.writeStream.format("sinkv2")
        .option("sink", "postgres")
        .option("url", url)
        .option("table", "mirror")
        .option("upsert_key", "id")
        .option("sink_id", "e2e")
        .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
        .start()
    )
    poller.start()
    if rate:
        # the stream running first: one transaction through, then the measured writer
        with LocalConnection(url) as db:
            db.execute("INSERT INTO items VALUES (%s, 'warm', 0, now())", (first,))
        while not poller.seen or poller.seen[-1][0] < first:
            if not query.isActive:
                raise RuntimeError(f"the stream failed: {query.exception()}")
            time.sleep(0.05)
        writer.next_id = first + 1
        started = time.perf_counter()
        writer.start()
        time.sleep(args.warmup + args.seconds)
        writer.done.set()
        writer.join()
    with LocalConnection(url) as db:  # every row landed (a checkpoint may take several commits)
        deadline = time.perf_counter() + 600
        while time.perf_counter() < deadline:
            counts = db.execute(
                "SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM mirror)"
            )
            have = counts.fetchone()
            if have is not None and have[0] == have[1]:
                break
            time.sleep(0.05)
    ended = time.perf_counter()
    poller.done.set()
    poller.join()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    query.stop()
    if not rate:
        print(
            f"backlog {args.changes:,}: drained in {ended - started:.1f} s = "
            f"{args.changes / (ended - started):,.0f} changes/s (the stream's start included); "
            f"{_batches(progress)}",
            flush=True,
        )
        return first
    measured = [(last, at) for last, at in writer.commits if at >= started + args.warmup]
    lat = _latencies(measured, poller.seen)
    span = measured[-1][1] - measured[0][1]
    print(
        f"rate {rate:,.0f}/s: {len(measured) * args.txn_rows / span:,.0f} changes/s committed "
        f"and landed; latency p50 {1000 * _percentile(lat, 0.5):.0f} ms, p95 "
        f"{1000 * _percentile(lat, 0.95):.0f} ms, max {1000 * max(lat):.0f} ms "
        f"({len(lat)} transactions); {_batches(progress)}",
        flush=True,
    )
    return writer.next_id


class LocalConnection:
    """An autocommit psycopg connection as a context manager."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.connection = psycopg.connect(url, autocommit=True)

    def __enter__(self) -> Any:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        self.connection.close()


def spark_end_to_end(args: argparse.Namespace) -> None:
    """``--spark``: the stream into PostgresSink under a steady write rate (module docstring)."""
    from benchmarks.common import session
    from sinkv2_spark import register

    spark = session("postgres-cdc-bench")
    register(spark)
    with LocalPostgresServer.start() as server, tempfile.TemporaryDirectory() as tmp:
        with LocalConnection(server.url) as db:
            db.execute(
                "CREATE TABLE items (id int PRIMARY KEY, name text, x numeric, t timestamptz)"
            )
            db.execute(
                "CREATE TABLE mirror (_op text, _lsn bigint, _seq int, id int PRIMARY KEY, "
                "name text, x numeric, t timestamptz)"
            )
            db.execute("CREATE PUBLICATION items_pub FOR TABLE items")
            # the slot before any change (the query's first start would make it later)
            db.execute("SELECT pg_create_logical_replication_slot('e2e', 'pgoutput')")
        first = 0
        for rate in args.rate:
            first = _one_rate(spark, server.url, tmp, args, rate=rate, first=first)
        with LocalConnection(server.url) as db:
            mirrored = db.execute("SELECT count(*) FROM mirror").fetchone()
            table = db.execute("SELECT count(*) FROM items").fetchone()
            print(f"the target holds {mirrored[0]:,} rows, the table {table[0]:,}", flush=True)
            db.execute("SELECT pg_drop_replication_slot('e2e')")
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--per-epoch", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="end to end on Spark (docstring)")
    parser.add_argument("--rate", type=float, action="append", help="--spark: changes/s")
    parser.add_argument("--txn-rows", type=int, default=10, help="--spark: rows a transaction")
    parser.add_argument("--seconds", type=float, default=30.0, help="--spark: measured per rate")
    parser.add_argument("--warmup", type=float, default=10.0, help="--spark: not measured")
    args = parser.parse_args()
    if args.spark:
        args.rate = args.rate or [200.0, 1000.0]
        spark_end_to_end(args)
        return
    with LocalPostgresServer.start() as server, tempfile.TemporaryDirectory() as tmp:
        db = server.connect()
        db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, x numeric, t timestamptz)")
        db.execute("CREATE PUBLICATION items_pub FOR TABLE items")
        source = PostgresCdcSource(server.url, "items", publication="items_pub", slot_name="b")
        coordinator = SourceEpochCoordinator(
            source, SqliteCommitStateStore(Path(tmp) / "s.sqlite"), "bench", parallelism=1
        )
        epoch = coordinator.initial_epoch()
        results = []
        for round_ in range(args.rounds):
            _write(db, round_ * args.changes, args.changes)
            bare_s, _ = _bare(db, "b", "items_pub")
            started = time.perf_counter()
            read, epochs = 0, 0
            while read < args.changes:
                after = coordinator.next_epoch(epoch, ReadLimit(max_records=args.per_epoch))
                if after == epoch:
                    break
                epoch, epochs = after, epochs + 1
                for piece in coordinator.slices(epoch):
                    read += sum(b.num_rows for b in read_epoch_slice(source, source.schema, piece))
            source_s = time.perf_counter() - started
            assert read == args.changes, (read, args.changes)
            results.append((args.changes / bare_s, args.changes / source_s, source_s / epochs))
            print(
                f"round {round_}: bare {args.changes / bare_s:,.0f} changes/s, source "
                f"{args.changes / source_s:,.0f} changes/s ({epochs} epochs, "
                f"{1000 * source_s / epochs:.0f} ms each)",
                flush=True,
            )
        coordinator.close()
        db.execute("SELECT pg_drop_replication_slot('b')")
        db.close()
    bare, src, per = (statistics.median(column) for column in zip(*results, strict=True))
    print(
        f"median: bare {bare:,.0f} changes/s, source {src:,.0f} changes/s "
        f"({src / bare:.2f} x), {1000 * per:.0f} ms per epoch of {args.per_epoch}"
    )


if __name__ == "__main__":
    main()
