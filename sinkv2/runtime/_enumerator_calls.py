"""A split enumerator's own error, marked with the call and the source that raised it.

The enumerator runs on the driver, inside the coordinator's planning; its error
otherwise reaches the user as a bare exception from deep inside the runtime (on Spark,
inside a data source's ``latestOffset``), with nothing saying which source's
enumerator raised it, or in which FLIP-27 call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sinkv2.errors import SinkV2Error


@contextlib.contextmanager
def enumerator_call(call: str, source_id: str | None) -> Iterator[None]:
    """Adds a note naming ``call`` and ``source_id`` to an error the enumerator raises.

    sinkv2's own errors (a contract check, a store error) already say where they come
    from and pass unmarked.
    """
    try:
        yield
    except SinkV2Error:
        raise
    except Exception as error:
        source = "a bounded read" if source_id is None else f"source {source_id!r}"
        error.add_note(
            f"raised by the split enumerator's {call} (of {source}, on the driver): the "
            "error is the connector's own; fix the enumerator, or what it reads"
        )
        raise


__all__ = ["enumerator_call"]
