"""Errors about recorded bytes that do not read: their kind kept, what and where added.

A recorded epoch's committables or writer states that do not read stop a run before
anything is written; the error keeps the serializer's kind (`CorruptDataError`,
`UnsupportedVersionError`) and says which sink id, epoch and store hold the bytes,
and what an operator can do.
"""

from __future__ import annotations

import pathlib
import shlex

from sinkv2.errors import CorruptDataError, SerializationError, UnsupportedVersionError
from sinkv2.runtime._store import EpochRecord

__all__ = ["restated", "unreadable_committables"]


def restated(error: SerializationError, message: str) -> SerializationError:
    """``error``'s kind, with ``message``."""
    if isinstance(error, UnsupportedVersionError):
        return UnsupportedVersionError(
            message, serializer=error.serializer, version=error.version, supported=error.supported
        )
    if isinstance(error, CorruptDataError):
        return CorruptDataError(message, serializer=error.serializer, version=error.version)
    return SerializationError(message, serializer=error.serializer)


def unreadable_committables(
    error: SerializationError, record: EpochRecord, store: object, sink_type: str
) -> SerializationError:
    """``error``'s kind, naming ``record``'s sink id, epoch and store, and what to do."""
    what = (
        f"the committables recorded for sink {record.sink_id!r} epoch {record.epoch} "
        f"({record.status.value}) in {store!r} cannot be read: {error}. Nothing was "
        "committed or written"
    )
    if isinstance(error, UnsupportedVersionError):
        return restated(
            error,
            f"{what}; they were written by version {error.version} of {sink_type}'s "
            "committable serializer: run the release of the sink that wrote them until the "
            "epoch is committed",
        )
    path = getattr(store, "path", None)
    where = shlex.quote(str(path)) if isinstance(path, pathlib.Path) else "<store>"
    return restated(
        error,
        f"{what}; either another sink wrote them under this sink id (give each destination "
        "a sink id of its own), or the store was damaged or changed by something other than "
        "sinkv2 (restore it from a backup). Once you have checked what of the epoch the "
        "destination holds, mark it aborted without reading it: `sinkv2 state abort "
        f"{where} {shlex.quote(record.sink_id)} {record.epoch} --force "
        "--without-abort-hook`. Never delete the store: it is what keeps committed epochs "
        "from being written twice",
    )
