"""Real local destinations for tests and benchmarks; in the repository, not in the wheel.

- `tests.servers.http_server`: an HTTP receiver with injectable latency, throttling
  and failures (run in its own process);
- `tests.servers.redis_server`: a throwaway ``redis-server`` child process.

Benchmarks run from the repository root and import them from here too.
"""
