"""PostgreSQL: exactly-once loads (`PostgresSink`) and parallel snapshot reads (`PostgresSource`).

`PostgresSink` loads by two-phase commit; `PostgresSource` reads a table or query in
key-range chunks. Needs ``pip install 'sinkv2[postgres]'`` (psycopg 3). See
``docs/sinks/postgres.md`` and ``docs/sinks/postgres-source.md``.

```python
from reference_sinks.postgres import PostgresSink
from sinkv2_spark import SinkTopologyTranslator

sink = PostgresSink("postgresql://app@db:5432/shop", "public.orders", upsert_key="id")
SinkTopologyTranslator().apply(df, sink, sink_id="orders")
```
"""

try:
    import psycopg  # noqa: F401  # fail early, with the install line
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "reference_sinks.postgres needs psycopg; install it with: pip install 'sinkv2[postgres]'"
    ) from error

from reference_sinks.postgres._bookkeeping import CHECKPOINTS, CLEANUPS, MARKERS
from reference_sinks.postgres._cdc_source import PostgresCdcSource
from reference_sinks.postgres._committer import PostgresCommitter, RolledBackTransactionError
from reference_sinks.postgres._encode import json_text
from reference_sinks.postgres._model import PostgresTransaction, parse_gid
from reference_sinks.postgres._sink import Connect, PostgresAtLeastOnceSink, PostgresSink
from reference_sinks.postgres._source import PostgresReadError, PostgresSource
from reference_sinks.postgres._source_options import postgres_source_from_options
from reference_sinks.postgres._source_split import PostgresEnumeratorState, PostgresSourceSplit
from reference_sinks.postgres._table import TableName
from reference_sinks.postgres._writer import PostgresWriter
from sinkv2.text import publish as _publish

__all__ = [
    "CHECKPOINTS",
    "CLEANUPS",
    "MARKERS",
    "Connect",
    "PostgresAtLeastOnceSink",
    "PostgresCdcSource",
    "PostgresCommitter",
    "PostgresEnumeratorState",
    "PostgresReadError",
    "PostgresSink",
    "PostgresSource",
    "PostgresSourceSplit",
    "PostgresTransaction",
    "PostgresWriter",
    "RolledBackTransactionError",
    "TableName",
    "json_text",
    "parse_gid",
    "postgres_source_from_options",
]

_publish(__name__)
