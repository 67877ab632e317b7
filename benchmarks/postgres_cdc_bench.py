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
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--per-epoch", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
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
