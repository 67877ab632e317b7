"""The Redis commands `RedisStreamSource` sends, each batch of them in one pipelined round trip.

Synchronous redis-py (the enumerator and the readers each own a client; redis-py
makes the connections from the URL and ``client_options``). Every call here takes
many keys and sends one pipeline (no ``MULTI``), so asking the last id of a
thousand streams is one round trip. An error reply for one key is turned into an
error naming that key: ``WRONGTYPE`` into `NotAStreamError`. `connect` asks
``PING`` first, so that a wrong password, database number or scheme is told as
such, naming the URL (`redacted`).
"""

from __future__ import annotations

import types
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs

from reference_sinks._urls import masked_url
from reference_sinks.redis._source_rows import Entry
from reference_sinks.redis._source_split import MAX_ID, id_after
from sinkv2.errors import SinkConfigurationError, SinkV2Error
from sinkv2.text import missing_extra

__all__ = [
    "NotAStreamError",
    "StreamHead",
    "connect",
    "last_ids",
    "read_ranges",
    "scan_streams",
    "stream_heads",
    "trim",
]

SCAN_COUNT: Final = 1000
"""Keys Redis looks at per ``SCAN`` call when discovering streams by pattern."""


class NotAStreamError(SinkV2Error, TypeError):
    """A key the source reads holds another type than a stream (Redis answered ``WRONGTYPE``).

    Attributes:
        key: The key.
    """

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


def _redis() -> types.ModuleType:
    try:
        import redis  # noqa: PLC0415  # the redis extra
    except ImportError as error:
        raise missing_extra("RedisStreamSource", "redis-py", "redis") from error
    return redis


def connect(url: str, client_options: Mapping[str, Any]) -> Any:
    """A redis-py client (sync, raw bytes replies) for ``url``, which answered ``PING``.

    Raises:
        ImportError: redis-py is not installed (the message has the install line).
        SinkConfigurationError: The server cannot be reached, or refuses the URL's
            password or database number; the message names the URL (password masked)
            and what to check.
    """
    redis = _redis()
    client = redis.Redis.from_url(url, **{**client_options, "decode_responses": False})
    try:
        client.ping()
    except redis.exceptions.RedisError as error:
        client.close()
        raise SinkConfigurationError(
            f"RedisStreamSource could not connect to {masked_url(url)}: {_why(url, error)} "
            f"({type(error).__name__}: {error})"
        ) from error
    return client


def _why(url: str, error: Exception) -> str:
    """What a failed ``PING`` means, and what to do."""
    exceptions = _redis().exceptions
    parts = urllib.parse.urlsplit(url)
    text = str(error)
    if isinstance(error, exceptions.AuthenticationError) or "NOAUTH" in text:
        if parts.password is None:
            return (
                "the server needs a password; put it in the url, "
                "'redis://:password@host:port/db' (or 'redis://user:password@...' for an "
                "ACL user)"
            )
        return "the server refused the password (or user name) in the url; correct it"
    if "DB index is out of range" in text:
        return (
            f"its database number {parts.path.strip('/')} is out of range for the server "
            "(it has 'databases' of them, 16 unless configured); use a lower number"
        )
    if parts.scheme == "rediss":
        return (
            "the TLS connection failed: is the server listening with TLS on that port? "
            "Use redis:// for a server without TLS, or pass the certificates it needs "
            "in client_options (ssl_ca_certs, ssl_certfile, ssl_keyfile)"
        )
    return (
        "check the host and port (or socket path) in the url, that the server is up, "
        "and that it does not need TLS (then the url is rediss://)"
    )


def _check(key: str, reply: Any, command: str) -> Any:
    if isinstance(reply, Exception):
        text = str(reply)
        if text.startswith("WRONGTYPE"):
            raise NotAStreamError(
                f"the key {key!r} holds another type than a stream, so RedisStreamSource "
                f"cannot read it ({command} answered {text!r}); read only stream keys (list "
                "them in keys=, or narrow the pattern), or delete or rename that key",
                key=key,
            ) from reply
        exceptions = _redis().exceptions
        if isinstance(reply, exceptions.MovedError | exceptions.AskError):
            raise SinkConfigurationError(
                f"the key {key!r} lives on another node of a Redis Cluster ({command} was "
                f"answered {'MOVED' if isinstance(reply, exceptions.MovedError) else 'ASK'} "
                f"{text}): RedisStreamSource reads the one server of its url. List only keys "
                "that node serves (give them one hash tag, e.g. 'orders:{eu}:1' and "
                "'orders:{eu}:2', to keep them in one slot), or read each node's keys with a "
                "source of its own"
            ) from reply
        raise reply
    return reply


