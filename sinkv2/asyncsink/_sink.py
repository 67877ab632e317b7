"""`AsyncSinkBase`: the sink half of FLIP-171 - element converter, hints, writer state."""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar

from sinkv2._context import WriterInitContext
from sinkv2._serialization import SimpleVersionedSerializer
from sinkv2._writer import SinkWriter
from sinkv2.asyncsink._config import AsyncSinkWriterConfiguration
from sinkv2.asyncsink._state import BufferedRequestState, MsgpackRequestStateSerializer
from sinkv2.asyncsink._writer import AsyncSinkWriter, ElementConverter
from sinkv2.errors import SinkConfigurationError, SinkDefinitionError

__all__ = ["AsyncSinkBase"]

InputT = TypeVar("InputT")
RequestEntryT = TypeVar("RequestEntryT")


class AsyncSinkBase(abc.ABC, Generic[InputT, RequestEntryT]):
    """Base of sinks that write through an async client, at least once (Flink's ``AsyncSinkBase``).

    It is a `Sink` with `SupportsWriterState`: the state is the request entries
    a writer had not delivered at a checkpoint.

    Implement (required): ``restore_writer(context, recovered_state)`` returning
    your `AsyncSinkWriter` built with ``self.element_converter``,
    ``self.configuration`` and ``recovered_state``. ``create_writer(context)``
    calls it with no state. Optional: ``get_writer_state_serializer()``; the
    default stores entries msgpack can (dicts, lists, str, bytes, numbers).

    Args:
        element_converter: Turns an element into a request entry; an
            `ElementConverter` or a function ``(element, context) -> entry``.
        configuration: The buffering hints; defaults to
            ``AsyncSinkWriterConfiguration()``.
    """

    def __init__(
        self,
        element_converter: ElementConverter[InputT, RequestEntryT]
        | Callable[[InputT, SinkWriter.Context], RequestEntryT],
        configuration: AsyncSinkWriterConfiguration | None = None,
    ) -> None:
        if not callable(getattr(element_converter, "apply", None)) and not callable(
            element_converter
        ):
            raise SinkDefinitionError(
                "element_converter must have apply(element, context) or be a function "
                f"(element, context) -> entry (got {element_converter!r} of type "
                f"{type(element_converter).__name__})"
            )
        if configuration is None:
            configuration = AsyncSinkWriterConfiguration()
        if not isinstance(configuration, AsyncSinkWriterConfiguration):
            raise SinkConfigurationError(
                "configuration must be an AsyncSinkWriterConfiguration (got "
                f"{configuration!r} of type {type(configuration).__name__})"
            )
        self.element_converter = element_converter
        self.configuration = configuration

    def create_writer(self, context: WriterInitContext) -> AsyncSinkWriter[InputT, RequestEntryT]:
        """A writer with an empty buffer."""
        return self.restore_writer(context, ())

    @abc.abstractmethod
    def restore_writer(
        self,
        context: WriterInitContext,
        recovered_state: Collection[BufferedRequestState[RequestEntryT]],
    ) -> AsyncSinkWriter[InputT, RequestEntryT]:
        """A writer whose buffer starts with every entry of ``recovered_state``, in order."""

    def get_writer_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[BufferedRequestState[Any]]:
        """Msgpack framing of the buffered entries; override for entries msgpack cannot store."""
        return MsgpackRequestStateSerializer()
