"""`HttpSink`: at-least-once JSON batches to an HTTP endpoint, on sinkv2's async sink base."""

from __future__ import annotations

import importlib.util
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from typing import Any, final

from reference_sinks._arrow_types import check_columns_on_driver
from reference_sinks._urls import masked_url
from reference_sinks.http._json import JsonSafeConverter
from reference_sinks.http._state import JsonRecordStateSerializer
from reference_sinks.http._writer import BodyBuilder, DeadLetterHandler, Entry, HttpSinkWriter
from sinkv2 import (
    SimpleVersionedSerializer,
    SinkWriter,
    SupportsPreWriteTopology,
    WriterInitContext,
)
from sinkv2.asyncsink import (
    AsyncSinkBase,
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    ElementConverter,
)
from sinkv2.errors import SinkConfigurationError
from sinkv2.text import describe, missing_extra

__all__ = ["HttpSink"]

_RESERVED_HEADERS = frozenset({"content-length", "transfer-encoding", "host"})


def _check_url(url: object) -> str:
    if not isinstance(url, str):
        raise SinkConfigurationError(
            f"HttpSink url must be a str (got {describe(url)}); pass e.g. "
            "'https://ingest.example.com/v1/records'"
        )
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as error:
        raise SinkConfigurationError(
            f"HttpSink url is not a valid URL (got {masked_url(url)!r}: {error}); pass e.g. "
            "'http://127.0.0.1:8080/ingest'"
        ) from error
    if parts.scheme not in ("http", "https"):
        raise SinkConfigurationError(
            f"HttpSink url must start with http:// or https:// (got scheme "
            f"{parts.scheme!r} in {masked_url(url)!r}); the sink only speaks HTTP"
        )
    if not parts.hostname:
        raise SinkConfigurationError(
            f"HttpSink url must name a host (got {masked_url(url)!r}); pass e.g. "
            "'http://127.0.0.1:8080/ingest'"
        )
    if parts.fragment:
        raise SinkConfigurationError(
            f"HttpSink url must not have a #fragment (got {masked_url(url)!r}); servers never "
            "see it, so drop it"
        )
    return url


def _check_headers(headers: object, url: str) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise SinkConfigurationError(
            "HttpSink headers must be a mapping of str to str (got a "
            f"{type(headers).__name__}; its contents are not shown, they may hold "
            "credentials); pass e.g. {'Authorization': 'Bearer ...'}"
        )
    checked: dict[str, str] = {}
    seen: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise SinkConfigurationError(
                f"HttpSink headers must map non-empty str names to str values (got "
                f"{describe(name)} -> a value of type {type(value).__name__}, not shown: "
                "it may be a credential); convert the value with str()"
            )
        if any(c in name + value for c in "\r\n"):
            raise SinkConfigurationError(
                f"HttpSink header {name!r} contains a line break; headers are one line each"
            )
        if name.lower() in _RESERVED_HEADERS:
            raise SinkConfigurationError(
                f"HttpSink header {name!r} is set by the HTTP client for each request; "
                "remove it from headers"
            )
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise SinkConfigurationError(
                f"HttpSink headers name {other!r} and {name!r}, the same header (names "
                "are case-insensitive), so it would be sent twice; keep one"
            )
        checked[name] = value
    if "authorization" in seen and urllib.parse.urlsplit(url).username is not None:
        raise SinkConfigurationError(
            f"HttpSink url {masked_url(url)!r} has credentials and headers has "
            f"{seen['authorization']!r}; the client cannot send both, so pass the "
            "credentials one way only"
        )
    return checked


def _check_callable(name: str, value: object, example: str) -> None:
    if value is not None and not callable(value):
        raise SinkConfigurationError(
            f"HttpSink {name} must be a function or None (got {describe(value)}); "
            f"pass e.g. {example}"
        )


def _require_aiohttp() -> None:
    if importlib.util.find_spec("aiohttp") is None:  # pragma: no cover - without the extra
        raise missing_extra("HttpSink", "aiohttp", "http")


