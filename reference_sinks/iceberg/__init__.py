"""Apache Iceberg tables: `IcebergSink` appends exactly once, `IcebergSource` reads them back.

Needs ``pip install 'sinkv2[iceberg]'`` (pyiceberg with its SQL catalog and
pyarrow). The embedded default catalog is `local_catalog`: pyiceberg's SQL catalog
on SQLite with a local file warehouse. See ``docs/sinks/iceberg.md``.
"""

try:
    import pyiceberg  # noqa: F401  # fail early, with the install line
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "reference_sinks.iceberg needs pyiceberg; install it with: pip install 'sinkv2[iceberg]'"
    ) from error

from reference_sinks.iceberg._catalog import CatalogSpec, local_catalog
from reference_sinks.iceberg._committer import (
    CHECKPOINT_ID_PROPERTY,
    COMMIT_ID_PROPERTY,
    JOB_ID_PROPERTY,
    SINK_ID_PROPERTY,
    CommittedState,
    IcebergCommitter,
    committed_state,
)
from reference_sinks.iceberg._model import (
    IcebergCommittable,
    IcebergDataFile,
    IcebergWriteResult,
)
from reference_sinks.iceberg._sink import IcebergSink
from reference_sinks.iceberg._source import IcebergSource
from reference_sinks.iceberg._source_errors import IcebergSourceError
from reference_sinks.iceberg._source_options import iceberg_source_from_options
from reference_sinks.iceberg._source_read import DataFileReadError
from reference_sinks.iceberg._source_split import IcebergEnumeratorState, IcebergSourceSplit
from reference_sinks.iceberg._writer import IcebergWriter
from sinkv2.text import publish as _publish

__all__ = [
    "CHECKPOINT_ID_PROPERTY",
    "COMMIT_ID_PROPERTY",
    "JOB_ID_PROPERTY",
    "SINK_ID_PROPERTY",
    "CatalogSpec",
    "CommittedState",
    "DataFileReadError",
    "IcebergCommittable",
    "IcebergCommitter",
    "IcebergDataFile",
    "IcebergEnumeratorState",
    "IcebergSink",
    "IcebergSource",
    "IcebergSourceError",
    "IcebergSourceSplit",
    "IcebergWriteResult",
    "IcebergWriter",
    "committed_state",
    "iceberg_source_from_options",
    "local_catalog",
]

_publish(__name__)
