"""The `RedisStreamSource` enumerator: one split per stream key, and the trimming of what was read.

- Bounded: the keys (listed, and those a pattern matches by ``SCAN`` once) and
  each key's last id are fixed when the first enumerator starts, and kept in its
  checkpoint; a key without entries (missing, or empty) has no split. Readers
  pull one split per request, as Flink's bounded sources do, and are told "no
  more splits" once none is left.
- Unbounded: every listed key is a split at once (a missing key waits for its
  first entry), a pattern is ``SCAN``-ned every ``discovery_interval_ms``, and
  each new key is assigned once, round-robin, pushed to the readers (Flink's Kafka
  enumerator pattern: splits never end, so readers would never ask again).

Trimming (``trim=True``). An engine that cuts splits (`SupportsEndPositions`)
does so on the driver, next to this enumerator, and `RedisStreamSource.cut_split`
tells it each read's stop (`note_read`). The highest stop per key as of
checkpoint ``c`` is part of checkpoint ``c``'s state; only when ``c`` is complete
(the engine committed everything read up to it) does `notify_checkpoint_complete`
send ``XTRIM key MINID <stop + 1>``: the entries up to the stop are gone, never
one that was not committed. An engine that never cuts (Flink's model: readers
read open splits on their own) tells nothing, and nothing is trimmed.

A restored enumerator trims what its checkpoint read as soon as it starts: an
engine restores only from a completed checkpoint (as Flink does), and the
notification of that checkpoint can be lost in the crash that made the restore
(the engine records the completion, then notifies; the trim itself can fail).
Without this, committed entries would stay in Redis until more data came.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, final

from reference_sinks.redis._source_client import connect, last_ids, scan_streams, trim
from reference_sinks.redis._source_split import (
    RedisStreamEnumeratorState,
    RedisStreamSplit,
    id_key,
)
from sinkv2.source import SourceEvent, SplitEnumeratorContext

__all__ = ["RedisStreamEnumerator"]


class _StreamSettings(Protocol):
    """What the enumerator reads of its `RedisStreamSource` (which attaches it for cuts)."""

    @property
    def url(self) -> str: ...

    @property
    def client_options(self) -> Mapping[str, Any]: ...

    @property
    def bounded(self) -> bool: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def pattern(self) -> str | None: ...

    @property
    def discovery_interval_ms(self) -> int: ...

    @property
    def trim(self) -> bool: ...

    def attach(self, enumerator: RedisStreamEnumerator) -> None: ...

    def detach(self, enumerator: RedisStreamEnumerator) -> None: ...


@final
class RedisStreamEnumerator:
    """Assigns one split per stream key; trims what completed checkpoints hold (see the module).

    Args:
        context: The enumerator's context.
        source: The source (its keys, pattern, client settings).
        state: A checkpoint to restore from, or ``None`` for a fresh start.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[RedisStreamSplit],
        source: _StreamSettings,
        state: RedisStreamEnumeratorState | None = None,
    ) -> None:
        state = state or RedisStreamEnumeratorState()
        self._context = context
        self._source = source
        self._pending = collections.deque(state.pending)
        self._assigned = set(state.assigned)
        self._stops_fixed = state.stops_fixed
        self._read_to: dict[str, str] = dict(state.read_to)
        self._snapshots: dict[int, dict[str, str]] = {}
        self._restored: int | None = None
        if state.checkpoint_id >= 0 and state.read_to:
            self._snapshots[state.checkpoint_id] = dict(state.read_to)
            self._restored = state.checkpoint_id
        self._trimmed: dict[str, str] = {}
        self._client: Any = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Connect; fix the bounded keys' stops, or start discovering keys (see the module).

        Raises:
            NotAStreamError: A listed key holds another type than a stream.
        """
        source = self._source
        self._client = connect(source.url, source.client_options)
        source.attach(self)
        if self._restored is not None:  # complete, but its notification may have been lost
            self.notify_checkpoint_complete(self._restored)
        if source.bounded:
            if not self._stops_fixed:
                self._fix_stops()
            return
        if source.keys:
            last_ids(self._client, source.keys)  # a listed key that is not a stream fails now
            self._add(source.keys)
        if source.pattern is not None:
            self._context.call_async(
                self._discover,
                self._discovered,
                initial_delay_ms=0,
                period_ms=source.discovery_interval_ms,
            )

    def _discover(self) -> list[str]:
        assert self._source.pattern is not None
        return scan_streams(self._client, self._source.pattern)

    def _fix_stops(self) -> None:
        source = self._source
        keys = list(source.keys)
        if source.pattern is not None:
            keys += [key for key in self._discover() if key not in keys]
        for key, last in zip(keys, last_ids(self._client, keys), strict=True):
            if last is not None:
                self._pending.append(RedisStreamSplit(key, stop=last))
        self._stops_fixed = True

    def _discovered(self, keys: list[str] | None, error: BaseException | None) -> None:
        if error is not None:
            raise RuntimeError(
                f"discovering the streams that match {self._source.pattern!r} failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        self._add(keys or ())

    def _add(self, keys: Iterable[str]) -> None:
        known = self._assigned | {split.key for split in self._pending}
        self._pending.extend(RedisStreamSplit(key) for key in keys if key not in known)
        self._assign()

    def _assign(self) -> None:
        """Push pending splits round-robin (unbounded only: bounded readers pull)."""
        if self._source.bounded:
            return
        readers = sorted(self._context.registered_readers())
        while readers and self._pending:
            split = self._pending.popleft()
            self._context.assign_split(split, readers[len(self._assigned) % len(readers)])
            self._assigned.add(split.key)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Bounded: one pending split, or "no more splits". Unbounded: assign what is pending."""
        if not self._source.bounded:
            self._assign()
            return
        if self._pending:
            split = self._pending.popleft()
            self._context.assign_split(split, subtask_id)
            self._assigned.add(split.key)
        else:
            self._context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: list[RedisStreamSplit], subtask_id: int) -> None:
        """Take back a failed reader's splits, at their positions, to assign them again."""
        for split in splits:
            self._assigned.discard(split.key)
        self._pending.extendleft(reversed(splits))
        self._assign()

    def add_reader(self, subtask_id: int) -> None:
        """A reader registered: an unbounded source pushes pending splits to it."""
        self._assign()

    def snapshot_state(self, checkpoint_id: int) -> RedisStreamEnumeratorState:
        """The pending splits, the assigned keys, and (trimming) how far each key was cut."""
        read_to = tuple(sorted(self._read_to.items()))
        if self._source.trim:
            self._snapshots[checkpoint_id] = dict(self._read_to)
        return RedisStreamEnumeratorState(
            tuple(self._pending),
            tuple(sorted(self._assigned)),
            self._stops_fixed,
            read_to,
            checkpoint_id,
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """With ``trim``: ``XTRIM MINID`` each key past what checkpoint ``checkpoint_id`` read.

        A later checkpoint's completion covers the earlier ones (as in Flink); a key is
        trimmed again only when its read stop moved on.
        """
        done = [cp for cp in self._snapshots if cp <= checkpoint_id]
        if not done:
            return
        read_to = self._snapshots[max(done)]
        for cp in done:
            del self._snapshots[cp]
        if not self._source.trim:
            return
        todo = {key: last for key, last in read_to.items() if self._trimmed.get(key) != last}
        if todo:
            trim(self._client, todo)
            self._trimmed.update(todo)

    def note_read(self, key: str, stop: str) -> None:
        """An engine cut ``key`` to be read up to ``stop`` (`RedisStreamSource.cut_split` tells)."""
        known = self._read_to.get(key)
        if known is None or id_key(stop) > id_key(known):
            self._read_to[key] = stop

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        """No events are expected."""

    def close(self) -> None:
        """Close the client; stop hearing of cuts."""
        self._source.detach(self)
        if self._client is not None:
            client, self._client = self._client, None
            client.close()
