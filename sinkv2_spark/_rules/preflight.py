"""Before any Spark job: can the sink travel to Spark's Python workers, and be loaded there?

Two mistakes otherwise surface as hundreds of lines of ``PythonException`` from the
first task: a sink holding something that does not pickle (a lock, a socket, a
client), and a sink whose module the workers cannot import. `check_shippable`
pickles the sink on the driver, as Spark will, and names the attribute that
fails; `check_loadable` unpickles it in one tiny task, once per Spark
application and sink class, and turns an import error into the fix for each
deployment mode.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Final

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError
from sinkv2.text import find_unpicklable, short_repr
from sinkv2_spark._engine.connect import application_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["check_loadable", "check_shippable"]

_LOADED: set[tuple[str, str]] = set()
"""(Spark application id, sink class) pairs whose workers loaded the sink already."""

_FIX: Final = (
    "Spark's Python workers must be able to import the module that defines the sink "
    "({module!r}). Local mode: start Python (and so the Spark session) with that module's "
    "directory on PYTHONPATH, or install it as a package into the workers' Python. "
    "Standalone, YARN, Kubernetes: ship it with spark.sparkContext.addPyFile('<file>.py or "
    ".zip'), spark-submit --py-files, or the spark.submit.pyFiles setting, or install it "
    "on every worker. Spark Connect: spark.addArtifacts('<file>.py or .zip', pyfile=True), "
    "or install it into the server's and its workers' Python"
)


def check_shippable(sink: Any, capabilities: SinkCapabilities) -> bytes:
    """The sink as Spark's cloudpickle pickles it for tasks.

    Raises:
        SinkConfigurationError: The sink (or its committable serializer) does not
            pickle; the message names the attribute that fails and its type.
    """
    from pyspark import cloudpickle  # noqa: PLC0415  # the pickler Spark ships tasks with

    dumps: Callable[[object], bytes] = cloudpickle.dumps

    parts: list[tuple[str, object]] = [("sink", sink)]
    if capabilities.committer:
        parts.append(("sink.get_committable_serializer()", sink.get_committable_serializer()))
    blob = b""
    for name, part in parts:
        try:
            pickled = dumps(part)
        except Exception as error:
            found = find_unpicklable(part, dumps, name) or (name, part)
            path, culprit = found
            raise SinkConfigurationError(
                f"{capabilities.sink_type} cannot be shipped to Spark's executors: {path} "
                f"({short_repr(culprit, 120)} of type {type(culprit).__name__}) does not "
                f"pickle ({type(error).__name__}: {error}). Keep sinks plain data: open "
                "connections, clients, locks and files in create_writer() / "
                "create_committer(), not in the sink's __init__"
            ) from error
        blob = blob or pickled
    return blob


def check_loadable(
    spark: SparkSession, sink: Any, capabilities: SinkCapabilities, blob: bytes
) -> None:
    """Unpickle ``blob`` (the sink) in one Python worker; once per application and class.

    Raises:
        SinkConfigurationError: A worker cannot load the sink (typically its module
            is not importable there); the message says how to ship it.
    """
    cls = type(sink)
    key = (application_id(spark), f"{cls.__module__}.{cls.__qualname__}")
    if key in _LOADED:
        return
    rows = spark.range(1, numPartitions=1).mapInArrow(_probe(blob), "error string").collect()
    error = rows[0]["error"] if rows else "the probe task returned nothing"
    if error:
        raise SinkConfigurationError(
            f"{capabilities.sink_type} cannot be loaded by Spark's Python workers: {error}. "
            + _FIX.format(module=cls.__module__)
        )
    _LOADED.add(key)


def _probe(blob: bytes) -> Any:
    """A task function that unpickles ``blob`` and reports the error as data.

    Defined here but pickled by value (a closure), so it runs even where sinkv2
    itself is missing - which it then reports.
    """

    def probe(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa  # noqa: PLC0415  # runs in the worker

        for _ in batches:
            pass
        try:
            pickle.loads(blob)  # the driver's own sink, pickled just now
        except BaseException as error:  # noqa: BLE001  # reported to the driver as data
            message = f"{type(error).__name__}: {error}"
        else:
            message = ""
        yield pa.RecordBatch.from_pylist([{"error": message}])

    return probe
