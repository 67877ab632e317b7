"""What every benchmark shares: the local Spark session and the generated data.

One definition of the data, so that every benchmark writes exactly the same rows:
``spark.range(N)`` plus a ``key`` string and a ``value`` double.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def session(app: str, **conf: str) -> Any:
    """A local[2] session with the UI and progress bars off, plus ``conf``."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def data(spark: Any, rows: int) -> Any:
    """The benchmark data: ``id`` long, ``key`` string (1000 values), ``value`` double."""
    return spark.range(rows).selectExpr(
        "id", "concat('key-', cast(id % 1000 as string)) as key", "cast(id as double) / 3 as value"
    )
