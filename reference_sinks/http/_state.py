"""The HttpSink writer's state: each buffered record stored as the JSON it is sent as."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, final

from reference_sinks.http._writer import encode_json
from sinkv2.asyncsink import AsyncSinkWriterStateSerializer, MsgpackRequestStateSerializer
from sinkv2.errors import SerializationError

__all__ = ["JsonRecordStateSerializer"]

_VERSION_1 = MsgpackRequestStateSerializer()


@final
class JsonRecordStateSerializer(AsyncSinkWriterStateSerializer[Any]):
    """Stores each record as its JSON bytes, so every record the sink can send restores.

    Version 2. msgpack (version 1, still read) refused some records the sink sends
    without trouble: integers beyond 64 bits (a variant's decimal of 30 digits).
    A record comes back as the JSON it is sent as (tuples as lists, keys as str):
    the same request body.
    """

    def get_version(self) -> int:
        """Version 2: JSON records."""
        return 2

    def get_supported_versions(self) -> Sequence[int]:
        """Version 1 (msgpack records, written by earlier releases) and 2."""
        return (1, 2)

    def serialize_request_entry(self, request_entry: Any) -> bytes:
        """The record's JSON bytes, as `encode_json` sends them.

        Raises:
            SerializationError: the record is not JSON.
        """
        try:
            return encode_json(request_entry)
        except ValueError as error:
            raise SerializationError(
                f"HttpSink cannot store a record in its writer state: {error}",
                serializer="JsonRecordStateSerializer",
            ) from error

    def deserialize_request_entry(self, version: int, serialized: bytes) -> Any:
        """The record back from its JSON (version 2) or msgpack (version 1) bytes."""
        if version == 1:  # what the async sink base's default serializer wrote
            return _VERSION_1.deserialize_request_entry(version, serialized)
        return json.loads(serialized)

    def __repr__(self) -> str:
        return "JsonRecordStateSerializer()"
