"""A writer failure, carried whole from a Python worker to the driver.

Spark hands a task's exception to the driver as text: the worker's traceback,
then the JVM's stack. The writer task therefore puts everything the driver
needs - subtask, position, the complete message and the tail of the cause's
traceback - on one line after a marker, as JSON (newlines escaped), and the
driver reads it back into a `SinkWriterError` instead of 250 lines of
``PythonException``.
"""

from __future__ import annotations

import json
import traceback
from typing import Final

from sinkv2.errors import SinkWriterError

__all__ = ["MAX_TRACEBACK_CHARS", "WriterFailure", "decode_failure", "encode_failure"]

_MARKER: Final = "[sinkv2 writer failure] "
MAX_TRACEBACK_CHARS: Final = 3000
"""How much of the cause's traceback travels: its last lines, where the error is."""
_MAX_MESSAGE_CHARS: Final = 4000


class WriterFailure(RuntimeError):
    """Raised inside a task; Spark carries its message to the driver as text."""


def encode_failure(
    *, subtask_id: int, position: int | None, message: str, cause: BaseException
) -> WriterFailure:
    """The exception a writer task raises: marker + one JSON line, readable by the driver."""
    tail = "".join(traceback.format_exception(cause))[-MAX_TRACEBACK_CHARS:]
    payload = {
        "subtask": subtask_id,
        "position": position,
        "message": message[:_MAX_MESSAGE_CHARS],
        "traceback": tail,
    }
    return WriterFailure(_MARKER + json.dumps(payload, ensure_ascii=True))


def decode_failure(text: str) -> SinkWriterError | None:
    """The `SinkWriterError` a task's failure text carries, or ``None`` if none does.

    With several (retried attempts), the last one wins: it is the attempt that
    exhausted Spark's retries.
    """
    found = None
    for line in text.splitlines():
        start = line.find(_MARKER)
        if start < 0:
            continue
        try:
            payload = json.JSONDecoder().raw_decode(line, start + len(_MARKER))[0]
        except ValueError:
            continue
        found = payload
    if not isinstance(found, dict):
        return None
    position = found.get("position")
    return SinkWriterError(
        f"{found.get('message', '?')}. The job failed and nothing was committed.",
        subtask_id=int(found.get("subtask", -1)),
        position=position if isinstance(position, int) else None,
        worker_traceback=str(found.get("traceback") or "") or None,
    )
