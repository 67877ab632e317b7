"""`RedisWriter`: one packed write and one parser pass per batch, on redis-py's connections.

Each batch goes out as one non-transactional pipeline (``MULTI`` would add two
commands and buy nothing: every command is idempotent on its own, or checked for
re-delivery): its commands packed into one bytes object, written in one call on a
connection of redis-py's pool, and their replies parsed by one ``hiredis.Reader``
(`reference_sinks.redis._resp`). Redis answers each command separately; the
answers decide per entry:

- ``OOM``, ``BUSY``, ``LOADING``, ``TRYAGAIN``, ``MASTERDOWN``, ``CLUSTERDOWN``,
  ``READONLY``: the server cannot take it now -> the entry is retried.
- An ``XADD`` id not above the stream's top: looked up with ``XRANGE``; present ->
  delivered before (re-delivery), absent -> out of order -> fatal.
- ``MOVED`` / ``ASK``: the server is a Redis Cluster node -> fatal, saying so.
- Any other error (``WRONGTYPE``, a bad argument) -> `FatalDestinationError`
  naming the key and Redis' message; retrying cannot fix it.

A failure of the whole round trip (connection refused or dropped, socket timeout)
raises, and the async base retries the whole batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import types
import weakref
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, final

import pyarrow as pa

from reference_sinks._json_values import Encoder
from reference_sinks.redis._modes import (
    PackCommand,
    RedisMode,
    StreamMode,
    column_encoders,
    show_key,
    uses_columns,
)
from reference_sinks.redis._resp import exchange
from sinkv2 import SinkWriter, WriterInitContext
from sinkv2.asyncsink import (
    AsyncSinkWriter,
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    ElementConverter,
    ErrorVerdict,
)
from sinkv2.errors import FatalDestinationError
from sinkv2.text import missing_extra

__all__ = ["RETRYABLE_REPLY_PREFIXES", "RedisWriter"]

RETRYABLE_REPLY_PREFIXES: Final = (
    "OOM",
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
)
"""Error replies that mean "not now": the server is full, busy, loading, or failing over."""

_XADD_ID_TOO_SMALL: Final = "equal or smaller than the target stream top item"
_CLUSTER_REDIRECTS: Final = ("MOVED ", "ASK ")


def _import_redis() -> tuple[types.ModuleType, PackCommand]:
    """``redis`` and ``hiredis.pack_command``, or an ImportError with the install line."""
    try:
        import hiredis  # noqa: PLC0415  # both are the redis extra
        import redis  # noqa: PLC0415
        import redis.asyncio  # noqa: PLC0415
        import redis.exceptions  # noqa: PLC0415
    except ImportError as error:
        raise missing_extra("reference_sinks.redis", "redis-py and hiredis", "redis") from error
    return redis, hiredis.pack_command


def _reply_is_retryable(error: BaseException, exceptions: types.ModuleType) -> bool:
    """A "not now" reply: redis-py maps some prefixes to classes and strips them."""
    mapped = (
        exceptions.OutOfMemoryError,
        exceptions.ReadOnlyError,
        exceptions.BusyLoadingError,
        exceptions.TryAgainError,
        exceptions.ClusterDownError,
    )
    return isinstance(error, mapped) or str(error).startswith(RETRYABLE_REPLY_PREFIXES)


def _abandoned(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: Any) -> None:
    """A writer dropped without ``close()``: close its client and end its loop thread.

    The async base's loop thread runs until ``close()``; a writer that is dropped
    instead (a runtime giving up on it, the contract kit's simulated crash) would
    otherwise keep the thread and its connections for the life of the process.
    """
    if loop.is_closed() or not thread.is_alive():
        return

    async def shutdown() -> None:
        with contextlib.suppress(Exception):
            await client.aclose()
        loop.stop()

    try:
        done = asyncio.run_coroutine_threadsafe(shutdown(), loop)
    except RuntimeError:  # the loop closed meanwhile
        return
    if threading.current_thread() is thread:
        return  # collected on the loop thread itself: it stops after this callback
    with contextlib.suppress(Exception):
        done.result(timeout=5)
    thread.join(timeout=5)
    if not thread.is_alive():
        loop.close()


@final
class RedisWriter(AsyncSinkWriter[Mapping[str, Any], list[Any]]):
    """Writes batches of entries to Redis as pipelines; made by `RedisSink`, not by hand.

    The client is created on the writer's event loop before the first request
    (`open_client`) and closed in ``close()`` (`close_client`). Its own retries are
    off unless ``client_options`` set ``retry``: the async base retries failed
    batches, with backoff, a retry budget and metrics.

    Args:
        element_converter: The sink's converter (a mode's ``to_entry``).
        context: The writer's init context.
        configuration: The buffering hints.
        states: Entries not delivered at the restored checkpoint.
        url: The Redis URL.
        mode: What each entry is written as.
        client_options: Extra keyword arguments of ``redis.asyncio.from_url``.
    """

    def __init__(
        self,
        element_converter: ElementConverter[Mapping[str, Any], list[Any]],
        context: WriterInitContext,
        configuration: AsyncSinkWriterConfiguration,
        states: Collection[BufferedRequestState[list[Any]]],
        *,
        url: str,
        mode: RedisMode,
        client_options: Mapping[str, Any],
        encoders: Mapping[str, Encoder] | None = None,
    ) -> None:
        self._redis, self._pack_command = _import_redis()
        self._url = url
        self._mode = mode
        self._client_options = dict(client_options)
        self._client: Any = None
        self._finalizer: weakref.finalize[Any, RedisWriter] | None = None
        self._element_converter = element_converter
        self._encoders = encoders
        self._schema_encoders: tuple[pa.Schema, Mapping[str, Encoder]] | None = None
        self._prebuilt = False
        super().__init__(self._entry_of, context, configuration, states)

    def _entry_of(self, element: Any, context: SinkWriter.Context) -> list[Any]:
        """The element's entry; in `write_arrow_batch`, the entry it built already."""
        if self._prebuilt:
            entry: list[Any] = element
            return entry
        return self._element_converter.apply(element, context)

    def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
        """Convert the batch column by column (`batch_entries`), then buffer each entry.

        A batch the column-wise path cannot convert (a key, value, fields or id
        function; a null key column; a value without a spelling) is written row by
        row, as ``write`` would: such a row then fails with its own message.

        Raises:
            SinkConfigurationError: a row has no entry (a null or missing key
                column, a value Redis cannot store), or a column's type has no
                spelling; the rows before it may have been buffered or sent.
        """
        entries = self._batch_entries(batch)
        write = self.write
        if entries is None:
            for row in batch.to_pylist():
                write(row, context)
            return
        self._prebuilt = True
        try:
            for entry in entries:
                write(entry, context)  # type: ignore[arg-type]  # _entry_of passes it through
        finally:
            self._prebuilt = False

    def _batch_entries(self, batch: pa.RecordBatch) -> list[list[Any]] | None:
        from reference_sinks.redis._batches import (  # noqa: PLC0415  # pyarrow.compute: writers only
            Unvectorised,
            batch_entries,
        )

        mode = self._mode
        if not uses_columns(mode):
            return None  # a function of the row dict: the row path
        encoders = self._encoders
        if encoders is None:
            # No input schema (not on Spark): the batch's own types spell the columns.
            cached = self._schema_encoders
            if cached is None or cached[0] != batch.schema:
                cached = (batch.schema, column_encoders(mode, batch.schema))
                self._schema_encoders = cached
            encoders = cached[1]
        try:
            return batch_entries(mode, batch, encoders)
        except Unvectorised:
            return None

    async def open_client(self) -> None:
        """Create the ``redis.asyncio`` client on this loop (connections open on first use)."""
        options = dict(self._client_options)
        if "retry" not in options:
            from redis.asyncio.retry import Retry  # noqa: PLC0415  # redis is an optional extra
            from redis.backoff import NoBackoff  # noqa: PLC0415

            options["retry"] = Retry(NoBackoff(), 0)
        self._client = self._redis.asyncio.from_url(self._url, **options)
        self._finalizer = weakref.finalize(
            self, _abandoned, asyncio.get_running_loop(), threading.current_thread(), self._client
        )

    async def close_client(self) -> None:
        """Close the client and its connection pool."""
        client, self._client = self._client, None
        if self._finalizer is not None:
            self._finalizer.detach()
        if client is not None:
            await client.aclose()

    def get_size_in_bytes(self, request_entry: list[Any]) -> int:
        """Key plus payload bytes (what goes over the wire, without the protocol framing)."""
        return self._mode.entry_size(request_entry)

    def classify_error(self, error: BaseException) -> ErrorVerdict:
        """Connection failures, timeouts and "not now" replies are retryable; auth is fatal."""
        exceptions = self._redis.exceptions
        if isinstance(error, exceptions.AuthenticationError | exceptions.AuthorizationError):
            return ErrorVerdict.FATAL
        if isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError):
            return ErrorVerdict.RETRYABLE  # BusyLoadingError is a ConnectionError
        if isinstance(error, exceptions.ResponseError) and _reply_is_retryable(error, exceptions):
            return ErrorVerdict.RETRYABLE
        return super().classify_error(error)

    async def submit_request_entries(self, request_entries: list[list[Any]]) -> Sequence[list[Any]]:
        """Send the batch as one packed pipeline; return the entries Redis asked to retry.

        Raises:
            FatalDestinationError: Redis refused an entry for good (``WRONGTYPE``,
                a bad argument, an out-of-order stream id, a cluster redirection);
                names the key and reply.
        """
        mode = self._mode
        packed, counts = mode.pack(request_entries, self._pack_command)
        total = sum(counts)
        if not total:
            return []
        replies = await self._round_trip(packed, total)
        response_error = self._redis.exceptions.ResponseError
        if replies is None or response_error not in set(map(type, replies)):
            return []
        retry: list[list[Any]] = []
        id_taken: list[list[Any]] = []
        position = 0
        for entry, count in zip(request_entries, counts, strict=True):
            errors = [
                reply
                for reply in replies[position : position + count]
                if isinstance(reply, response_error)
            ]
            position += count
            if not errors:
                continue
            error = errors[0]
            message = str(error)
            if message.startswith(RETRYABLE_REPLY_PREFIXES):
                retry.append(entry)
            elif isinstance(mode, StreamMode) and entry[2] and _XADD_ID_TOO_SMALL in message:
                id_taken.append(entry)
            elif message.startswith(_CLUSTER_REDIRECTS):
                raise FatalDestinationError(
                    f"Redis answered {mode.command} for key {show_key(entry[0])} with "
                    f"{message!r}: the server is a Redis Cluster node, and RedisSink writes "
                    "to one Redis server and does not follow cluster redirections. Point "
                    "url at a standalone server or primary (or a cluster proxy)"
                ) from error
            else:
                raise FatalDestinationError(
                    f"Redis refused {mode.command} for key {show_key(entry[0])}: {message} "
                    f"({type(error).__name__}); retrying cannot fix this. Check that the key "
                    "holds the type this mode writes, or route such keys elsewhere"
                ) from error
        if id_taken:
            await self._check_redelivered(id_taken)
        return retry

    async def _round_trip(self, packed: bytes, count: int) -> list[Any] | None:
        """``count`` packed commands on a connection of the pool; their raw replies.

        ``None`` when the mode's replies are one line each and none is an error.

        A connection whose exchange failed is disconnected (replies may be unread)
        before it goes back to the pool.
        """
        exceptions = self._redis.exceptions
        pool = self._client.connection_pool
        connection = await pool.get_connection()
        try:
            return await exchange(
                connection,
                packed,
                count,
                simple=self._mode.simple_replies,
                reply_error=exceptions.ResponseError,
                connection_error=exceptions.ConnectionError,
                timeout_error=exceptions.TimeoutError,
                socket_timeout=getattr(connection, "socket_timeout", None),
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)
            raise
        finally:
            await pool.release(connection)

    async def _check_redelivered(self, entries: list[list[Any]]) -> None:
        """Stream entries whose id Redis refused: delivered before, or out of order (fatal)."""
        pipeline = self._client.pipeline(transaction=False)
        for key, _, entry_id in entries:
            pipeline.execute_command("XRANGE", key, entry_id, entry_id)
        found = await pipeline.execute()
        for (key, _, entry_id), hits in zip(entries, found, strict=True):
            if not hits:
                raise FatalDestinationError(
                    f"Redis refused XADD to stream {show_key(key)} with id "
                    f"{entry_id.decode()}: the stream's last id is higher and the stream does "
                    "not hold this id, so the id is out of order. StreamMode ids must "
                    "increase per stream in input order"
                )
