"""Where FileSink writes and FileSource reads: a path or URI, as a pyarrow filesystem and a root."""

from __future__ import annotations

import os

import pyarrow.fs as pafs

from sinkv2.errors import SinkConfigurationError

__all__ = ["resolve_location"]


def resolve_location(
    path: str, filesystem: pafs.FileSystem | None, *, what: str
) -> tuple[pafs.FileSystem, str]:
    """The filesystem ``path`` is on, and ``path`` inside it (no trailing slash).

    With a ``filesystem``, ``path`` is already inside it; otherwise ``path`` is a
    local path (made absolute) or a URI pyarrow knows. ``what`` names the argument
    in the message, e.g. ``"FileSink base_path"``.

    Raises:
        SinkConfigurationError: ``path`` is not a path or URI pyarrow knows.
    """
    if filesystem is not None:
        return filesystem, path.rstrip("/") or "/"
    location = path if "://" in path else os.path.abspath(path)
    try:
        fs, root = pafs.FileSystem.from_uri(location)
    except (ValueError, OSError, TypeError) as error:
        raise SinkConfigurationError(
            f"{what} {path!r} is not a path or URI pyarrow.fs understands "
            f"({type(error).__name__}: {error}); pass a local path, an s3://, gs://, "
            "hdfs:// or file:// URI, or a filesystem="
        ) from error
    return fs, root.rstrip("/") or "/"
