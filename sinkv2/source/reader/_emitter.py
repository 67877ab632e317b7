"""Turns a split reader's records into output records (Flink's ``RecordEmitter``)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from sinkv2.source._output import SourceOutput

__all__ = ["RecordEmitter"]

E_contra = TypeVar("E_contra", contravariant=True)
T_co = TypeVar("T_co", covariant=True)
SplitStateT_contra = TypeVar("SplitStateT_contra", contravariant=True)


class RecordEmitter(Protocol[E_contra, T_co, SplitStateT_contra]):
    """Emits one fetched element and advances its split's position.

    Required: `emit_record`. Called in the reader's thread only.
    """

    def emit_record(
        self,
        element: E_contra,
        output: SourceOutput[T_co],
        split_state: SplitStateT_contra,
    ) -> None:
        """Emit ``element`` and move ``split_state`` to the position just after it.

        Emit records with ``output.collect``, or a whole Arrow batch with
        ``output.collect_batch``. The position must move in the same call as the
        emit: a checkpoint taken between two calls snapshots exactly what was emitted.
        """
        ...
