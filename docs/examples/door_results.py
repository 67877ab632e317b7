"""What a write through ``format("sinkv2")`` did, seen on the driver.

The example of "See what a write did" in the how-to "Write with
``df.write.format("sinkv2")``". A batch write's job records its `SinkResult` (or
the error it failed with) in the commit state store, and `last_result` reads it
back on the driver; a stream's micro-batches do the same, and a
`SinkResultListener` hands each result to a callback as Spark reports the
micro-batch's progress. Tested on local Spark by
``tests/spark/test_door_results_example.py``.
"""

from __future__ import annotations

from typing import Any

from pyspark.errors import PySparkException

from sinkv2.runtime import SinkResult
from sinkv2_spark import SinkResultListener, last_result


# --8<-- [start:batch]
def write_orders(df: Any, path: str, state_store: str) -> SinkResult | None:
    """Write ``df`` as Parquet files under ``path``, once; return what the job did."""
    writer = (
        df.write.format("sinkv2")
        .option("sink", "files")
        .option("path", path)
        .option("format", "parquet")
        .option("sink_id", "orders")
        .option("checkpoint_id", "1")
        .option("state_store", state_store)
        .mode("append")
    )
    try:
        writer.save()
    except PySparkException as spark_error:  # PythonException, AnalysisException, ...
        failure: PySparkException | None = spark_error
    else:
        failure = None
    # The job's SinkResult, or its own error raised as apply() raises it: the
    # sink's exception type and message first (SinkWriterError, CommitError).
    result = last_result("orders", state_store=state_store)
    if failure is not None:
        raise failure  # the job recorded nothing: it failed while planning (a bad option)
    return result


# --8<-- [end:batch]


# --8<-- [start:stream]
def start_orders_stream(spark: Any, orders: Any, path: str, checkpoint: str) -> Any:
    """Start a stream of ``orders`` into Parquet files; print each micro-batch's result."""
    listener = SinkResultListener(
        "orders-stream",
        checkpoint_location=checkpoint,  # finds the store the stream keeps next to it
        on_result=lambda result: print(result.summary()),
    )
    spark.streams.addListener(listener)  # before start(): sees every micro-batch
    return (
        orders.writeStream.format("sinkv2")
        .option("sink", "files")
        .option("path", path)
        .option("format", "parquet")
        .option("sink_id", "orders-stream")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    ), listener


# --8<-- [end:stream]
