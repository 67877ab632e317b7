"""Files: `FileSink` writes Parquet or JSON lines exactly once, `FileSource` reads them back.

```python
from reference_sinks.files import FileSink, RollingPolicy
from sinkv2_spark import SinkTopologyTranslator

SinkTopologyTranslator().apply(df, FileSink("/data/out", partition_by=["day"]), sink_id="out")
spark.read.parquet("/data/out")  # exactly the rows of df
sinkv2_spark.from_source(spark, FileSource("/data/out"))  # the same rows, through FLIP-27
```
"""

from reference_sinks.files._committables import InProgressFile, PendingFile
from reference_sinks.files._config import CompactionPolicy, FileFormat, RollingPolicy
from reference_sinks.files._paths import HIVE_DEFAULT_PARTITION, escape_path_name
from reference_sinks.files._sink import FileSink
from reference_sinks.files._source import FileSource
from reference_sinks.files._source_formats import CsvOptions, FileReadError
from reference_sinks.files._source_options import file_source_from_options
from reference_sinks.files._source_split import FileEnumeratorState, FileSourceSplit
from reference_sinks.files._writer import FileWriter
from sinkv2.text import publish as _publish

__all__ = [
    "HIVE_DEFAULT_PARTITION",
    "CompactionPolicy",
    "CsvOptions",
    "FileEnumeratorState",
    "FileFormat",
    "FileReadError",
    "FileSink",
    "FileSource",
    "FileSourceSplit",
    "FileWriter",
    "InProgressFile",
    "PendingFile",
    "RollingPolicy",
    "escape_path_name",
    "file_source_from_options",
]

_publish(__name__)
