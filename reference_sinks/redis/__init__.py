"""Redis: `RedisSink` writes with ``SET``, ``HSET`` or ``XADD``; `RedisStreamSource` reads streams.

```python
from reference_sinks.redis import RedisSink, SetMode
from sinkv2_spark import SinkTopologyTranslator

sink = RedisSink("redis://127.0.0.1:6379/0", SetMode(key="user:{id}", ttl_ms=86_400_000))
SinkTopologyTranslator().apply(df, sink, sink_id="users-cache")
```

`RedisStreamSource` reads Redis Streams by entry id (bounded or for ever, each
range replayable exactly), optionally trimming what committed micro-batches read:
``spark.readStream.format("sinkv2").option("source", "redis_stream")``.

Writers and readers need redis-py (``pip install 'sinkv2[redis]'``); it is imported when a
writer is created, so building the sink on a driver without it works.
"""

from reference_sinks.redis._modes import HashMode, KeySpec, RedisMode, SetMode, StreamMode
from reference_sinks.redis._sink import DEFAULT_CONFIGURATION, RedisSink
from reference_sinks.redis._source import RedisStreamSource
from reference_sinks.redis._source_client import NotAStreamError
from reference_sinks.redis._source_options import redis_stream_source_from_options
from reference_sinks.redis._source_rows import StreamEntryError
from reference_sinks.redis._source_split import RedisStreamEnumeratorState, RedisStreamSplit
from reference_sinks.redis._writer import RETRYABLE_REPLY_PREFIXES, RedisWriter
from sinkv2.text import publish as _publish

__all__ = [
    "DEFAULT_CONFIGURATION",
    "RETRYABLE_REPLY_PREFIXES",
    "HashMode",
    "KeySpec",
    "NotAStreamError",
    "RedisMode",
    "RedisSink",
    "RedisStreamEnumeratorState",
    "RedisStreamSource",
    "RedisStreamSplit",
    "RedisWriter",
    "SetMode",
    "StreamEntryError",
    "StreamMode",
    "redis_stream_source_from_options",
]

_publish(__name__)
