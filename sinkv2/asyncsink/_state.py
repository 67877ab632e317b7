"""The async sink writer's state: the request entries not delivered yet, and its serializer."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar, final

import attrs
import msgpack

from sinkv2._serialization import describe_serializer
from sinkv2.errors import CorruptDataError, SerializationError, UnsupportedVersionError

__all__ = [
    "AsyncSinkWriterStateSerializer",
    "BufferedRequestState",
    "MsgpackRequestStateSerializer",
    "RequestEntryWrapper",
]

RequestEntryT = TypeVar("RequestEntryT")


@final
@attrs.frozen
class RequestEntryWrapper(Generic[RequestEntryT]):
    """A buffered request entry with its size (Flink's ``RequestEntryWrapper``).

    Attributes:
        request_entry: The entry, as the element converter made it.
        size: ``get_size_in_bytes(request_entry)``.
        attempts: How many times sending it has failed so far (not in Flink); a
            restored entry keeps spending the same retry budget.
    """

    request_entry: RequestEntryT
    size: int
    attempts: int = 0

    def get_request_entry(self) -> RequestEntryT:
        """The entry."""
        return self.request_entry

    def get_size(self) -> int:
        """Its size in bytes."""
        return self.size


def _to_tuple(
    wrappers: Iterable[RequestEntryWrapper[RequestEntryT]],
) -> tuple[RequestEntryWrapper[RequestEntryT], ...]:
    return tuple(wrappers)


@final
@attrs.frozen
class BufferedRequestState(Generic[RequestEntryT]):
    """The writer state of an async sink: entries not yet delivered, in send order."""

    buffered_request_entries: tuple[RequestEntryWrapper[RequestEntryT], ...] = attrs.field(
        converter=_to_tuple
    )

    def get_buffered_request_entries(self) -> list[RequestEntryWrapper[RequestEntryT]]:
        """The entries, oldest first."""
        return list(self.buffered_request_entries)

    def get_state_size(self) -> int:
        """The sum of the entries' sizes."""
        return sum(wrapper.size for wrapper in self.buffered_request_entries)

    @staticmethod
    def empty_state() -> BufferedRequestState[Any]:
        """A state without entries."""
        return BufferedRequestState(())

    def __len__(self) -> int:
        return len(self.buffered_request_entries)


class AsyncSinkWriterStateSerializer(abc.ABC, Generic[RequestEntryT]):
    """Versioned serializer of `BufferedRequestState`; you write one entry, it frames the list.

    Subclasses implement `serialize_request_entry` / `deserialize_request_entry`
    and `get_version`. Unlike Flink's, the framing stores each entry's byte length
    itself, so ``get_size_in_bytes`` is free to be an estimate.

    Format (msgpack): ``[[size, attempts, entry_bytes], ...]``.
    """

    @abc.abstractmethod
    def get_version(self) -> int:
        """The version the entries are written in; bump it when the entry format changes."""

    @abc.abstractmethod
    def serialize_request_entry(self, request_entry: RequestEntryT) -> bytes:
        """One entry's bytes."""

    @abc.abstractmethod
    def deserialize_request_entry(self, version: int, serialized: bytes) -> RequestEntryT:
        """An entry back from bytes written by version ``version``."""

    def get_supported_versions(self) -> Sequence[int]:
        """The versions `deserialize` reads; by default only the current one."""
        return (self.get_version(),)

    def serialize(self, obj: BufferedRequestState[RequestEntryT]) -> bytes:
        """The state's bytes."""
        entries = [
            [wrapper.size, wrapper.attempts, self.serialize_request_entry(wrapper.request_entry)]
            for wrapper in obj.buffered_request_entries
        ]
        packed: bytes = msgpack.packb(entries, use_bin_type=True)
        return packed

    def deserialize(self, version: int, serialized: bytes) -> BufferedRequestState[RequestEntryT]:
        """A state back from bytes.

        Raises:
            UnsupportedVersionError: ``version`` is not in `get_supported_versions`.
            CorruptDataError: the bytes are not a framed entry list, or an entry does
                not decode.
        """
        name = describe_serializer(self)
        supported = tuple(self.get_supported_versions())
        if version not in supported:
            raise UnsupportedVersionError(
                f"{name} cannot read buffered request state of version {version}; it reads "
                f"{list(supported)}. Restore with the sink release that wrote it.",
                serializer=name,
                version=version,
                supported=supported,
            )
        try:
            rows = msgpack.unpackb(serialized, raw=False, use_list=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
            raise CorruptDataError(
                f"{name}: buffered request state is not valid msgpack ({error})",
                serializer=name,
                version=version,
            ) from error
        if not isinstance(rows, list) or not all(_is_entry_row(row) for row in rows):
            raise CorruptDataError(
                f"{name}: buffered request state must be a list of [size, attempts, bytes] "
                f"rows (got {type(rows).__name__})",
                serializer=name,
                version=version,
            )
        wrappers = []
        for index, (size, attempts, data) in enumerate(rows):
            try:
                entry = self.deserialize_request_entry(version, data)
            except SerializationError:
                raise
            except Exception as error:
                raise CorruptDataError(
                    f"{name}: buffered entry {index} does not decode: {error!r}",
                    serializer=name,
                    version=version,
                ) from error
            wrappers.append(RequestEntryWrapper(entry, size, attempts))
        return BufferedRequestState(wrappers)


def _is_entry_row(row: object) -> bool:
    return (
        isinstance(row, list)
        and len(row) == 3
        and isinstance(row[0], int)
        and isinstance(row[1], int)
        and isinstance(row[2], bytes)
    )


def _hashable(key: Any) -> Any:
    return tuple(map(_hashable, key)) if isinstance(key, list) else key


def _dict_with_tuple_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return {_hashable(key): value for key, value in pairs}


@final
class MsgpackRequestStateSerializer(AsyncSinkWriterStateSerializer[Any]):
    """State serializer for entries msgpack stores as they are: dicts, lists, str, bytes, numbers.

    Tuples come back as lists, except as dict keys (they must stay hashable); dict
    keys may be anything msgpack stores (``{200: 5}`` comes back as it went in).
    Integers must fit in 64 bits. For attrs classes use `AttrsMsgpackSerializer` in
    a subclass of `AsyncSinkWriterStateSerializer`.
    """

    def get_version(self) -> int:
        """Version 1."""
        return 1

    def serialize_request_entry(self, request_entry: Any) -> bytes:
        """The entry as msgpack."""
        try:
            packed: bytes = msgpack.packb(request_entry, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as error:
            # OverflowError: an int outside msgpack's [-2**63, 2**64).
            raise SerializationError(
                f"MsgpackRequestStateSerializer cannot store a {type(request_entry).__name__} "
                f"entry ({error}); keep entries to dicts, lists, str, bytes and numbers "
                "(ints within 64 bits), or write an AsyncSinkWriterStateSerializer for them",
                serializer="MsgpackRequestStateSerializer",
            ) from error
        return packed

    def deserialize_request_entry(self, version: int, serialized: bytes) -> Any:
        """The entry back.

        Dict keys other than str (ints, floats, None, tuples) come back too: msgpack's
        ``strict_map_key`` guards against untrusted input, and the state is the
        writer's own.
        """
        try:
            return msgpack.unpackb(serialized, raw=False, strict_map_key=False)
        except TypeError:  # a tuple key, unpacked as an unhashable list
            return msgpack.unpackb(
                serialized, raw=False, strict_map_key=False, object_pairs_hook=_dict_with_tuple_keys
            )

    def __repr__(self) -> str:
        return "MsgpackRequestStateSerializer()"
