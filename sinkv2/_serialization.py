"""Versioned serialization with Flink's self-describing framing.

Every committable, write result and writer state leaves a task as bytes framed
the way Flink frames them, so any reader can tell which version wrote them:

```text
+-----------------+----------------+------------------+
| version (int32) | length (int32) | payload (length) |   big-endian, signed
+-----------------+----------------+------------------+
```

Lists use Flink's list framing: version, element count, then length + payload per
element.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar, final

from sinkv2._text import describe
from sinkv2.errors import (
    CorruptDataError,
    SerializationError,
    UnsupportedVersionError,
)

__all__ = [
    "SimpleVersionedSerialization",
    "SimpleVersionedSerializer",
    "describe_serializer",
    "readable_versions",
]

T = TypeVar("T")

_INT = struct.Struct(">i")
_HEADER = struct.Struct(">ii")
_INT32_MAX = 2**31 - 1


class SimpleVersionedSerializer(Protocol[T]):
    """Turns objects into bytes and back, knowing which version wrote the bytes.

    Required: `get_version`, `serialize`, `deserialize`.

    Optional (sinkv2 extension): ``get_supported_versions() -> Collection[int]``,
    the versions `deserialize` can read. Without it, every version from 0 to
    `get_version` is assumed readable and anything newer is rejected before
    `deserialize` is called.

    Contract: ``deserialize(get_version(), serialize(x))`` equals ``x``, and bytes
    written by any older version the sink ever shipped still deserialize: bump the
    version when the format changes and keep a reader for the old one.
    """

    def get_version(self) -> int:
        """The version `serialize` writes; a non-negative int."""
        ...

    def serialize(self, obj: T) -> bytes:
        """The bytes of ``obj`` in the current version's format."""
        ...

    def deserialize(self, version: int, serialized: bytes) -> T:
        """The object that bytes of format ``version`` describe.

        Raises:
            SerializationError: The bytes cannot be read (a subclass says why).
        """
        ...


def describe_serializer(serializer: object) -> str:
    """A name for ``serializer`` in error messages: its repr if it has one, else its class."""
    if type(serializer).__repr__ is not object.__repr__:
        return repr(serializer)
    cls = type(serializer)
    return f"{cls.__module__}.{cls.__qualname__}"


def _current_version(serializer: SimpleVersionedSerializer[T]) -> int:
    version = serializer.get_version()
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= _INT32_MAX:
        raise SerializationError(
            f"{describe_serializer(serializer)}.get_version() must return an int in "
            f"[0, 2**31) (got {describe(version)}); return the format version as a small int",
            serializer=describe_serializer(serializer),
        )
    return version


def readable_versions(serializer: SimpleVersionedSerializer[T]) -> Sequence[int]:
    """The versions ``serializer`` reads, ascending (see `SimpleVersionedSerializer`)."""
    declared = getattr(serializer, "get_supported_versions", None)
    if declared is None:
        return range(_current_version(serializer) + 1)
    return tuple(sorted(set(declared())))


def _serialize_payload(serializer: SimpleVersionedSerializer[T], obj: T) -> bytes:
    try:
        payload = serializer.serialize(obj)
    except SerializationError:
        raise
    except Exception as error:
        raise SerializationError(
            f"{describe_serializer(serializer)} could not serialize {describe(obj)}: {error}",
            serializer=describe_serializer(serializer),
        ) from error
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise SerializationError(
            f"{describe_serializer(serializer)}.serialize() must return bytes "
            f"(got {describe(payload)}); return the encoded payload",
            serializer=describe_serializer(serializer),
        )
    return bytes(payload)


def _check_readable(serializer: SimpleVersionedSerializer[T], version: int) -> None:
    versions = readable_versions(serializer)
    if version in versions:
        return
    listed = f"0 to {versions[-1]}" if isinstance(versions, range) and versions else list(versions)
    newer = bool(versions) and version > versions[-1]
    hint = (
        "the bytes were written by a newer release of the sink; upgrade the reader"
        if newer
        else "add a reader for this version to the serializer"
    )
    raise UnsupportedVersionError(
        f"{describe_serializer(serializer)} cannot read version {version}; it reads "
        f"versions {listed}: {hint}",
        serializer=describe_serializer(serializer),
        version=version,
        supported=versions,
    )


def _deserialize_payload(
    serializer: SimpleVersionedSerializer[T], version: int, payload: bytes
) -> T:
    _check_readable(serializer, version)
    try:
        return serializer.deserialize(version, payload)
    except SerializationError:
        raise
    except Exception as error:
        raise CorruptDataError(
            f"{describe_serializer(serializer)} could not read {len(payload)} bytes of "
            f"version {version}: {type(error).__name__}: {error}",
            serializer=describe_serializer(serializer),
            version=version,
        ) from error


