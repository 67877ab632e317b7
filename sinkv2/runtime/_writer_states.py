"""Writer states of one checkpoint: how they are stored, checked and handed out again.

A streaming engine snapshots every writer at the end of each checkpoint (micro-batch)
and the coordinator records the states in the same transaction as the checkpoint's
committables. The next checkpoint's writers are restored from them: by Flink's rule
(`WriterStates.redistribute`) where the engine knows the new number of writers, else
by subtask id (`WriterStates.restore_by_subtask_id`, `WriterStates.with_carried`).
Both rules live in `sinkv2.runtime._rescale`.

Every state travels framed by the sink's serializer (Flink's version + length
framing), so a newer or corrupt state is caught, with its subtask, before any
writer starts.
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs
import msgpack

from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2.errors import CorruptDataError, SerializationError
from sinkv2.runtime._rescale import carry_target, restore_by_flink_rule, restore_by_subtask_id
from sinkv2.runtime._unreadable import restated

__all__ = ["SubtaskStates", "WriterStates"]

_FORMAT: Final = 1
"""The layout of `WriterStates.encode`'s bytes; bumped if it ever changes."""


@final
@attrs.frozen(kw_only=True)
class SubtaskStates:
    """What one writer subtask snapshotted at a checkpoint.

    Attributes:
        subtask_id: The writer's subtask.
        attempt_token: The task attempt that produced the states; staged output it
            names must survive until the next checkpoint restores them.
        states: Each state framed by the sink's writer-state serializer.
    """

    subtask_id: int
    attempt_token: str
    states: tuple[bytes, ...] = ()


@final
@attrs.frozen(kw_only=True)
class WriterStates:
    """Every writer's states at one checkpoint, as recorded with the epoch.

    Attributes:
        state_name: Whose states they are: the sink class that wrote them (Flink's
            state name); a sink restores them if it is that class or names it in
            ``get_compatible_writer_state_names()``.
        number_of_subtasks: Writers at the checkpoint.
        subtasks: One entry per writer, by subtask id.
    """

    state_name: str
    number_of_subtasks: int
    subtasks: tuple[SubtaskStates, ...] = ()

    @property
    def count(self) -> int:
        """How many states there are, over all subtasks."""
        return sum(len(s.states) for s in self.subtasks)

    def referenced_attempts(self) -> frozenset[str]:
        """Attempts whose states are not empty: their staged output may still be needed."""
        return frozenset(s.attempt_token for s in self.subtasks if s.states)

    def by_subtask(self) -> list[list[bytes]]:
        """The framed states indexed by the subtask they are recorded under, in record order."""
        size = max([self.number_of_subtasks, *(s.subtask_id + 1 for s in self.subtasks)])
        runs: list[list[bytes]] = [[] for _ in range(size)]
        for subtask in self.subtasks:
            runs[subtask.subtask_id].extend(subtask.states)
        return runs

    def redistribute(self, parallelism: int) -> list[list[bytes]]:
        """The framed states each of ``parallelism`` new writers restores, by Flink's rule.

        Same number of writers: each its own; else contiguous runs in subtask order
        (`sinkv2.runtime.redistribute`).

        Raises:
            ValueError: ``parallelism`` is not positive.
        """
        return restore_by_flink_rule(self.by_subtask(), parallelism)

    def restore_by_subtask_id(self, subtask_id: int) -> tuple[bytes, ...]:
        """The framed states writer ``subtask_id`` restores when the new number is unknown.

        The rule by subtask id: what is recorded under ``subtask_id`` (carried states
        included), nothing for a subtask the record lacks.
        """
        return tuple(restore_by_subtask_id(self.by_subtask(), subtask_id))

    def with_carried(self, restored: WriterStates) -> WriterStates:
        """These states plus those of ``restored``'s subtasks no writer restored.

        The second half of the rule by subtask id: ``self`` is what this checkpoint's
        ``number_of_subtasks`` writers snapshotted after restoring from ``restored``
        by subtask id; a subtask ``j`` of ``restored`` at or beyond that number is
        recorded again under ``j mod number_of_subtasks``, with its attempt token
        (its staged output stays referenced).
        """
        carried = []
        for subtask in restored.subtasks:
            target = carry_target(subtask.subtask_id, self.number_of_subtasks)
            if target is not None and subtask.states:
                carried.append(attrs.evolve(subtask, subtask_id=target))
        if not carried:
            return self
        return attrs.evolve(self, subtasks=self.subtasks + tuple(carried))

    def encode(self) -> bytes:
        """The bytes the store keeps (msgpack, versioned by a leading format number)."""
        packed: bytes = msgpack.packb(
            [
                _FORMAT,
                self.state_name,
                self.number_of_subtasks,
                [[s.subtask_id, s.attempt_token, list(s.states)] for s in self.subtasks],
            ]
        )
        return packed

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> WriterStates | None:
        """The states in ``data`` (`encode`'s bytes); ``None`` for empty bytes (no states).

        Args:
            data: What the store returned.
            what: Names the epoch in errors, e.g. "sink 'orders' epoch 7".

        Raises:
            CorruptDataError: ``data`` is not what `encode` writes.
        """
        if not data:
            return None
        try:
            version, name, number, subtasks = msgpack.unpackb(data)
            if version != _FORMAT:
                raise ValueError(
                    f"format {version!r}; this release reads format {_FORMAT} (a newer "
                    "sinkv2 wrote it: upgrade sinkv2 to read it)"
                )
            return cls(
                state_name=str(name),
                number_of_subtasks=int(number),
                subtasks=tuple(
                    SubtaskStates(
                        subtask_id=int(subtask), attempt_token=str(token), states=_framed(states)
                    )
                    for subtask, token, states in subtasks
                ),
            )
        except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as error:
            raise CorruptDataError(
                f"the writer states recorded for {what} do not read: {error}. The commit "
                "state store was changed by something other than sinkv2, or by a newer "
                "release; nothing was committed",
                serializer="sinkv2 writer states",
            ) from error

    def check_readable(self, serializer: SimpleVersionedSerializer[Any], *, what: str) -> None:
        """Deserialize every state once, so a bad one fails here, naming its subtask.

        Raises:
            SerializationError: A state does not read (corrupt, or of a version the
                serializer does not know); the message names ``what`` and the subtask.
        """
        for subtask in self.subtasks:
            for index, framed in enumerate(subtask.states):
                try:
                    SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
                except SerializationError as error:
                    raise restated(
                        error,
                        f"writer state {index} of subtask {subtask.subtask_id} recorded for "
                        f"{what} cannot be restored: {error}. Nothing was written or "
                        "committed; deploy a sink whose writer-state serializer reads it, or "
                        "start over under a new sink id",
                    ) from error


def _framed(states: object) -> tuple[bytes, ...]:
    """``states`` as decoded from `WriterStates.encode`'s bytes: a list of framed states."""
    if not isinstance(states, list) or not all(isinstance(s, bytes) for s in states):
        raise TypeError(f"a subtask's states must be a list of bytes (got {states!r:.80})")
    return tuple(states)
