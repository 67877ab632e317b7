"""A draining stop on the driver: `sinkv2.runtime.drain_writer_states`, under its Spark name.

The draining stop is written once, in the engine-neutral runtime, where the kit's
local stream runs it too. Spark runs it on the driver, after the query has
stopped. This module only keeps the name ``_streaming`` imports.
"""

from __future__ import annotations

from sinkv2.runtime import drain_writer_states

__all__ = ["drain_on_driver"]

drain_on_driver = drain_writer_states