@final
class HttpSink(AsyncSinkBase[Any, Entry], SupportsPreWriteTopology[Any]):
    """Writes elements as JSON records to an HTTP endpoint, one POST per batch, at least once.

    Each batch is ``POST url`` with the body ``{"records": [record, ...]}`` (or what
    ``body_builder`` makes of the list). The answer decides (``docs/sinks/http.md``):
    2xx landed, except the indices a JSON body lists under ``"retry"``; 429/503 are
    throttling (``Retry-After`` honoured, the rate limiter backs off); 408/500/502/504
    and connection errors are retried; any other status fails the writer with the
    server's message.

    At least once: a batch whose answer got lost (a timeout, a dropped connection)
    is sent again, so the receiver may see a record twice; make it idempotent
    (e.g. upsert by a record id).

    Args:
        url: The endpoint, ``http://`` or ``https://``. Credentials in it
            (``https://user:password@host/``) go out as basic auth; messages and
            the repr show the password as ``***``.
        headers: Sent with every request (e.g. ``Authorization``);
            ``Content-Type: application/json`` unless you set it (in any case).
            Names are case-insensitive: two spellings of one name are refused.
        converter: Turns an element (a row dict on Spark) into a record, a dict
            JSON can write (the writer state stores records as their JSON). Default:
            `JsonSafeConverter` (each Spark type as Spark's JSON writer spells it,
            except decimals as exact strings; see ``docs/sinks/http.md``).
        body_builder: ``records -> body``: a JSON-serializable object, or ``bytes``
            sent as they are. Default: ``{"records": records}``. Per-record retry
            indices refer to positions in ``records``.
        dead_letter_handler: Takes records the writer gives up on (retry budget
            spent, larger than ``max_record_size_in_bytes``); if it returns, they are
            dropped and the writer goes on. Default: the writer fails with
            `UndeliverableEntriesError`.
        configuration: The async writer's hints (batch size, in-flight requests,
            ``request_timeout_ms``, retry budget and backoff, ``ordering_key``...).

    Raises:
        SinkConfigurationError: an argument is invalid (checked here, before any job).
        SinkDefinitionError: ``converter`` is neither a function nor has ``apply``.
        ImportError: aiohttp is not installed.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        converter: ElementConverter[Any, Entry]
        | Callable[[Any, SinkWriter.Context], Entry]
        | None = None,
        body_builder: BodyBuilder | None = None,
        dead_letter_handler: DeadLetterHandler | None = None,
        configuration: AsyncSinkWriterConfiguration | None = None,
    ) -> None:
        _require_aiohttp()
        self.url = _check_url(url)
        self.headers = _check_headers(headers, self.url)
        _check_callable("body_builder", body_builder, "lambda records: {'items': records}")
        _check_callable("dead_letter_handler", dead_letter_handler, "dead_letters.extend")
        self.body_builder = body_builder
        self.dead_letter_handler = dead_letter_handler
        super().__init__(converter if converter is not None else JsonSafeConverter(), configuration)

    def add_pre_write_topology(self, input: Any) -> Any:
        """``input`` unchanged, once its column types are checked (on the driver).

        With the default converter, a column whose type has no JSON spelling is
        refused here, before any Spark job, as the writers would refuse it.

        Raises:
            SinkConfigurationError: a column's type has no JSON spelling (a day-time
                interval); the message names the column and its Spark type.
        """
        if isinstance(self.element_converter, JsonSafeConverter):
            check_columns_on_driver(input, JsonSafeConverter().for_schema)
        return input

    def restore_writer(
        self,
        context: WriterInitContext,
        recovered_state: Collection[BufferedRequestState[Entry]],
    ) -> HttpSinkWriter:
        """A writer whose buffer starts with the records of ``recovered_state``, in order.

        With the default converter and an input schema (on Spark), rows are converted
        by their column types.

        Raises:
            SinkConfigurationError: a column's type has no JSON spelling (before any
                row is converted).
        """
        converter = self.element_converter
        schema = context.get_input_schema()
        if isinstance(converter, JsonSafeConverter) and schema is not None:
            converter = converter.for_schema(schema)
        return HttpSinkWriter(
            url=self.url,
            headers=self.headers,
            body_builder=self.body_builder,
            dead_letter_handler=self.dead_letter_handler,
            element_converter=converter,
            context=context,
            configuration=self.configuration,
            states=recovered_state,
        )

    def get_writer_state_serializer(self) -> SimpleVersionedSerializer[BufferedRequestState[Any]]:
        """Each buffered record as its JSON bytes: whatever the sink can send, it can restore."""
        return JsonRecordStateSerializer()

    def __repr__(self) -> str:
        return f"HttpSink({masked_url(self.url)!r})"
