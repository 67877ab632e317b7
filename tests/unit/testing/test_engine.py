"""The kit's engine base: what it does for every sink kit run."""

from __future__ import annotations

import gc
import types
from typing import ClassVar

from sinkv2.testing._engine import KitEngine


class _CyclicWriter:
    """A writer its own connection's callbacks refer back to (a reference cycle)."""

    released: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name
        self.callbacks = [self]

    def __del__(self) -> None:
        _CyclicWriter.released.append(self.name)


def test_writers_dropped_in_a_reference_cycle_are_released_with_the_example():
    """A crashed process's connections end with it; a writer in a cycle outlived the
    example until the collector ran, holding (for a database writer mid-COPY) its
    table's lock while the test dropped the table: the run waited for ever."""
    _CyclicWriter.released = []
    gc.disable()  # the collector runs only when the kit runs it
    try:
        engine = types.SimpleNamespace(abandoned=[_CyclicWriter("w0"), _CyclicWriter("w1")])
        KitEngine.release_abandoned(engine)  # type: ignore[arg-type]
        assert sorted(_CyclicWriter.released) == ["w0", "w1"]
    finally:
        gc.enable()
