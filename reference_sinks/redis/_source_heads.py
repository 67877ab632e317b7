"""What ``XINFO STREAM`` tells of a split's position: entries deleted unread, a stream made anew.

`RedisStreamSource.end_positions` asks every open key's `StreamHead` once per
micro-batch and checks each split against it here, before cutting: a stream
trimmed past the position by someone else (`check_not_trimmed`) or deleted and
created again below it (`check_same_stream`) fails the micro-batch with a
`CommitStateError` that says what happened, never a silent skip.
"""

from __future__ import annotations

from reference_sinks.redis._source_client import StreamHead
from reference_sinks.redis._source_split import FIRST_ID, RedisStreamSplit, id_key
from sinkv2.errors import CommitStateError

__all__ = ["check_not_trimmed", "check_same_stream"]


def check_not_trimmed(split: RedisStreamSplit, head: StreamHead | None) -> tuple[int | None, bool]:
    """Refuse a split whose next entries were deleted before they were read.

    The split knows how many entries the stream had been given up to its position
    (``added``; for a key not read yet: the entries given so far less the ones it
    holds, so what was deleted before the source first saw the key was never its
    to read). When the stream's first entry lies past the position, every entry it
    holds is after the position, and each entry given since that it does not hold
    was deleted unread: the stream was trimmed past the position (``XTRIM``,
    ``MAXLEN``, or ``XDEL`` at its head). This query's own trims (``trim=True``)
    delete only what committed micro-batches read, at or below every position it
    goes on from. Needs Redis 7.0 (``entries-added``); older servers are not checked.

    Returns:
        The split's count at its position (``None``: not known), and whether no
        entry after the position was deleted (so a range read from it is whole).

    Raises:
        CommitStateError: Entries after the position were deleted unread, or the
            stream was deleted and created again (`check_same_stream`).
    """
    check_same_stream(split, head)
    if head is None or head.added is None:
        return None, False
    known = split.added
    if known is None and split.after == FIRST_ID:
        known = head.added - head.length
    if head.first is not None and id_key(head.first) <= id_key(split.after):
        # Nothing was trimmed past the position; XDEL after it breaks the count.
        deleted = head.max_deleted
        return known, deleted is not None and id_key(deleted) <= id_key(split.after)
    if known is None:
        return None, False
    lost = head.added - known - head.length
    if lost <= 0:
        return known, lost == 0
    raise CommitStateError(
        f"stream {split.key!r} lost {lost} entries this query had not read: it is read after "
        f"id {split.after}, and they were deleted (XTRIM, MAXLEN or XDEL by someone else); "
        f"its first entry is now {head.first or 'none'}. Refusing to skip them silently. Trim "
        "a stream only below what its readers have committed (RedisStreamSource(trim=True) "
        "trims so), or start over under a new source_id and reload the target"
    )


def check_same_stream(split: RedisStreamSplit, head: StreamHead | None) -> None:
    """Refuse a stream that was deleted and created again since the split's position.

    A stream's last id (``last-generated-id``) and its count of entries ever added
    (``entries-added``) never go down: Redis refuses an ``XADD`` id at or below the
    top, and ``XTRIM``/``XDEL`` keep both. When the stream's last id now lies below
    the position, or it was given fewer entries than the split counted up to the
    position, the key holds a new stream (or ``XSETID`` reset it): its entries at or
    below the position would be skipped silently, and its deletions miscounted.
    A new stream whose ids and count lie past the old ones cannot be told apart.

    Raises:
        CommitStateError: The stream went backwards.
    """
    if head is None or split.after == FIRST_ID:
        return
    if id_key(head.last) < id_key(split.after):
        why = f"its last id is now {head.last}, below that"
    elif split.added is not None and head.added is not None and head.added < split.added:
        why = (
            f"it was given {head.added} entries in all, fewer than the {split.added} "
            "this query counted up to that id"
        )
    else:
        return
    raise CommitStateError(
        f"stream {split.key!r} was deleted and created again (or XSETID reset it) while "
        f"this query read it: it is read after id {split.after}, and {why}. Its new "
        "entries at or below that id would be skipped silently, so the query stops. "
        "Write a new stream under a new key, or start over under a new source_id and "
        "reload the target"
    )
