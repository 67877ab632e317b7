"""At-least-once, idempotent Redis writes: `RedisSink` with ``SET``, ``HSET`` or ``XADD``.

```python
from reference_sinks.redis import RedisSink, SetMode
from sinkv2_spark import SinkTopologyTranslator

sink = RedisSink("redis://127.0.0.1:6379/0", SetMode(key="user:{id}", ttl_ms=86_400_000))
SinkTopologyTranslator().apply(df, sink, sink_id="users-cache")
```

Writers need redis-py (``pip install 'sinkv2[redis]'``); it is imported when a
writer is created, so building the sink on a driver without it works.
"""

from reference_sinks.redis._modes import HashMode, KeySpec, RedisMode, SetMode, StreamMode
from reference_sinks.redis._sink import DEFAULT_CONFIGURATION, RedisSink
from reference_sinks.redis._writer import RETRYABLE_REPLY_PREFIXES, RedisWriter
from sinkv2.text import publish as _publish

__all__ = [
    "DEFAULT_CONFIGURATION",
    "RETRYABLE_REPLY_PREFIXES",
    "HashMode",
    "KeySpec",
    "RedisMode",
    "RedisSink",
    "RedisWriter",
    "SetMode",
    "StreamMode",
]

_publish(__name__)
