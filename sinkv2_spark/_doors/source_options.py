"""The read door's options: which source, made by which factory, and the door's own options.

Spark hands a Python data source its ``.option(...)`` values as strings, with the
keys lower-cased. The options in `SOURCE_DOOR_OPTIONS` are the door's own; every
other one is passed to the source's factory as a keyword argument (still a string).
``batch_rows`` goes to a factory that names it as a parameter too (the files source).
An option spelled as Spark's own sources or `from_source` spell it
(``maxFilesPerTrigger``, ``max_splits_per_trigger``) is refused with the door's name.
A source Spark cannot pickle is refused by every door before Spark tries
(`check_source_shippable`), naming the attribute that does not pickle; one whose
module Spark's Python workers cannot import is named with the ways to ship it
(`workers_must_import`).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from sinkv2.errors import SinkConfigurationError, SinkV2Error
from sinkv2.runtime import DEFAULT_BATCH_ROWS
from sinkv2.source import SourceDefinitionError, inspect_source
from sinkv2.text import find_unpicklable, short_repr
from sinkv2_spark._rules.options import load_factory, options_not_taken

__all__ = [
    "SOURCE_DOOR_OPTIONS",
    "SOURCE_SHORT_NAMES",
    "check_source_shippable",
    "door_source",
    "positive_option",
    "task_options",
    "workers_must_import",
]

SOURCE_SHORT_NAMES: Final[Mapping[str, str]] = {
    "files": "reference_sinks.files:file_source_from_options",
    "redis_stream": "reference_sinks.redis:redis_stream_source_from_options",
    "iceberg": "reference_sinks.iceberg:iceberg_source_from_options",
    "postgres": "reference_sinks.postgres:postgres_source_from_options",
}
"""Reference sources by short name: ``.option("source", "files")``, ``"postgres"``."""

SOURCE_DOOR_OPTIONS: Final = (
    "source",
    "source_id",
    "parallelism",
    "batch_rows",
    "state_store",
    "maxrecordspertrigger",
    "maxsplitspertrigger",
    "nativeread",
)
"""The read door's own options (lower-cased, as Spark passes them); the rest go to the factory."""

_OTHER_SPELLINGS: Final[Mapping[str, str]] = {
    "maxfilespertrigger": (
        "is Spark's file-stream name; this door's is maxSplitsPerTrigger (a file is one "
        "split, a large Parquet file may be several)"
    ),
    "maxoffsetspertrigger": "is Spark's Kafka name; this door's is maxRecordsPerTrigger",
    "max_splits_per_trigger": "is from_source()'s keyword; the option is maxSplitsPerTrigger",
    "max_records_per_trigger": "is from_source()'s keyword; the option is maxRecordsPerTrigger",
    "native_read": "is from_source()'s keyword; the option is nativeRead",
    "sourceid": "is spelled source_id",
    "statestore": "is spelled state_store",
    "batchrows": "is spelled batch_rows",
    "checkpointlocation": (
        "belongs on writeStream (Spark's checkpoint of the query); the source's positions "
        "are recorded under source_id"
    ),
}
"""Options users spell as Spark or `from_source` does, lower-cased: what this door calls them."""


def task_options(options: Mapping[str, str]) -> tuple[int, int]:
    """The read doors' ``parallelism`` (default: this host's CPUs) and ``batch_rows``."""
    parallelism = positive_option(options, "parallelism") or max(os.cpu_count() or 1, 1)
    return parallelism, positive_option(options, "batch_rows") or DEFAULT_BATCH_ROWS


def positive_option(options: Mapping[str, str], name: str) -> int | None:
    """The option ``name`` as a positive int, or ``None`` when it is not given.

    Raises:
        SinkConfigurationError: It is given and not a positive integer.
    """
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SinkConfigurationError(
            f"the {name!r} option must be a positive integer (got {raw!r})"
        )
    return value


