"""`PostgresSource` from string options, for ``spark.read.format("sinkv2").option("source", ...)``.

Spark's option values are strings and their names lower-cased; each is parsed here
with an error that names the option. The names follow Spark's JDBC reader where it
has one (``url``, ``dbtable``/``query``, ``partitionColumn`` as ``split_key``,
``numPartitions`` as ``chunks``)::

    spark.read.format("sinkv2").option("source", "postgres")
        .option("url", "postgresql://app@db:5432/shop").option("table", "public.orders")
        .option("split_key", "id").option("chunks", "8").load()
"""

from __future__ import annotations

from reference_sinks.postgres._source import PostgresSource
from sinkv2.errors import SinkConfigurationError

__all__ = ["postgres_source_from_options"]


def _count(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise SinkConfigurationError(
            f"the {option!r} option must be a positive integer (got {value!r}); e.g. "
            f".option({option!r}, '8')"
        )
    return int(text)


def postgres_source_from_options(
    *,
    url: str | None = None,
    table: str | None = None,
    dbtable: str | None = None,
    query: str | None = None,
    split_key: str | None = None,
    chunks: str | None = None,
    columns: str | None = None,
    sample_rows: str | None = None,
    batch_rows: str | None = None,
) -> PostgresSource:
    """A `PostgresSource` from Spark's string options.

    ``url`` and one of ``table`` (or Spark's ``dbtable``) and ``query`` are required;
    ``columns`` is a comma-separated list. ``batch_rows`` (the door's own option,
    passed on here) sets the rows per Arrow batch.

    Raises:
        SinkConfigurationError: A missing or bad option, named.
    """
    if url is None or not url.strip():
        raise SinkConfigurationError(
            "the postgres source needs the 'url' option; e.g. "
            ".option('url', 'postgresql://app@db:5432/shop')"
        )
    if table is not None and dbtable is not None:
        raise SinkConfigurationError(
            "give the postgres source 'table' or its Spark spelling 'dbtable', not both"
        )
    table = table if table is not None else dbtable
    if (table is None) == (query is None):
        raise SinkConfigurationError(
            "the postgres source needs exactly one of the options 'table' and 'query' (got "
            f"table={table!r}, query={query!r}); e.g. .option('table', 'public.orders')"
        )
    kwargs: dict[str, object] = {}
    numbers = (("chunks", chunks), ("sample_rows", sample_rows), ("batch_rows", batch_rows))
    for option, value in numbers:
        count = _count(option, value)
        if count is not None:
            kwargs[option] = count
    if columns is not None:
        names = [name.strip() for name in columns.split(",")]
        if not all(names):
            raise SinkConfigurationError(
                f"the 'columns' option must be comma-separated column names (got {columns!r})"
            )
        kwargs["columns"] = names
    return PostgresSource(url, table, query=query, split_key=split_key, **kwargs)  # type: ignore[arg-type]
