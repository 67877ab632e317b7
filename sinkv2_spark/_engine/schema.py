"""A Spark schema as the Arrow schema writers get: the one check every door runs.

Writers receive rows as Arrow batches in this schema (``get_input_schema()``). The
check refuses, naming the column, what Arrow cannot carry and what writers could not
tell apart: two columns with one name (or, unless ``spark.sql.caseSensitive`` is on,
names that differ only in case, as Spark's own writers do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["arrow_schema", "check_unique_names", "schema_to_arrow"]


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of the batches ``mapInArrow`` hands writers for ``df``.

    Raises:
        SinkConfigurationError: Two columns share a name (or, unless
            ``spark.sql.caseSensitive`` is on, differ only in case: Spark's own
            writers refuse both), or a column has a type Arrow cannot carry; the
            message names the column.
    """
    spark = df.sparkSession
    return schema_to_arrow(
        df.schema,
        timezone=spark.conf.get("spark.sql.session.timeZone"),
        case_sensitive=spark.conf.get("spark.sql.caseSensitive") == "true",
    )


def schema_to_arrow(schema: StructType, *, timezone: str | None, case_sensitive: bool) -> pa.Schema:
    """``schema``'s rows as Arrow, the one check every door runs on a Spark schema.

    Raises:
        SinkConfigurationError: Two columns share a name (``case_sensitive``
            decides whether case alone makes them differ), or a column has a type
            Arrow cannot carry; the message names the column.
    """
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415  # pyspark on use

    check_unique_names(list(schema.names), case_sensitive)
    try:
        return to_arrow_schema(schema, timezone=timezone)
    except Exception as error:  # pyspark raises its own error classes here
        column = ""
        for field in schema.fields:
            try:
                to_arrow_schema(type(schema)([field]), timezone=timezone)
            except Exception:  # noqa: BLE001  # the first field that fails is the one to name
                column = f"column {field.name!r} of type {field.dataType.simpleString()}: "
                break
        raise SinkConfigurationError(
            f"the DataFrame's schema cannot be written through Arrow: {column}{error}. Cast "
            "or drop that column (sinkv2 moves rows to Python writers as Arrow)"
        ) from error


def check_unique_names(names: list[str], case_sensitive: bool) -> None:
    seen: dict[str, str] = {}
    for name in names:
        key = name if case_sensitive else name.lower()
        if key in seen:
            same = "twice" if seen[key] == name else f"as {seen[key]!r} and {name!r}"
            hint = (
                ""
                if case_sensitive or seen[key] == name
                else " (spark.sql.caseSensitive is off, so names that differ only in case "
                "are one name; turn it on to keep both)"
            )
            raise SinkConfigurationError(
                f"the DataFrame has a column named {name!r} {same}{hint}; writers get rows "
                "keyed by column name, and Spark's own writers refuse this too. Rename one "
                "of them, e.g. with df.toDF(*names) or df.withColumnsRenamed({...})"
            )
        seen[key] = name
