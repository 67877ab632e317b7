"""`RedisStreamSource`: Redis Streams read by entry id, bounded or for ever, replayable exactly.

Positions are entry ids, and ``XRANGE key (after stop`` reads the range after
one id up to another: ids only grow, so a range reads the same entries every
time (nobody deleting inside it). One split per stream key; the keys are listed,
or matched by a glob pattern (``SCAN``, periodically when unbounded).

On a micro-batch engine (Spark) the source is cut on the driver
(`sinkv2.source.SupportsEndPositions`): `RedisStreamSource.end_positions` asks
every key's last id in one pipelined round trip, `RedisStreamSource.cut_split`
cuts a split into ``(after, end]`` for one micro-batch and the rest.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs
import pyarrow as pa

from reference_sinks._urls import masked_url
from reference_sinks.redis._source_client import (
    connect,
    read_ranges,
    stream_heads,
)
from reference_sinks.redis._source_enumerator import RedisStreamEnumerator
from reference_sinks.redis._source_heads import check_not_trimmed
from reference_sinks.redis._source_reader import RedisStreamReader
from reference_sinks.redis._source_rows import produced_schema
from reference_sinks.redis._source_split import (
    RedisStreamEnumeratorState,
    RedisStreamSplit,
    check_id,
    enumerator_state_serializer,
    id_key,
    split_serializer,
)
from sinkv2 import AttrsMsgpackSerializer
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import Boundedness, SourceReaderContext, SplitCut, SplitEnumeratorContext

__all__ = ["RedisStreamSource"]

_SCHEMES: Final = ("redis", "rediss", "unix")
_DRIVER_ONLY: Final = ("_client", "_enumerator", "_counts")


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SinkConfigurationError(
            f"RedisStreamSource {name} must be an int >= 1 (got {value!r} of type "
            f"{type(value).__name__})"
        )
    return value


def _check_url(url: str) -> None:
    """A ``redis://`` or ``rediss://`` URL's port and database must be numbers.

    Raises:
        SinkConfigurationError: They are not (redis-py would fail only when a reader
            connects).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        return
    problem = None
    try:
        parts.port  # noqa: B018  # parsing it is the check
    except ValueError:
        problem = f"its port {parts.netloc.rpartition(':')[2]!r} is not a port number"
    database = parts.path.strip("/")
    if problem is None and database and not database.isdigit():
        problem = f"its database {database!r} is not a number"
    if problem is not None:
        raise SinkConfigurationError(
            f"RedisStreamSource url {masked_url(url)!r} is not a Redis URL: {problem}; "
            "e.g. 'redis://127.0.0.1:6379/0' (host, port, database number)"
        )


def _keys(keys: object) -> tuple[str, ...]:
    if isinstance(keys, str):
        keys = (keys,)
    if not isinstance(keys, Iterable):
        raise SinkConfigurationError(
            f"RedisStreamSource keys must be a list of stream keys (got {keys!r} of type "
            f"{type(keys).__name__}); e.g. keys=['orders', 'payments']"
        )
    result = tuple(keys)
    for key in result:
        if not isinstance(key, str) or not key:
            raise SinkConfigurationError(
                f"RedisStreamSource keys must be non-empty strs (got {key!r} of type "
                f"{type(key).__name__} in {list(result)!r})"
            )
    twice = sorted({key for key in result if result.count(key) > 1})
    if twice:
        raise SinkConfigurationError(f"RedisStreamSource keys lists {twice} more than once")
    return result


