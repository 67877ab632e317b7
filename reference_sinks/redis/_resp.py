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
    reply_error: type[Exception],
    connection_error: type[Exception],
    timeout_error: type[Exception],
    socket_timeout: float | None,
) -> list[Any]:
    """Write ``packed`` (``count`` commands) in one call; return the ``count`` replies.

    Replies are raw (bytes, not decoded); an error reply is a ``reply_error``
    instance in the list. The caller disconnects the connection if this raises.

    Raises:
        connection_error: the connection closed or failed before every reply came.
        timeout_error: no bytes came for ``socket_timeout`` seconds.
    """
    import hiredis  # noqa: PLC0415  # the redis extra installs it; checked when writers start

    reader, writer = streams_of(connection)
    parser = hiredis.Reader(replyError=reply_error, protocolError=connection_error)
    replies: list[Any] = []
    try:
        writer.write(packed)
        if socket_timeout is None:
            await writer.drain()
        else:
            await asyncio.wait_for(writer.drain(), socket_timeout)
        gets = parser.gets
        append = replies.append
        while len(replies) < count:
            if socket_timeout is None:
                data = await reader.read(READ_SIZE)
            else:
                data = await asyncio.wait_for(reader.read(READ_SIZE), socket_timeout)
            if not data:
                raise connection_error(
                    f"the connection closed after {len(replies)} of {count} replies"
                )
            parser.feed(data)
            while (reply := gets()) is not False:
                append(reply)
    except asyncio.TimeoutError:
        raise timeout_error(
            f"no reply from Redis within socket_timeout={socket_timeout} s "
            f"({len(replies)} of {count} replies read)"
        ) from None
    except OSError as error:
        raise connection_error(f"the connection failed: {error}") from error
    if len(replies) > count:
        raise connection_error(
            f"Redis sent {len(replies)} replies to {count} commands; the connection is "
            "out of step (a RESP3 push message?)"
        )
    return replies