@final
class SimpleVersionedSerialization:
    """Flink's framing helpers: prefix payloads with their version and length."""

    def __init__(self) -> None:
        raise TypeError("SimpleVersionedSerialization only has static methods; call them directly")

    @staticmethod
    def write_version_and_serialize(serializer: SimpleVersionedSerializer[T], obj: T) -> bytes:
        """``obj`` serialized and framed as version, length, payload.

        Raises:
            SerializationError: The serializer failed or returned something other than bytes.
        """
        version = _current_version(serializer)
        payload = _serialize_payload(serializer, obj)
        return _HEADER.pack(version, len(payload)) + payload

    @staticmethod
    def read_version_and_deserialize(
        serializer: SimpleVersionedSerializer[T], data: bytes | bytearray | memoryview
    ) -> T:
        """The object framed in ``data`` by `write_version_and_serialize`.

        Raises:
            CorruptDataError: ``data`` is shorter than its header, its length field
                disagrees with its size, or the payload does not decode.
            UnsupportedVersionError: The version in ``data`` is not one the serializer reads.
        """
        view = memoryview(data)
        name = describe_serializer(serializer)
        if len(view) < _HEADER.size:
            raise CorruptDataError(
                f"{name}: framed bytes are truncated: {len(view)} bytes, shorter than the "
                f"{_HEADER.size}-byte version+length header",
                serializer=name,
            )
        version, length = _HEADER.unpack_from(view)
        available = len(view) - _HEADER.size
        if length != available:
            problem = "truncated" if length > available else "corrupt"
            raise CorruptDataError(
                f"{name}: {problem} framing for version {version}: the length field says "
                f"{length} payload bytes but {available} follow",
                serializer=name,
                version=version,
            )
        return _deserialize_payload(serializer, version, bytes(view[_HEADER.size :]))

    @staticmethod
    def write_version_and_serialize_list(
        serializer: SimpleVersionedSerializer[T], objs: Iterable[T]
    ) -> bytes:
        """``objs`` framed as version, count, then length + payload for each."""
        version = _current_version(serializer)
        parts = [b""]
        count = 0
        for obj in objs:
            payload = _serialize_payload(serializer, obj)
            parts.append(_INT.pack(len(payload)))
            parts.append(payload)
            count += 1
        parts[0] = _HEADER.pack(version, count)
        return b"".join(parts)

    @staticmethod
    def read_version_and_deserialize_list(
        serializer: SimpleVersionedSerializer[T], data: bytes | bytearray | memoryview
    ) -> list[T]:
        """The objects framed in ``data`` by `write_version_and_serialize_list`.

        Raises:
            CorruptDataError: ``data`` is truncated, has trailing bytes, or an element
                does not decode.
            UnsupportedVersionError: The version is not one the serializer reads.
        """
        view = memoryview(data)
        name = describe_serializer(serializer)
        if len(view) < _HEADER.size:
            raise CorruptDataError(
                f"{name}: framed list is truncated: {len(view)} bytes, shorter than the "
                f"{_HEADER.size}-byte version+count header",
                serializer=name,
            )
        version, count = _HEADER.unpack_from(view)
        if count < 0:
            raise CorruptDataError(
                f"{name}: corrupt framed list of version {version}: negative count {count}",
                serializer=name,
                version=version,
            )
        _check_readable(serializer, version)
        offset = _HEADER.size
        result: list[T] = []
        for index in range(count):
            if offset + _INT.size > len(view):
                raise CorruptDataError(
                    f"{name}: framed list of version {version} is truncated before element "
                    f"{index} of {count}",
                    serializer=name,
                    version=version,
                )
            (length,) = _INT.unpack_from(view, offset)
            offset += _INT.size
            if length < 0 or offset + length > len(view):
                raise CorruptDataError(
                    f"{name}: framed list of version {version} is truncated in element "
                    f"{index} of {count} (length field {length}, {len(view) - offset} bytes left)",
                    serializer=name,
                    version=version,
                )
            result.append(
                _deserialize_payload(serializer, version, bytes(view[offset : offset + length]))
            )
            offset += length
        if offset != len(view):
            raise CorruptDataError(
                f"{name}: framed list of version {version} has {len(view) - offset} bytes after "
                f"its {count} elements",
                serializer=name,
                version=version,
            )
        return result
