"""What the ``sinkv2`` data source offers a sink's topologies, without a SparkSession.

Spark runs a Python data source's planning and commit in its planner worker,
a Python process with no SparkSession, so there is no DataFrame to give a
topology:

- the pre-write topology gets a `PlannedInput`: the input's schema (``schema``,
  ``columns``, ``dtypes``) and nothing else; a topology that checks the schema
  and hands the input back runs, one that transforms it is refused, naming the
  method it used;
- pre- and post-commit topologies get a ``LocalCommittableStream`` (`LocalStreams`),
  on which the ``sinkv2_spark.committables`` helpers work in process, as in the
  contract-test kit; a topology that calls DataFrame methods is refused by
  `dataframe_needed`, naming the method.

Every refusal points to ``SinkTopologyTranslator.apply()``, which has the DataFrame.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, NoReturn, final

import pyarrow as pa

from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime.committables import (
    COMMITTABLE_COLUMNS,
    COMMITTABLE_SCHEMA,
    LocalCommittableStream,
)
from sinkv2_spark._engine.schema import schema_to_arrow  # apply()'s rule, one copy

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["LocalStreams", "PlannedInput", "dataframe_needed", "planned_arrow_schema"]

_USE_APPLY: Final = (
    "Run this sink with SinkTopologyTranslator().apply(df, sink, sink_id=...), which hands "
    "topologies Spark DataFrames, or build the topology from the helpers of "
    "sinkv2_spark.committables, which also run without Spark"
)


@final
class PlannedInput:
    """The pre-write topology's input in the data source: the schema, not the rows.

    Args:
        schema: The DataFrame's schema, as Spark hands it to the data source.
        sink_type: Names the sink in errors.
    """

    def __init__(self, schema: StructType, sink_type: str) -> None:
        self.schema = schema
        self._sink_type = sink_type

    @property
    def columns(self) -> list[str]:
        """The column names, like ``DataFrame.columns``."""
        return list(self.schema.names)

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        """(name, type) pairs, like ``DataFrame.dtypes``."""
        return [(f.name, f.dataType.simpleString()) for f in self.schema.fields]

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise SinkConfigurationError(
            f"{self._sink_type}'s pre-write topology uses DataFrame.{name}, which the sinkv2 "
            "data source cannot offer: Spark hands a Python data source the rows as they are "
            "partitioned, and plans it without a SparkSession (the topology gets the schema "
            "only). Run this sink with SinkTopologyTranslator().apply(df, sink, sink_id=...)"
        )

    def __repr__(self) -> str:
        return f"PlannedInput({self.schema.simpleString()})"


@final
class LocalStreams:
    """The data source's committable streams: `LocalCommittableStream`s, in process."""

    def to_stream(self, table: pa.Table) -> LocalCommittableStream:
        """``table`` as a local committable stream."""
        return LocalCommittableStream(table)

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        """The committable columns of ``stream``.

        Raises:
            SinkConfigurationError: ``stream`` is not a committable stream.
        """
        if not isinstance(stream, LocalCommittableStream):
            raise SinkConfigurationError(
                f"{produced_by} must return the committable stream it received, transformed "
                f"(got {type(stream).__name__}); in the sinkv2 data source it is a "
                f"sinkv2.runtime.committables.LocalCommittableStream. {_USE_APPLY}"
            )
        return stream.select(*COMMITTABLE_COLUMNS).toArrow().cast(COMMITTABLE_SCHEMA)


@contextmanager
def dataframe_needed(sink_type: str) -> Iterator[None]:
    """Turn a topology's DataFrame call on a local stream into a clear error.

    Raises:
        SinkConfigurationError: A topology called a method a
            ``LocalCommittableStream`` does not have; the message names it, the
            topology, and (after a commit) that the data is committed.
    """
    try:
        yield
    except AttributeError as error:
        if not isinstance(getattr(error, "obj", None), LocalCommittableStream):
            raise
        frames = {frame.name for frame in traceback.extract_tb(error.__traceback__)}
        post = "add_post_commit_topology" in frames or "run_post_commit" in frames
        which = "post-commit" if post else "pre-commit"
        after = (
            " The epoch's data is committed; its post-commit step did not run, and the epoch "
            "stays pending: a run of this sink id through apply() commits it again "
            "(idempotently) and runs the topology."
            if post
            else ""
        )
        raise SinkConfigurationError(
            f"{sink_type}'s {which} topology uses DataFrame.{error.name}, which the sinkv2 "
            "data source cannot offer: it commits in Spark's planner worker, without a "
            f"SparkSession, and hands topologies a LocalCommittableStream.{after} {_USE_APPLY}"
        ) from error


def planned_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of ``schema``'s rows (time zone UTC: the session's is not known here).

    Raises:
        SinkConfigurationError: Two columns share a name, or a column has a type
            Arrow cannot carry; the message names it.
    """
    return schema_to_arrow(schema, timezone="UTC", case_sensitive=True)
