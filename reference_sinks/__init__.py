"""Reference sinks built on sinkv2: files, Iceberg, PostgreSQL, Redis, HTTP."""
