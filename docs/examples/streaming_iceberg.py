"""Stream a Kafka-style topic into an Iceberg table, exactly once.

This is the complete program of the how-to "Stream into Iceberg exactly once"
(docs/streaming.md). There is no Kafka broker here: a directory of JSON-lines files
plays the topic, one file per poll, and every record carries the columns Spark's
Kafka source gives (topic, partition, offset, key, value, timestamp). Only the
reader changes for a real topic. Run it with::

    python docs/examples/streaming_iceberg.py [WORK_DIRECTORY]

It needs ``pip install 'sinkv2[spark,iceberg]'``. Without an argument it works in a
fresh temporary directory.
"""

# --8<-- [start:imports]
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from reference_sinks.iceberg import IcebergSink
from sinkv2_spark import SinkStreamingQuery, SinkTopologyTranslator

# --8<-- [end:imports]


# --8<-- [start:topic]
KAFKA_RECORD = (
    "topic string, partition int, offset long, key string, value string, timestamp timestamp"
)
"""The columns of Spark's Kafka source (there, key and value are binary)."""

PARTITIONS = 2


def produce(topic: Path, first: int, count: int) -> Path:
    """Publish orders ``first`` .. ``first + count - 1`` to the stand-in topic.

    The records land in one new file, as one poll of a consumer would return them.
    Order ``n`` goes to partition ``n % 2`` at offset ``n // 2``.
    """
    topic.mkdir(parents=True, exist_ok=True)
    records = []
    for n in range(first, first + count):
        order = {"order_id": n, "customer": f"c{n % 7}", "amount": 5 + n % 40 * 0.25}
        records.append(
            {
                "topic": "orders",
                "partition": n % PARTITIONS,
                "offset": n // PARTITIONS,
                "key": order["customer"],
                "value": json.dumps(order),
                "timestamp": "2025-06-01T12:00:00Z",
            }
        )
    path = topic / f"orders-{first:08d}.json"
    hidden = topic / f".orders-{first:08d}.json.tmp"  # Spark skips names starting with "."
    hidden.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(hidden, path)  # the file appears whole, or not at all
    return path


# --8<-- [end:topic]


# --8<-- [start:source]
ORDER = "order_id long, customer string, amount double"


def read_orders(spark: SparkSession, topic: Path) -> DataFrame:
    """The topic as a stream of table rows: the JSON value parsed, the Kafka position kept."""
    records = (
        spark.readStream.schema(KAFKA_RECORD)
        .option("maxFilesPerTrigger", 1)  # one poll per micro-batch
        .json(str(topic))
    )
    # With Kafka, only the reader changes:
    #
    #     records = (
    #         spark.readStream.format("kafka")
    #         .option("kafka.bootstrap.servers", "broker-1:9092")
    #         .option("subscribe", "orders")
    #         .option("maxOffsetsPerTrigger", 100_000)
    #         .load()
    #     )
    return records.select(
        F.from_json(F.col("value").cast("string"), ORDER).alias("order"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    ).select("order.*", "kafka_partition", "kafka_offset")


# --8<-- [end:source]


# --8<-- [start:sink]
ORDERS_TABLE = Schema(
    NestedField(1, "order_id", LongType()),
    NestedField(2, "customer", StringType()),
    NestedField(3, "amount", DoubleType()),
    NestedField(4, "kafka_partition", IntegerType()),
    NestedField(5, "kafka_offset", LongType()),
)

SINK_ID = "orders-topic-to-iceberg"
"""The stream's commit history: in the commit state store, and in the table's snapshots."""


def orders_sink(warehouse: Path) -> IcebergSink:
    """IcebergSink on table ``shop.orders`` of a local SQL catalog, created if missing."""
    return IcebergSink.local(warehouse, "shop.orders", schema=ORDERS_TABLE, sink_id=SINK_ID)


# --8<-- [end:sink]


# --8<-- [start:start]
def start_ingest(
    spark: SparkSession,
    topic: Path,
    warehouse: Path,
    checkpoint: Path,
    *,
    trigger: dict[str, Any] | None = None,
    **options: Any,
) -> SinkStreamingQuery:
    """Start the query; the same call starts it for the first time and restarts it."""
    return SinkTopologyTranslator().apply(
        read_orders(spark, topic),
        orders_sink(warehouse),
        sink_id=SINK_ID,
        checkpoint_location=str(checkpoint),
        trigger=trigger or {"processingTime": "30 seconds"},
        query_name="orders-to-iceberg",
        **options,  # more of apply()'s keywords, e.g. decoupled_commit=True
    )


# --8<-- [end:start]


# --8<-- [start:run]
def catch_up(
    spark: SparkSession, topic: Path, warehouse: Path, checkpoint: Path
) -> SinkStreamingQuery:
    """Run the query until it has read everything in the topic, then stop it."""
    query = start_ingest(spark, topic, warehouse, checkpoint, trigger={"availableNow": True})
    query.awaitTermination()  # availableNow: the query ends once it has caught up
    for result in query.recent_results:
        print(
            f"  checkpoint {result.checkpoint_id}: {result.status.value}, "
            f"{result.records_written} rows written, {result.committed} committable(s) committed"
        )
    return query


def demo(spark: SparkSession, work: Path) -> None:
    """Produce, catch up, produce more, restart from the checkpoint location."""
    topic, warehouse, checkpoint = work / "topic", work / "warehouse", work / "checkpoint"

    for first in (0, 10, 20):
        produce(topic, first, 10)
    print("first run:")
    catch_up(spark, topic, warehouse, checkpoint)

    for first in (30, 40):
        produce(topic, first, 10)
    print("second run, from the same checkpoint location:")
    catch_up(spark, topic, warehouse, checkpoint)

    table = orders_sink(warehouse).load_table()
    rows = table.scan().to_arrow()
    positions = set(
        zip(rows["kafka_partition"].to_pylist(), rows["kafka_offset"].to_pylist(), strict=True)
    )
    print(f"table shop.orders: {rows.num_rows} rows, {len(positions)} distinct Kafka positions")
    # Each snapshot's summary names the checkpoint that committed it.
    checkpoints = [str(s.summary["sinkv2.checkpoint-id"]) for s in table.snapshots() if s.summary]
    print(f"snapshots, by checkpoint id: {', '.join(checkpoints)}")


# --8<-- [end:run]


def main(argv: list[str]) -> int:
    """Start a local Spark session and run `demo`."""
    # Spark's Python workers must run this Python: the one with sinkv2 installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="streaming-"))
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("orders-to-iceberg")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        demo(spark, work)
    finally:
        spark.stop()
    print(f"work directory: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