def last_ids(client: Any, keys: Sequence[str]) -> list[str | None]:
    """Each key's last entry id (``XREVRANGE key + - COUNT 1``), ``None`` for no entry.

    A missing key and an empty stream both have none.

    Raises:
        NotAStreamError: A key holds another type.
    """
    if not keys:
        return []
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xrevrange(key, "+", "-", count=1)
    replies = pipe.execute(raise_on_error=False)
    ids: list[str | None] = []
    for key, reply in zip(keys, replies, strict=True):
        entries = _check(key, reply, "XREVRANGE")
        ids.append(entries[0][0].decode("ascii") if entries else None)
    return ids


@final
@attrs.frozen
class StreamHead:
    """What ``XINFO STREAM`` tells of a stream's ends.

    Attributes:
        last: The id of the last entry ever added (``last-generated-id``; the entry
            may be deleted since).
        first: The first entry's id (``None``: no entry).
        length: How many entries it holds.
        added: How many entries it was ever given (``entries-added``); ``None`` when
            Redis does not tell (before 7.0).
        max_deleted: The highest id ``XDEL`` deleted (``XTRIM`` and ``MAXLEN`` do not
            count), ``0-0`` for none; ``None`` when Redis does not tell (before 7.0).
    """

    last: str
    first: str | None
    length: int
    added: int | None
    max_deleted: str | None


def _entry_id(entry: Any) -> str | None:
    if not entry or entry[0] is None:
        return None
    return bytes(entry[0]).decode("ascii")


def stream_heads(client: Any, keys: Sequence[str]) -> list[StreamHead | None]:
    """Each key's ends and deletions (``XINFO STREAM key``), ``None`` for a missing key.

    Raises:
        NotAStreamError: A key holds another type.
    """
    if not keys:
        return []
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xinfo_stream(key)
    replies = pipe.execute(raise_on_error=False)
    heads: list[StreamHead | None] = []
    for key, reply in zip(keys, replies, strict=True):
        if isinstance(reply, Exception) and "no such key" in str(reply).lower():
            heads.append(None)
            continue
        info = _check(key, reply, "XINFO STREAM")
        deleted = info.get("max-deleted-entry-id")
        added = info.get("entries-added")
        heads.append(
            StreamHead(
                bytes(info["last-generated-id"]).decode("ascii"),
                _entry_id(info.get("first-entry")),
                int(info["length"]),
                None if added is None else int(added),
                None if deleted is None else bytes(deleted).decode("ascii"),
            )
        )
    return heads


def read_ranges(
    client: Any, ranges: Sequence[tuple[str, str, str | None, int]]
) -> list[list[Entry]]:
    """The entries of each ``(key, after, stop, count)``: ``XRANGE key (after stop COUNT count``.

    ``stop`` ``None`` reads to the stream's end (``+``). A missing key has none, and
    nothing follows the largest id (`MAX_ID`; Redis refuses a range after it).

    Raises:
        NotAStreamError: A key holds another type.
    """
    asked = [(key, after, stop, count) for key, after, stop, count in ranges if after != MAX_ID]
    replies: list[Any] = []
    if asked:
        pipe = client.pipeline(transaction=False)
        for key, after, stop, count in asked:
            pipe.xrange(key, f"({after}", "+" if stop is None else stop, count=count)
        replies = pipe.execute(raise_on_error=False)
    answers = iter(zip(asked, replies, strict=True))
    entries: list[list[Entry]] = []
    for _, after, _, _ in ranges:
        if after == MAX_ID:
            entries.append([])
            continue
        (key, _, _, _), reply = next(answers)
        entries.append(list(_check(key, reply, "XRANGE")))
    return entries


def scan_streams(client: Any, pattern: str) -> list[str]:
    """The stream keys matching the glob ``pattern`` now (``SCAN ... MATCH ... TYPE stream``).

    Keys that are not valid UTF-8 are skipped: the source names keys as text.
    """
    found: set[str] = set()
    for raw in client.scan_iter(match=pattern, count=SCAN_COUNT, _type="stream"):
        try:
            found.add(raw.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return sorted(found)


def trim(client: Any, read_to: Mapping[str, str]) -> list[int]:
    """Delete each key's entries up to and including an id: ``XTRIM key MINID <next id>``.

    Exact (``=``, not ``~``). At the largest id (`MAX_ID`) nothing can follow, so the
    whole stream goes (``XTRIM key MAXLEN 0``). Returns how many entries each trim
    deleted. A key that no longer exists is left.

    Raises:
        NotAStreamError: A key holds another type now.
    """
    if not read_to:
        return []
    pipe = client.pipeline(transaction=False)
    for key, last in read_to.items():
        if last == MAX_ID:
            pipe.xtrim(key, maxlen=0, approximate=False)
        else:
            pipe.xtrim(key, minid=id_after(last), approximate=False)
    replies = pipe.execute(raise_on_error=False)
    return [int(_check(key, r, "XTRIM")) for key, r in zip(read_to, replies, strict=True)]