def door_source(options: Mapping[str, str]) -> Any:
    """The source ``.option("source", ...)`` names, made from the other options.

    Raises:
        SinkConfigurationError: No ``source`` option, a bad factory, or a factory
            that refused its options.
        SourceDefinitionError: What the factory returned is not a FLIP-27 source.
    """
    spec = (options.get("source") or "").strip()
    if not spec:
        raise SinkConfigurationError(
            "spark.read.format('sinkv2') needs .option('source', 'module:callable'): a "
            "function or class that returns a FLIP-27 Source; every option other than "
            f"{list(SOURCE_DOOR_OPTIONS)} is passed to it as a keyword argument (a string)"
        )
    misspelled = [
        f"{key!r} {_OTHER_SPELLINGS[key.lower()]}"
        for key in options
        if key.lower() in _OTHER_SPELLINGS
    ]
    if misspelled:
        raise SinkConfigurationError(
            f"spark.read/readStream.format('sinkv2'): the option {'; '.join(misspelled)}. "
            f"The door's own options are {list(SOURCE_DOOR_OPTIONS)} (case does not matter); "
            "every other one goes to the source's factory"
        )
    factory = load_factory(spec, option="source", short_names=SOURCE_SHORT_NAMES)
    kwargs = {k: v for k, v in options.items() if k.lower() not in SOURCE_DOOR_OPTIONS}
    kwargs.update(_shared_options(factory, options))
    try:
        signature: inspect.Signature | None = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to read: the call decides
        signature = None
    if signature is not None:
        try:
            signature.bind(**kwargs)
        except TypeError as error:
            raise SinkConfigurationError(
                options_not_taken(
                    spec, kwargs, signature, error, SOURCE_DOOR_OPTIONS, kind="source"
                )
            ) from error
    try:
        source = factory(**kwargs)
    except SinkV2Error as error:
        if not isinstance(factory, type) or not isinstance(error, SinkConfigurationError):
            raise
        raise SinkConfigurationError(f"{error}{_strings_hint(factory)}") from error
    except (TypeError, ValueError) as error:
        hint = _strings_hint(factory) if isinstance(factory, type) else ""
        raise SinkConfigurationError(
            f"source {spec!r} refused its options {sorted(kwargs)}: {type(error).__name__}: "
            f"{error}. Options other than {list(SOURCE_DOOR_OPTIONS)} are passed to the "
            f"source's factory as keyword arguments (Spark lower-cases their names){hint}"
        ) from error
    inspect_source(source)
    return source


def _shared_options(factory: Any, options: Mapping[str, str]) -> dict[str, str]:
    """The door's options a factory names as its own parameters too: ``batch_rows``.

    ``batch_rows`` means rows per Arrow batch both to the door (for readers that emit
    rows) and to a source that reads batches (``files``): it goes to both.
    """
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read: the door's own only
        return {}
    return {
        key: value
        for key, value in options.items()
        if key.lower() == "batch_rows" and "batch_rows" in parameters
    }


def _strings_hint(cls: type) -> str:
    """What to do when the ``source`` option names a class that wants other types than str."""
    return (
        f". The 'source' option names the class {cls.__qualname__}, which gets every option "
        "as a string (as Spark passes them): name a factory function that converts them "
        "instead, e.g. def numbers(start, end): return NumberSequenceSource(int(start), "
        "int(end))"
    )


def check_source_shippable(source: Any, door: str) -> None:
    """Refuse a source Spark cannot ship to the processes that plan and read it.

    Spark pickles the source (with cloudpickle) into its planner and every task; a
    source holding a lock, an open file or a connection would fail there with a bare
    ``PicklingError`` that names neither the source nor the attribute.

    Raises:
        SourceDefinitionError: ``source`` does not pickle; names the attribute that
            fails, its type, and where such things belong.
    """
    from pyspark import cloudpickle  # noqa: PLC0415  # the pickler Spark ships tasks with

    dumps: Callable[[object], bytes] = cloudpickle.dumps
    try:
        dumps(source)
    except Exception as error:
        path, culprit = find_unpicklable(source, dumps, "source") or ("source", source)
        raise SourceDefinitionError(
            f"{door}: {type(source).__qualname__} cannot be shipped to Spark's planner and "
            f"tasks: {path} ({short_repr(culprit, 120)} of type {type(culprit).__name__}) does "
            f"not pickle ({type(error).__name__}: {error}). Keep a source plain configuration "
            "(paths, names, numbers): open connections, clients, locks and files in "
            "create_enumerator() and create_reader(), not in the source's __init__"
        ) from error


_NO_MODULE: Final = re.compile(r"No module named '([^']+)'")

_SHIP_IT: Final = (
    "Spark's Python workers must be able to import the module that defines the source "
    "({module!r}). Local mode: start Python (and so the Spark session) with that module's "
    "directory on PYTHONPATH, or install it as a package into the workers' Python. "
    "Standalone, YARN, Kubernetes: ship it with spark.sparkContext.addPyFile('<file>.py or "
    ".zip'), spark-submit --py-files, or the spark.submit.pyFiles setting, or install it "
    "on every worker. Spark Connect: spark.addArtifacts('<file>.py or .zip', pyfile=True)"
)


@contextlib.contextmanager
def workers_must_import(source: Any, door: str) -> Iterator[None]:
    """Name the fix when Spark's Python workers cannot import what the source needs.

    Spark unpickles the source in a Python worker when the read is loaded; a module
    only the driver can import fails there as ``No module named ...`` inside a
    ``PYTHON_DATA_SOURCE_ERROR`` (an ``AnalysisException``), which says nothing of
    how to ship it.

    Raises:
        SinkConfigurationError: The error says a module is missing; names it, the
            source's module and the ways to ship it. Other errors pass unchanged.
    """
    try:
        yield
    except Exception as error:
        found = _NO_MODULE.search(str(error))
        if found is None:
            raise
        raise SinkConfigurationError(
            f"{door}: Spark's Python workers cannot load {type(source).__qualname__}: no "
            f"module named {found.group(1)!r}. " + _SHIP_IT.format(module=type(source).__module__)
        ) from error
