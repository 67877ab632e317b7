"""The messages that carry committables from writers to the committer.

Flink calls the stream between writer and committer a stream of
`CommittableMessage`s: per checkpoint and writer subtask, one `CommittableSummary`
that says how many committables to expect, followed by that many
`CommittableWithLineage`. Pre- and post-commit topologies see this stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Generic, TypeAlias, TypeVar

import attrs

__all__ = [
    "END_OF_INPUT",
    "CommittableMessage",
    "CommittableSummary",
    "CommittableWithLineage",
]

CommT = TypeVar("CommT")
NewCommT = TypeVar("NewCommT")

END_OF_INPUT: Final[int] = 2**63 - 1
"""Checkpoint id of the final commit of a bounded input (Flink's ``CommittableMessage.EOI``).

Batch jobs commit once, under this id, after every writer has seen the end of its input.
"""


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name} must be a non-negative int "
            f"(got {value!r} of type {type(value).__name__})"
        )


@attrs.frozen
class CommittableSummary:
    """How many committables one writer subtask produced for one checkpoint.

    Each ``(checkpoint_id, subtask_id)`` pair has exactly one summary, and its
    `number_of_committables` equals the number of `CommittableWithLineage` messages
    carrying that pair. A pre-commit topology that merges or splits committables must
    keep that true (the helpers in ``sinkv2_spark`` do it for you).

    Attributes:
        subtask_id: The writer subtask (on Spark: the partition) that produced them.
        number_of_subtasks: The parallelism of the writer for this checkpoint; after
            a rescale it may differ from earlier checkpoints.
        checkpoint_id: The checkpoint, or `END_OF_INPUT` for the final commit.
        number_of_committables: Committables that follow this summary.
        number_of_pending_committables: Kept for Flink parity; Flink deprecated it
            and always reports 0 from its getter. Not used by sinkv2.
        number_of_failed_committables: Committables that failed with a known reason.
    """

    subtask_id: int = attrs.field(validator=_non_negative)
    number_of_subtasks: int = attrs.field(validator=_non_negative)
    checkpoint_id: int = attrs.field(validator=_non_negative)
    number_of_committables: int = attrs.field(validator=_non_negative)
    number_of_pending_committables: int = attrs.field(default=0, validator=_non_negative)
    number_of_failed_committables: int = attrs.field(default=0, validator=_non_negative)

    def get_subtask_id(self) -> int:
        """The writer subtask that produced the committables."""
        return self.subtask_id

    def get_number_of_subtasks(self) -> int:
        """The writer parallelism for this checkpoint."""
        return self.number_of_subtasks

    def get_checkpoint_id_or_eoi(self) -> int:
        """The checkpoint id, or `END_OF_INPUT`."""
        return self.checkpoint_id

    def get_number_of_committables(self) -> int:
        """How many `CommittableWithLineage` follow for this subtask and checkpoint."""
        return self.number_of_committables

    def get_number_of_pending_committables(self) -> int:
        """Always 0, as in Flink, where the field is deprecated."""
        return 0

    def get_number_of_failed_committables(self) -> int:
        """How many committables failed with a known reason."""
        return self.number_of_failed_committables


@attrs.frozen
class CommittableWithLineage(Generic[CommT]):
    """One committable, with the checkpoint and writer subtask it came from.

    Attributes:
        committable: The committable itself; never ``None``.
        checkpoint_id: The checkpoint, or `END_OF_INPUT`.
        subtask_id: The writer subtask that produced it.
    """

    committable: CommT = attrs.field()
    checkpoint_id: int = attrs.field(validator=_non_negative)
    subtask_id: int = attrs.field(validator=_non_negative)

    @committable.validator
    def _not_none(self, attribute: attrs.Attribute[CommT], value: CommT) -> None:
        if value is None:
            raise ValueError("CommittableWithLineage.committable must not be None")

    def get_committable(self) -> CommT:
        """The committable."""
        return self.committable

    def get_checkpoint_id_or_eoi(self) -> int:
        """The checkpoint id, or `END_OF_INPUT`."""
        return self.checkpoint_id

    def get_subtask_id(self) -> int:
        """The writer subtask that produced the committable."""
        return self.subtask_id

    def map(self, mapper: Callable[[CommT], NewCommT]) -> CommittableWithLineage[NewCommT]:
        """The same lineage around ``mapper(committable)``."""
        return CommittableWithLineage(mapper(self.committable), self.checkpoint_id, self.subtask_id)

    def with_subtask_id(self, subtask_id: int) -> CommittableWithLineage[CommT]:
        """The same committable, attributed to another subtask."""
        return attrs.evolve(self, subtask_id=subtask_id)


CommittableMessage: TypeAlias = "CommittableSummary | CommittableWithLineage[CommT]"
"""One element of the committable stream: a summary or a committable with lineage."""