@final
class RedisStreamSource:
    """Reads Redis Streams: one split per key, rows of the declared fields plus key and id.

    Configured, not subclassed. Each entry becomes one row: ``key_column`` (the
    stream's key), ``id_column`` (the entry id, ``"<ms>-<seq>"``), then each field
    of ``fields`` parsed from the entry's string value to its declared type
    (`reference_sinks.redis.StreamEntryError` names the key, id and field of a value
    that does not parse, or of a missing not-null field). Entries of one key come
    in id order.

    Args:
        url: ``redis://host:port/db``, ``rediss://`` (TLS) or ``unix://path``.
        fields: The stream fields to read, as a ``pyarrow.Schema`` (or a list of
            fields); other fields of an entry are ignored, a missing one is null.
        keys: Stream keys to read.
        pattern: A glob (``SCAN MATCH``) for stream keys to read as well; only keys
            holding streams match.
        bounded: ``True``: read each key up to its last entry when the read starts
            (fixed then, and kept in the checkpoint), then end. ``False``: read for
            ever; a listed key that does not exist yet is waited for, a pattern is
            scanned again every ``discovery_interval_ms``.
        trim: After a checkpoint (a micro-batch) is committed, ``XTRIM key MINID``
            the entries it read: Redis keeps only what is still to be read. Never
            before the commit. Only on engines that cut splits (Spark).
        key_column: The name of the key column.
        id_column: The name of the entry id column.
        batch_entries: Entries per ``XRANGE`` (and per Arrow batch), per split.
        discovery_interval_ms: How often an unbounded source scans ``pattern``.
        poll_interval_ms: How long an unbounded reader waits when no split has news.
        client_options: Keyword arguments of ``redis.Redis.from_url``
            (``socket_timeout``, ``ssl_ca_certs``...).

    Raises:
        SinkConfigurationError: An argument is invalid (checked here).

    A key that holds another type than a stream fails the read with
    `reference_sinks.redis.NotAStreamError` naming the key.
    """

    def __init__(
        self,
        url: str,
        fields: pa.Schema | Sequence[pa.Field],
        *,
        keys: Sequence[str] = (),
        pattern: str | None = None,
        bounded: bool = False,
        trim: bool = False,
        key_column: str = "stream",
        id_column: str = "id",
        batch_entries: int = 1000,
        discovery_interval_ms: int = 1000,
        poll_interval_ms: int = 100,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in _SCHEMES:
            raise SinkConfigurationError(
                f"RedisStreamSource url must be a redis://, rediss:// or unix:// URL (got "
                f"{url!r} of type {type(url).__name__}); e.g. 'redis://127.0.0.1:6379/0'"
            )
        _check_url(url)
        self.url = url
        self.keys = _keys(keys)
        if pattern is not None and (not isinstance(pattern, str) or not pattern):
            raise SinkConfigurationError(
                f"RedisStreamSource pattern must be a non-empty glob str or None (got "
                f"{pattern!r}); e.g. pattern='orders:*'"
            )
        if not self.keys and pattern is None:
            raise SinkConfigurationError(
                "RedisStreamSource needs stream keys to read: pass keys=['...'] or "
                "pattern='prefix:*' (or both)"
            )
        self.pattern = pattern
        for name, flag in (("bounded", bounded), ("trim", trim)):
            if not isinstance(flag, bool):
                raise SinkConfigurationError(
                    f"RedisStreamSource {name} must be True or False (got {flag!r})"
                )
        self.bounded = bounded
        self.trim = trim
        self._schema = produced_schema(fields, key_column, id_column)
        self.batch_entries = _positive("batch_entries", batch_entries)
        self.discovery_interval_ms = _positive("discovery_interval_ms", discovery_interval_ms)
        self.poll_interval_s = _positive("poll_interval_ms", poll_interval_ms) / 1000
        if client_options is None:
            client_options = {}
        if not isinstance(client_options, Mapping) or "connection_pool" in client_options:
            raise SinkConfigurationError(
                f"RedisStreamSource client_options must be a mapping of keyword -> value for "
                f"redis.Redis.from_url, without connection_pool (got {client_options!r})"
            )
        self.client_options = dict(client_options)
        self._client: Any = None  # the driver's, for end_positions and cut_split
        # per key, what the last end_positions learnt: (position, end, counts), for cut_split
        self._counts: dict[str, tuple[str, str, _Counts]] = {}
        self._enumerator: RedisStreamEnumerator | None = None

    # --- pickling: the driver's client and enumerator stay on the driver -------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in _DRIVER_ONLY:
            state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._counts = {}

    def attach(self, enumerator: RedisStreamEnumerator) -> None:
        """The enumerator that hears of cuts (`RedisStreamEnumerator.note_read`)."""
        self._enumerator = enumerator

    def detach(self, enumerator: RedisStreamEnumerator) -> None:
        """Stop telling ``enumerator`` of cuts; close the driver's client (made again if asked)."""
        if self._enumerator is enumerator:
            self._enumerator = None
            if self._client is not None:
                client, self._client = self._client, None
                client.close()

    def _driver_client(self) -> Any:
        if self._client is None:
            self._client = connect(self.url, self.client_options)
        return self._client

    # --- Source ------------------------------------------------------------------------------

    def get_boundedness(self) -> Boundedness:
        """BOUNDED with ``bounded=True``, else CONTINUOUS_UNBOUNDED."""
        return Boundedness.BOUNDED if self.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(
        self, enum_context: SplitEnumeratorContext[RedisStreamSplit]
    ) -> RedisStreamEnumerator:
        """A new enumerator: a bounded one fixes each key's last id when it starts."""
        return RedisStreamEnumerator(enum_context, self)

    def restore_enumerator(
        self,
        enum_context: SplitEnumeratorContext[RedisStreamSplit],
        checkpoint: RedisStreamEnumeratorState,
    ) -> RedisStreamEnumerator:
        """An enumerator from its checkpoint (pending splits, assigned keys, stops, reads)."""
        return RedisStreamEnumerator(enum_context, self, checkpoint)

    def create_reader(self, reader_context: SourceReaderContext) -> RedisStreamReader:
        """A reader of stream splits."""
        return RedisStreamReader(reader_context, self)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[RedisStreamSplit]:
        """Splits as msgpack maps."""
        return split_serializer()

    def get_enumerator_checkpoint_serializer(
        self,
    ) -> AttrsMsgpackSerializer[RedisStreamEnumeratorState]:
        """The enumerator's checkpoint as msgpack."""
        return enumerator_state_serializer()

    def get_produced_type(self) -> pa.Schema:
        """``key_column`` and ``id_column`` (strings, not null), then the declared fields."""
        return self._schema

    # --- SupportsEndPositions ----------------------------------------------------------------

    def end_positions(self, splits: Sequence[RedisStreamSplit]) -> list[str]:
        """Each split's end now: its stop, or its key's last id (one round trip for all).

        A key without entries past the split's position (missing, empty) ends at the
        position: nothing to read yet.

        Raises:
            NotAStreamError: A key holds another type than a stream.
            CommitStateError: Entries after a split's position were deleted before this
                query read them (someone else's ``XTRIM``/``MAXLEN``/``XDEL`` at the
                stream's head): never skipped silently.
        """
        open_keys = [split.key for split in splits if split.stop is None]
        heads = iter(stream_heads(self._driver_client(), open_keys))
        ends: list[str] = []
        for split in splits:
            if split.stop is not None:
                ends.append(split.stop)
                continue
            head = next(heads)
            known, verified = check_not_trimmed(split, head)
            last = None if head is None else head.last
            ahead = last is not None and id_key(last) > id_key(split.after)
            end = last if ahead and last is not None else split.after
            ends.append(end)
            if head is not None and end == head.last:
                self._counts[split.key] = (split.after, end, _Counts(known, head.added, verified))
        return ends

    def cut_split(
        self, split: RedisStreamSplit, end: object, max_records: int | None
    ) -> SplitCut[RedisStreamSplit]:
        """``(after, end]`` as the read (at most ``max_records`` entries), the rest after it.

        Without ``max_records`` nothing is asked of Redis and the count is not told
        (``None``: counting a range costs reading it). With it, the range's first
        ``max_records`` ids are read on the driver (``XRANGE ... COUNT``) to find
        where the cut ends, and the count is told.

        Raises:
            ValueError: ``end`` is not a stream id between the split's position and stop.
        """
        if not isinstance(split, RedisStreamSplit):
            raise ValueError(f"cut_split() takes a RedisStreamSplit (got {split!r})")
        end_id = check_id(end, f"the end position of split {split.key!r}")
        low, high = id_key(split.after), id_key(end_id)
        if high < low or (split.stop is not None and high > id_key(split.stop)):
            raise ValueError(
                f"the end position {end_id} of split {split.key!r} is outside the split "
                f"(after {split.after}, stop {split.stop}); pass a value end_positions() returned"
            )
        if max_records is not None and (
            not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 0
        ):
            raise ValueError(f"max_records must be None or an int >= 0 (got {max_records!r})")
        if high == low or max_records == 0:
            return SplitCut(None, None if split.finished() else split, 0)
        records: int | None = None
        stop = end_id
        if max_records is not None:
            ranges = [(split.key, split.after, end_id, max_records)]
            entries = read_ranges(self._driver_client(), ranges)[0]
            records = len(entries)
            if records == max_records:
                stop = entries[-1][0].decode("ascii")
        noted = self._counts.get(split.key)  # kept: the same cut again gives the same rest
        counts = noted[2] if noted is not None and noted[:2] == (split.after, end_id) else None
        added = None
        if counts is not None and stop == end_id:
            added = counts.at_end  # every entry ever given up to the stream's last id
        elif counts is not None and counts.verified and counts.known is not None and records:
            added = counts.known + records  # nothing was deleted in the range: all read
        read = attrs.evolve(split, stop=stop)
        rest = attrs.evolve(split, after=stop, added=added)
        if self.trim and self._enumerator is not None:
            self._enumerator.note_read(split.key, stop)
        return SplitCut(read, None if rest.finished() else rest, records)

    def __repr__(self) -> str:
        where = [f"keys={list(self.keys)!r}"] if self.keys else []
        if self.pattern is not None:
            where.append(f"pattern={self.pattern!r}")
        return (
            f"RedisStreamSource({masked_url(self.url)!r}, {', '.join(where)}, "
            f"bounded={self.bounded}, trim={self.trim})"
        )


@final
@attrs.frozen
class _Counts:
    """What `RedisStreamSource.end_positions` learnt of a split, for `cut_split`.

    ``known``: the split's entries-added count at its position (see
    `RedisStreamSplit.added`); ``at_end``: the stream's count at the end position
    (its last id); ``verified``: no entry after the position was deleted, so a
    range read from it holds every entry given in it.
    """

    known: int | None
    at_end: int | None
    verified: bool
