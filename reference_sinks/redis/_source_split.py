"""What `RedisStreamSource` checkpoints: stream splits with entry-id positions.

A split is one stream key read from an entry id on: ``after`` is the last id
already read (``XRANGE key (after ...`` starts just past it), ``stop`` the last id
to read, inclusive, or ``None`` for a split that never ends. Stream ids only grow
(Redis refuses an ``XADD`` id at or below the stream's top), so a range
``(after, stop]`` holds the same entries every time it is read, as long as
nobody deletes inside it: a replay is identical.

The enumerator's state holds the splits not assigned yet, the keys already
assigned (a glob's discovery never assigns a key twice), whether the bounded
stops are fixed, and - with trimming - how far each key was cut for reading as
of that checkpoint (what may be trimmed once the checkpoint is committed).
"""

# No `from __future__ import annotations`: the public classes are re-homed in
# reference_sinks.redis (publish), where cattrs could not resolve the names of the others.

import re
from typing import Final, final

import attrs

from sinkv2 import AttrsMsgpackSerializer

__all__ = [
    "FIRST_ID",
    "MAX_ID",
    "RedisStreamEnumeratorState",
    "RedisStreamSplit",
    "check_id",
    "enumerator_state_serializer",
    "id_after",
    "id_key",
    "split_serializer",
]

FIRST_ID: Final = "0-0"
"""The position before every entry: Redis never gives an entry the id ``0-0``."""

_ID: Final = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")
_MAX: Final = 2**64 - 1

MAX_ID: Final = f"{_MAX}-{_MAX}"
"""The largest stream id: no entry can follow it (Redis refuses an ``XADD`` after it)."""


def id_key(entry_id: str) -> tuple[int, int]:
    """``(milliseconds, sequence)`` of a complete stream id, for ordering."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def check_id(entry_id: object, what: str) -> str:
    """``entry_id`` if it is a complete stream id ``<ms>-<seq>``.

    Raises:
        ValueError: It is not; the message names ``what``.
    """
    if isinstance(entry_id, bytes):
        entry_id = entry_id.decode("ascii", "replace")
    if not isinstance(entry_id, str) or _ID.fullmatch(entry_id) is None:
        raise ValueError(
            f"{what} must be a complete Redis stream id '<milliseconds>-<sequence>' such as "
            f"'1700000000000-0' (got {entry_id!r} of type {type(entry_id).__name__})"
        )
    ms, seq = id_key(entry_id)
    if ms > _MAX or seq > _MAX:
        raise ValueError(f"{what} {entry_id!r} is out of range: each part must fit 64 bits")
    return entry_id


def id_after(entry_id: str) -> str:
    """The smallest stream id above ``entry_id`` (``XTRIM MINID`` of it keeps what follows).

    Raises:
        ValueError: ``entry_id`` is `MAX_ID`: no id follows it.
    """
    if entry_id == MAX_ID:
        raise ValueError(f"no stream id follows the largest one, {MAX_ID}")
    ms, seq = id_key(entry_id)
    if seq < _MAX:
        return f"{ms}-{seq + 1}"
    return f"{ms + 1}-0"


@final
@attrs.frozen
class RedisStreamSplit:
    """One stream key, read after an entry id, up to a stop id or for ever.

    Attributes:
        key: The stream's key; also the split's id.
        after: The position: the id of the last entry already read (``0-0`` before
            the first). Reading starts just past it (``XRANGE key (after ...``).
        stop: The id of the last entry to read, inclusive; ``None`` for a split that
            never ends (an unbounded source's split before it is cut).
        added: How many entries the stream had been given up to ``after`` (Redis'
            ``entries-added`` count), counting those deleted before the source first
            saw the key as given before it; ``None`` when not known. What tells a
            stream trimmed past ``after`` (``RedisStreamSource.end_positions``).
    """

    key: str
    after: str = FIRST_ID
    stop: str | None = None
    added: int | None = None

    def split_id(self) -> str:
        """See `sinkv2.source.SourceSplit`: the stream key."""
        return self.key

    def finished(self) -> bool:
        """Whether every entry up to ``stop`` was read (never for a split without one)."""
        return self.stop is not None and id_key(self.after) >= id_key(self.stop)


@final
@attrs.frozen
class RedisStreamEnumeratorState:
    """The enumerator's checkpoint.

    Attributes:
        pending: Splits not assigned yet, with their positions.
        assigned: The keys whose split was assigned once (never assigned again by a
            discovery; a failed reader's split comes back through ``add_splits_back``).
        stops_fixed: A bounded source's stops are fixed (the keys' last ids when the
            first enumerator started); a restored enumerator never fixes them again.
        read_to: With trimming, how far each key was cut for reading as of
            ``checkpoint_id``: ``(key, last id)`` pairs, trimmed once that checkpoint
            is committed.
        checkpoint_id: The checkpoint this state was taken at (``-1``: none yet).
    """

    pending: tuple[RedisStreamSplit, ...] = ()
    assigned: tuple[str, ...] = ()
    stops_fixed: bool = False
    read_to: tuple[tuple[str, str], ...] = ()
    checkpoint_id: int = -1


def split_serializer() -> AttrsMsgpackSerializer[RedisStreamSplit]:
    """Splits as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(RedisStreamSplit)


def enumerator_state_serializer() -> AttrsMsgpackSerializer[RedisStreamEnumeratorState]:
    """Enumerator checkpoints as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(RedisStreamEnumeratorState)
