"""`HttpSinkWriter`: each batch is one JSON POST, sent by aiohttp on the writer's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

from reference_sinks._urls import masked_url
from reference_sinks.http._responses import raise_for_status, retried_indices
from sinkv2 import SinkWriter, WriterInitContext
from sinkv2.asyncsink import (
    AsyncSinkWriter,
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    DeadLetter,
    ElementConverter,
    ErrorVerdict,
)
from sinkv2.errors import UndeliverableEntriesError
from sinkv2.text import describe, missing_extra

if TYPE_CHECKING:
    import aiohttp

__all__ = ["HttpSinkWriter", "encode_json"]

Entry = dict[str, Any]
BodyBuilder = Callable[[list[Entry]], Any]
Converter = ElementConverter[Any, Entry] | Callable[[Any, SinkWriter.Context], Entry]
DeadLetterHandler = Callable[[Sequence[DeadLetter[Entry]]], None]

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, the way the sink sends it.

    Raises:
        ValueError: ``value`` is not JSON (a ``set``, NaN, an object...); the message
            says how to make the converter return JSON-safe values.
    """
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"HttpSink cannot send {value!r:.200} as JSON ({error}); make the converter "
            "return str, numbers, bools, None, lists and dicts (the default converter, "
            "reference_sinks.http.JsonSafeConverter, does)"
        ) from error


_CLOSING: set[asyncio.Task[None]] = set()


def _close_abandoned(loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
    """Close the session of a writer dropped without ``close()`` (a crash), on its loop."""

    def schedule() -> None:
        task = loop.create_task(session.close())
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    # RuntimeError: the loop closed meanwhile, and its connections with it.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(schedule)


def _aiohttp() -> Any:
    try:
        import aiohttp  # noqa: PLC0415  # aiohttp is an optional extra
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise missing_extra("HttpSink", "aiohttp", "http") from error
    return aiohttp


@final
class HttpSinkWriter(AsyncSinkWriter[Any, Entry]):
    """Sends batches of JSON records as POST requests; made by `HttpSink`, not by hand.

    The aiohttp ``ClientSession`` lives on the writer's event loop: `open_client`
    makes it before the first request (one connection per request in flight) and
    `close_client` closes it in ``close()``. aiohttp's own timeouts are off; the
    writer's ``request_timeout_ms`` bounds each request, so a slow answer counts
    as a timeout (retried, or `RequestTimeoutError` with ``fail_on_timeout``).
    """

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        body_builder: BodyBuilder | None,
        dead_letter_handler: DeadLetterHandler | None,
        element_converter: Converter,
        context: WriterInitContext,
        configuration: AsyncSinkWriterConfiguration,
        states: Collection[BufferedRequestState[Entry]] = (),
    ) -> None:
        self.url = url
        self._shown_url = masked_url(url)
        self.headers = dict(headers)
        self._body_builder = body_builder
        self._dead_letter_handler = dead_letter_handler
        self._session: aiohttp.ClientSession | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        super().__init__(element_converter, context, configuration, states)

    def get_size_in_bytes(self, request_entry: Entry) -> int:
        """The length of the entry's JSON bytes."""
        return len(encode_json(request_entry))

    async def open_client(self) -> None:
        """One aiohttp session, with a connection for each request in flight.

        The pool is not capped: the rate limiting strategy already bounds the
        requests in flight, and may admit more than ``max_in_flight_requests`` (a
        custom one does not read it, as in Flink). A capped pool would make those
        requests wait for a connection while their ``request_timeout_ms`` runs.
        """
        aiohttp = _aiohttp()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            # None: the writer's request_timeout_ms (asyncio.wait_for around each request)
            # is the only deadline, so aiohttp never times out first.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=None, sock_read=None),
            headers=self._headers(),
        )
        # A writer dropped without close() (a task that crashed) still gets its
        # connections closed when it is garbage-collected, without ResourceWarnings.
        self._finalizer = weakref.finalize(
            self, _close_abandoned, asyncio.get_running_loop(), self._session
        )

    def _headers(self) -> dict[str, str]:
        """The sink's headers, with ``Content-Type: application/json`` unless they set one.

        Header names are case-insensitive: a ``content-type`` of the sink's replaces
        the default rather than going out as a second ``Content-Type``.
        """
        if any(name.lower() == "content-type" for name in self.headers):
            return dict(self.headers)
        return {"Content-Type": "application/json", **self.headers}

    async def close_client(self) -> None:
        """Close the session and its connections."""
        session, self._session = self._session, None
        if self._finalizer is not None:
            self._finalizer.detach()
        if session is not None:
            await session.close()

    def _body(self, request_entries: list[Entry]) -> bytes:
        if self._body_builder is None:
            return encode_json({"records": request_entries})
        body = self._body_builder(request_entries)
        if isinstance(body, bytes):
            return body
        return encode_json(body)

    async def submit_request_entries(self, request_entries: list[Entry]) -> Sequence[Entry]:
        """POST the batch; return the records the answer lists under ``"retry"``.

        Raises:
            ThrottledError: 429 or 503.
            RetryableError: 408, 500, 502, 504.
            FatalDestinationError: any other non-2xx status, or a malformed ``"retry"``.
        """
        if self._session is None:  # pragma: no cover - the base opens the client first
            raise RuntimeError("HttpSinkWriter.submit_request_entries before open_client")
        body = self._body(request_entries)
        async with self._session.post(self.url, data=body, allow_redirects=False) as response:
            answer = await response.read()
            raise_for_status(
                response.status,
                response.reason,
                response.headers,
                answer,
                self._shown_url,
                sent=(len(request_entries), len(body)),
            )
        indices = retried_indices(answer, len(request_entries), self._shown_url)
        return [request_entries[i] for i in indices]

    def classify_error(self, error: BaseException) -> ErrorVerdict:
        """Retryable: aiohttp's connection, payload and server-timeout errors; else the default.

        Fatal: an invalid URL and a certificate the client does not trust.
        """
        aiohttp = _aiohttp()
        if isinstance(error, aiohttp.InvalidURL | aiohttp.ClientConnectorCertificateError):
            return ErrorVerdict.FATAL  # a bad URL or certificate does not heal by retrying
        if isinstance(
            error,
            aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | aiohttp.ServerTimeoutError,
        ):
            return ErrorVerdict.RETRYABLE
        return super().classify_error(error)

    def handle_dead_letters(self, dead_letters: Sequence[DeadLetter[Entry]]) -> None:
        """Hand them to the sink's ``dead_letter_handler``; without one, fail.

        Raises:
            UndeliverableEntriesError: no ``dead_letter_handler`` was configured; the
                message names the URL (password masked), the first records with why
                each was given up, and the options that change the outcome.
        """
        if self._dead_letter_handler is not None:
            self._dead_letter_handler(dead_letters)
            return
        shown = "; ".join(
            f"{describe(letter.request_entry)} ({letter.reason}"
            + (f", after {letter.attempts} failed attempts)" if letter.attempts else ")")
            for letter in dead_letters[:3]
        )
        more = f" and {len(dead_letters) - 3} more" if len(dead_letters) > 3 else ""
        raise UndeliverableEntriesError(
            f"HttpSink gave up on {len(dead_letters)} records for POST {self._shown_url}: "
            f"{shown}{more}. Fix the cause; or raise max_retries_per_entry, "
            "request_timeout_ms or max_record_size_in_bytes in the configuration; or pass "
            "HttpSink(dead_letter_handler=...) to take such records instead of failing",
            dead_letters=dead_letters,
        )
