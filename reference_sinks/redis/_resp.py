"""One batch, one write, one read: packed RESP pipelines on redis-py's connections.

redis-py makes and hands out the connections (`connection_pool`): it parses the
URL, opens TCP, TLS or a Unix socket, authenticates, selects the database, and
honours every ``client_options`` keyword (``ssl_*``, ``socket_*``, credential
providers, ``client_name``, ``protocol``). The request itself skips its
per-command path: the caller packs the batch's commands into one bytes object
(``hiredis.pack_command``), `exchange` writes it to the connection's socket in one
call and parses every reply with one ``hiredis.Reader`` as the bytes arrive. An
error reply is a value in the result (a ``redis.exceptions.ResponseError`` with
Redis' whole message, prefix included), so one refused command does not hide the
others' replies.

Measured on 1,000-command batches: redis-py's asyncio pipeline did about 60k
commands/s, redis-py's own ``read_response`` per reply about 95k/s (an awaited
step with a timeout context per reply), this path 500-700k/s
(``benchmarks/redis_sink_bench.py``).

The socket is redis-py's: ``Connection._reader`` and ``._writer``, the asyncio
streams every redis-py asyncio connection has had since 4.2 (`streams_of` checks
and says so if a version drops them). A connection whose exchange did not end
cleanly (an error, a timeout, a cancellation) may have replies still unread, so it
is disconnected before it goes back to the pool; redis-py reconnects it on its
next use.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

__all__ = ["READ_SIZE", "exchange", "streams_of"]

READ_SIZE: Final = 1 << 16
"""Bytes asked of the socket per read."""


def streams_of(connection: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The asyncio streams of a connected redis-py connection.

    Raises:
        RuntimeError: the connection has none (a redis-py without them, or a
            connection class of another kind); says which versions work.
    """
    reader = getattr(connection, "_reader", None)
    writer = getattr(connection, "_writer", None)
    if not isinstance(reader, asyncio.StreamReader) or not isinstance(writer, asyncio.StreamWriter):
        raise RuntimeError(
            f"RedisSink writes through the asyncio streams of redis-py's connections "
            f"(redis-py 5 to 8), and {type(connection).__name__} has none; install a "
            "redis-py of those versions, and leave client_options' connection_class unset"
        )
    return reader, writer


async def exchange(
    connection: Any,
    packed: bytes,
    count: int,
    *,
    simple: bool,
    reply_error: type[Exception],
    connection_error: type[Exception],
    timeout_error: type[Exception],
    socket_timeout: float | None,
) -> list[Any] | None:
    """Write ``packed`` (``count`` commands) in one call; return the ``count`` replies.

    Replies are raw (bytes, not decoded); an error reply is a ``reply_error``
    instance in the list. With ``simple`` (every reply is one line: ``+OK``,
    ``:<n>`` or an error), the replies are counted by their line ends and parsed
    only if one is an error: ``None`` means all ``count`` replies came and none
    is. The caller disconnects the connection if this raises.

    Raises:
        connection_error: the connection closed or failed before every reply came,
            or sent more replies than commands.
        timeout_error: no bytes came for ``socket_timeout`` seconds.
    """
    import hiredis  # noqa: PLC0415  # the redis extra installs it; checked when writers start

    reader, writer = streams_of(connection)
    parser = hiredis.Reader(replyError=reply_error, protocolError=connection_error)
    received = _Received(reader, socket_timeout, count, connection_error)
    try:
        writer.write(packed)
        if socket_timeout is None:
            await writer.drain()
        else:
            await asyncio.wait_for(writer.drain(), socket_timeout)
        if simple:
            data = await received.lines()
            if data[:1] != b"-" and b"\r\n-" not in data:
                return None
            parser.feed(bytes(data))
            return [parser.gets() for _ in range(count)]
        return await received.replies(parser)
    except TimeoutError:
        raise timeout_error(
            f"no reply from Redis within socket_timeout={socket_timeout} s "
            f"({received.read} of {count} replies read)"
        ) from None
    except OSError as error:
        raise connection_error(f"the connection failed: {error}") from error


class _Received:
    """The replies to ``count`` commands, read from ``reader`` as they come."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        socket_timeout: float | None,
        count: int,
        connection_error: type[Exception],
    ) -> None:
        self.reader = reader
        self.socket_timeout = socket_timeout
        self.count = count
        self.connection_error = connection_error
        self.read = 0

    async def _chunk(self) -> bytes:
        if self.socket_timeout is None:
            data = await self.reader.read(READ_SIZE)
        else:
            data = await asyncio.wait_for(self.reader.read(READ_SIZE), self.socket_timeout)
        if not data:
            raise self.connection_error(
                f"the connection closed after {self.read} of {self.count} replies"
            )
        return data

    def _check_not_over(self) -> None:
        if self.read > self.count:
            raise self.connection_error(
                f"Redis sent {self.read} replies to {self.count} commands; the connection is "
                "out of step"
            )

    async def lines(self) -> bytearray:
        """The bytes of ``count`` one-line replies."""
        received = bytearray()
        while self.read < self.count:
            start = max(len(received) - 1, 0)  # a line end may straddle two reads
            received += await self._chunk()
            self.read += received.count(b"\r\n", start)
        self._check_not_over()
        return received

    async def replies(self, parser: Any) -> list[Any]:
        """``count`` replies, parsed by ``parser`` (a ``hiredis.Reader``) as they come."""
        replies: list[Any] = []
        while self.read < self.count:
            parser.feed(await self._chunk())
            while (reply := parser.gets()) is not False:
                replies.append(reply)
            self.read = len(replies)
        self._check_not_over()
        return replies
