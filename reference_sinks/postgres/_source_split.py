"""What `PostgresSource` checkpoints: chunk splits with positions, and the enumerator's state.

A split is one key range of the snapshot (``_chunks.KeyRange``); its position is the
number of rows already emitted from it, in the chunk's order (the split key, then
enough columns to order ties), so a restored reader skips exactly those rows
(``OFFSET``) and reads the rest: the same rows again, as long as the table did not
change. The enumerator's state is the splits not assigned yet, with their positions.
Both are msgpack maps, version 1.
"""

# No `from __future__ import annotations`: cattrs resolves the field types at runtime.

from typing import final

import attrs

from reference_sinks.postgres._chunks import KeyRange
from sinkv2 import AttrsMsgpackSerializer

__all__ = [
    "PostgresEnumeratorState",
    "PostgresSourceSplit",
    "enumerator_state_serializer",
    "split_serializer",
]


@final
@attrs.frozen
class PostgresSourceSplit:
    """One key range of the snapshot, and how many of its rows were emitted.

    Attributes:
        id: The split's id, ``chunk-<n>`` (``n`` counts the chunks in key order).
        lower: The range's lower bound (inclusive), as PostgreSQL's text of the key's
            value; ``None``: open.
        upper: The range's upper bound (exclusive); ``None``: open.
        nulls: Whether the rows whose key is NULL belong to this split.
        records_read: The split's position: rows already emitted from it.
    """

    id: str
    lower: str | None = None
    upper: str | None = None
    nulls: bool = True
    records_read: int = 0

    def split_id(self) -> str:
        """See `sinkv2.source.SourceSplit`."""
        return self.id

    def key_range(self) -> KeyRange:
        """The rows of this split, as ``_chunks`` reads them."""
        return KeyRange(self.lower, self.upper, nulls=self.nulls)

    def at(self, records_read: int) -> "PostgresSourceSplit":
        """This split with ``records_read`` rows already emitted."""
        return attrs.evolve(self, records_read=records_read)

    @classmethod
    def of(cls, index: int, chunk: KeyRange) -> "PostgresSourceSplit":
        """Split ``index`` reading ``chunk`` from its start."""
        return cls(f"chunk-{index:05d}", chunk.lower, chunk.upper, chunk.nulls)


@final
@attrs.frozen
class PostgresEnumeratorState:
    """The enumerator's checkpoint: the splits not assigned yet, with their positions.

    Attributes:
        remaining: The splits not assigned yet.
        reads: What the splits cut (``table schema.name, split on 'id'``; ``None`` in a
            checkpoint written before it was recorded): a source restored from it must
            read the same, else its ranges and positions mean nothing.
    """

    remaining: tuple[PostgresSourceSplit, ...] = ()
    reads: str | None = None


def split_serializer() -> AttrsMsgpackSerializer[PostgresSourceSplit]:
    """Splits as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(PostgresSourceSplit)


def enumerator_state_serializer() -> AttrsMsgpackSerializer[PostgresEnumeratorState]:
    """Enumerator checkpoints as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(PostgresEnumeratorState)
