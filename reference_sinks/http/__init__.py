"""At-least-once JSON batches over HTTP: `HttpSink`, on sinkv2's async sink base (FLIP-171).

```python
from reference_sinks.http import HttpSink
from sinkv2.asyncsink import AsyncSinkWriterConfiguration
from sinkv2_spark import SinkTopologyTranslator

sink = HttpSink(
    "https://ingest.example.com/v1/records",
    headers={"Authorization": "Bearer ..."},
    configuration=AsyncSinkWriterConfiguration(max_batch_size=500, request_timeout_ms=30_000),
)
SinkTopologyTranslator().apply(df, sink, sink_id="ingest")
```

Needs ``pip install 'sinkv2[http]'`` (aiohttp): `HttpSink` checks for it when it
is built, on the driver. See ``docs/sinks/http.md``; its tests run against a real
local receiver (``tests/servers/http_server.py`` in the repository).
"""

from reference_sinks.http._json import JsonSafeConverter, to_json_safe
from reference_sinks.http._responses import (
    RETRY_FIELD,
    RETRYABLE_STATUSES,
    THROTTLING_STATUSES,
    parse_retry_after,
)
from reference_sinks.http._sink import HttpSink
from reference_sinks.http._writer import HttpSinkWriter, encode_json
from sinkv2.text import publish as _publish

__all__ = [
    "RETRYABLE_STATUSES",
    "RETRY_FIELD",
    "THROTTLING_STATUSES",
    "HttpSink",
    "HttpSinkWriter",
    "JsonSafeConverter",
    "encode_json",
    "parse_retry_after",
    "to_json_safe",
]

_publish(__name__)
