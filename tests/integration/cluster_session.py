"""The Spark session a test's driver script opens on the two-worker standalone cluster."""

from __future__ import annotations

from typing import Any


def cluster_session(master: str, *, speculation_after: str | None = None) -> Any:
    """A session on ``master``: loopback only, no UI, small executors.

    With ``speculation_after`` (a duration such as ``"1s"``), Spark starts a
    speculative copy of a task that runs longer than that and 1.5 x the median of
    the finished half of its stage, checking every 100 ms.
    """
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
    )
    if speculation_after is not None:
        builder = (
            builder.config("spark.speculation", "true")
            .config("spark.speculation.interval", "100ms")
            .config("spark.speculation.quantile", "0.5")
            .config("spark.speculation.multiplier", "1.5")
            .config("spark.speculation.minTaskRuntime", speculation_after)
        )
    return builder.getOrCreate()
