"""Write throughput of IcebergSink against Spark's native Parquet writer.

One command, one local[2] Spark, interleaved rounds::

    .venv/bin/python benchmarks/iceberg_sink_bench.py                   # N = 2M, 3 rounds
    .venv/bin/python benchmarks/iceberg_sink_bench.py --rows 500000 --rounds 1

The data is the translator benchmark's: ``spark.range(N)`` + ``key`` string +
``value`` double. Each round writes it by every path, in turn:

- ``native parquet``: Spark's ``df.write.parquet`` (no table, no commit protocol
  beyond Spark's file committer);
- ``IcebergSink``: ``SinkTopologyTranslator.apply`` into an unpartitioned Iceberg
  table on the embedded SQL catalog (SQLite + local files): writers, pre-commit
  aggregation, one guarded fast append;
- ``IcebergSink, partitioned``: the same plus a ``part`` column (``id % 8``) into a
  table with an identity partition on it, through the pre-write repartition.

Prints a markdown table: median seconds, rows/s and the ratio to native.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data, session  # the benchmarks folder is not a package


def native(spark: Any, rows: int, out: Path) -> None:
    data(spark, rows).write.mode("overwrite").parquet(str(out))


def _iceberg(spark: Any, rows: int, out: Path, *, partitioned: bool) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    from reference_sinks.iceberg import IcebergSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    fields = [
        NestedField(1, "id", LongType()),
        NestedField(2, "key", StringType()),
        NestedField(3, "value", DoubleType()),
    ]
    frame = data(spark, rows)
    spec = None
    if partitioned:
        fields.append(NestedField(4, "part", LongType()))
        spec = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "part"))
        frame = frame.selectExpr("*", "id % 8 as part")
    sink = IcebergSink.local(out, "bench.events", schema=Schema(*fields), partition_spec=spec)
    translator = SinkTopologyTranslator(state_store=SqliteCommitStateStore(out / "state.sqlite"))
    translator.apply(frame, sink, sink_id="bench", checkpoint_id=1)
    table = sink.load_table()
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    if int(summary["total-records"]) != rows:
        raise AssertionError(f"expected {rows} rows, the table has {summary['total-records']}")


def iceberg(spark: Any, rows: int, out: Path) -> None:
    _iceberg(spark, rows, out, partitioned=False)


def iceberg_partitioned(spark: Any, rows: int, out: Path) -> None:
    _iceberg(spark, rows, out, partitioned=True)


PATHS: dict[str, Callable[[Any, int, Path], None]] = {
    "native parquet (df.write.parquet)": native,
    "IcebergSink (unpartitioned)": iceberg,
    "IcebergSink (identity-partitioned, 8 partitions)": iceberg_partitioned,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = session("sinkv2-iceberg-bench", **{"spark.sql.shuffle.partitions": "2"})
    data(spark, 1000).write.mode("overwrite").format("noop").save()  # warm up the JVM
    timings: dict[str, list[float]] = {name: [] for name in PATHS}
    for _ in range(args.rounds):
        for name, run in PATHS.items():
            out = Path(tempfile.mkdtemp(prefix="iceberg-bench-"))
            try:
                start = time.perf_counter()
                run(spark, args.rows, out / "out")
                timings[name].append(time.perf_counter() - start)
            finally:
                shutil.rmtree(out, ignore_errors=True)
    base = statistics.median(timings["native parquet (df.write.parquet)"])
    print(f"\nN = {args.rows:,} rows, local[2], {args.rounds} interleaved round(s), median\n")
    print("| path | seconds | rows/s | vs native |")
    print("|---|---:|---:|---:|")
    for name, seconds in timings.items():
        median = statistics.median(seconds)
        print(f"| {name} | {median:.2f} | {args.rows / median:,.0f} | {base / median:.2f}x |")
    print(
        "\nall runs (s): "
        + "; ".join(f"{k}: {[round(t, 2) for t in v]}" for k, v in timings.items())
    )
    spark.stop()


if __name__ == "__main__":
    main()
