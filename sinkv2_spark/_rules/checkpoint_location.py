"""A stream's checkpoint location, claimed the same way by both streaming doors.

``apply(streaming_df, ...)`` and ``writeStream.format("sinkv2")`` both keep the sink's
state next to Spark's checkpoint (`STATE_DIR`), refuse a location another sink id's
stream uses (`claim_location`), and bind the sink id to Spark's query id
(`query_id`), which survives restarts and changes only when the checkpoint is reset.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Final
from urllib.parse import urlparse

from sinkv2.errors import SinkConfigurationError

__all__ = ["STATE_DIR", "claim_location", "local_path", "query_id"]

STATE_DIR: Final = "sinkv2"
_BINDING_FILE: Final = "sink.json"


def local_path(location: str) -> Path | None:
    parsed = urlparse(location)
    if parsed.scheme in {"", "file"} and not (parsed.scheme == "" and parsed.netloc):
        path = parsed.path if parsed.scheme == "file" else location
        return Path(os.path.abspath(os.path.expanduser(path)))
    if len(parsed.scheme) == 1:  # a Windows drive letter
        return Path(os.path.abspath(location))
    return None


def claim_location(local: Path, sink_id: str) -> None:
    """Refuse a checkpoint location that another sink id's stream uses."""
    marker = local / STATE_DIR / _BINDING_FILE
    if marker.exists():
        try:
            claimed = json.loads(marker.read_text())["sink_id"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise SinkConfigurationError(
                f"{str(marker)!r} does not read ({error}); it names the sink id that uses the "
                "checkpoint location. Restore it, or use a new checkpoint location"
            ) from error
        if claimed != sink_id:
            raise SinkConfigurationError(
                f"the checkpoint location {str(local)!r} belongs to the stream of sink id "
                f"{claimed!r}, not {sink_id!r}; Spark's offsets there would make this query "
                "skip or replay the other one's input. Give each query its own checkpoint "
                "location"
            )
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    temporary = marker.with_suffix(f".{uuid.uuid4().hex}.tmp")
    temporary.write_text(json.dumps({"sink_id": sink_id}))
    os.replace(temporary, marker)


def query_id(local: Path) -> str:
    """Spark's query id for the checkpoint location, written first by us on a new one.

    Spark keeps the id in ``<checkpoint>/metadata`` and reuses it on every restart;
    a new one means a new query (the checkpoint was reset), whose micro-batch ids
    start again at 0. Binding the sink id to it refuses such a reset, which would
    otherwise take the new query's batches for committed ones.
    """
    metadata = local / "metadata"
    if metadata.exists():
        try:
            return str(json.loads(metadata.read_text().splitlines()[0])["id"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
            raise SinkConfigurationError(
                f"Spark's checkpoint metadata {str(metadata)!r} does not read ({error}); "
                "restore the checkpoint location, or start over with a new one and a new sink id"
            ) from error
    new_id = str(uuid.uuid4())
    local.mkdir(parents=True, exist_ok=True)
    temporary = local / f".metadata.{uuid.uuid4().hex}.tmp"
    temporary.write_text(json.dumps({"id": new_id}) + "\n")
    os.replace(temporary, metadata)
    return new_id
