"""Serializer and pickling properties of a sink, checked before its lifecycle.

- every committable, write result and writer state the sink's own writers produce
  on generated elements reads back equal through the sink's serializer (the
  runtime checks each one as it ships it) and through cloudpickle;
- every golden sample (bytes an older version wrote) still reads as its object;
- the sink itself survives cloudpickle, as Spark ships it to executors.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

import cloudpickle
from hypothesis import given, settings
from hypothesis import strategies as st

from sinkv2._capabilities import inspect_sink
from sinkv2._delivery import DeliveryGuarantee
from sinkv2._pickling import find_unpicklable
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2._text import short_repr
from sinkv2.errors import SerializationError
from sinkv2.testing._faults import CommitFault
from sinkv2.testing._runtime import Captured, LocalRuntime, Phase, same, supported_sink
from sinkv2.testing._sut import SinkUnderTest

__all__ = ["GOLDEN_SERIALIZERS", "check_golden_samples", "check_pickles", "check_serializers"]

GOLDEN_SERIALIZERS: Final = {
    "committable": ("committer", "get_committable_serializer"),
    "write_result": ("pre_commit_topology", "get_write_result_serializer"),
    "writer_state": ("writer_state", "get_writer_state_serializer"),
}
"""The serializer names ``golden_samples`` may use, with the capability and getter."""

_HEADER: Final = struct.Struct(">ii")


def check_pickles(what: str, value: object, *, compare: bool) -> None:
    """Raise AssertionError unless ``value`` survives a cloudpickle round trip (equal if asked)."""
    try:
        back = cloudpickle.loads(cloudpickle.dumps(value))
    except Exception as error:
        found = find_unpicklable(value, cloudpickle.dumps, name="it")
        culprit = (
            f"; {found[0]} (of type {type(found[1]).__name__}) is what does not pickle"
            if found is not None and found[0] != "it"
            else ""
        )
        raise AssertionError(
            f"{what} ({type(value).__qualname__}) does not survive a cloudpickle round "
            f"trip{culprit}, and Spark ships it between processes with cloudpickle: "
            f"{type(error).__name__}: {error}. Keep it plain data: open connections, "
            "clients, locks and files in writers and committers, not in sinks, committables "
            "or states"
        ) from error
    if compare and not same(back, value):
        raise AssertionError(
            f"{what} changes in a cloudpickle round trip: {short_repr(value)} came back as "
            f"{short_repr(back)}"
        )


def check_golden_samples(
    sink: Any, golden_samples: Mapping[str, Mapping[int, tuple[bytes, object]]]
) -> None:
    """Raise AssertionError unless every golden sample reads as its expected object.

    Args:
        sink: The sink whose serializers read the samples.
        golden_samples: Serializer name (``"committable"``, ``"write_result"``,
            ``"writer_state"``) -> {version: (payload bytes ``serialize`` wrote in
            that version, the object they must read as)}.

    Raises:
        ValueError: A serializer name is unknown, or the sink has no such serializer.
        AssertionError: A sample no longer reads, or reads as something else.
    """
    capabilities = inspect_sink(sink)
    for name, samples in golden_samples.items():
        if name not in GOLDEN_SERIALIZERS:
            raise ValueError(
                f"golden_samples has an unknown serializer name {name!r}; use one of "
                f"{sorted(GOLDEN_SERIALIZERS)}"
            )
        flag, getter = GOLDEN_SERIALIZERS[name]
        if not getattr(capabilities, flag):
            raise ValueError(
                f"golden_samples has {name!r} samples, but {capabilities.sink_type} has no "
                f"{getter}(); drop them or implement the mixin"
            )
        serializer: SimpleVersionedSerializer[Any] = getattr(sink, getter)()
        for version, (payload, expected) in sorted(samples.items()):
            framed = _HEADER.pack(version, len(payload)) + bytes(payload)
            try:
                back = SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
            except SerializationError as error:
                raise AssertionError(
                    f"the {name.replace('_', ' ')} serializer {serializer!r} (version "
                    f"{serializer.get_version()}) cannot read its version {version} golden "
                    f"sample any more: {type(error).__name__}: {error}. Bytes of every version "
                    "ever shipped sit in checkpoints and commit state stores: keep a reader "
                    "for each (with AttrsMsgpackSerializer, pass upgrades=...)"
                ) from error
            if not same(back, expected):
                raise AssertionError(
                    f"the {name.replace('_', ' ')} serializer {serializer!r} reads its version "
                    f"{version} golden sample as {short_repr(back)}, "
                    f"expected {short_repr(expected)}"
                )


def check_serializers(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_examples: int,
    max_parallelism: int,
    golden_samples: Mapping[str, Mapping[int, tuple[bytes, object]]] | None,
    settings_for: Callable[[int], settings],
) -> None:
    """The serializer and pickling properties (see the module docstring).

    Raises:
        AssertionError: A property does not hold; the message says which and why.
    """
    sut = supported_sink(make)
    try:
        check_pickles("the sink", sut.sink, compare=False)
        if golden_samples:
            check_golden_samples(sut.sink, golden_samples)
    finally:
        sut.close()

    @settings_for(max_examples)
    @given(
        batches=st.lists(st.lists(elements, min_size=1, max_size=4), min_size=1, max_size=4),
        parallelism=st.integers(1, max_parallelism),
    )
    def produced_objects_round_trip(batches: list[list[object]], parallelism: int) -> None:
        sut = supported_sink(make)
        capture = Captured()
        runtime = LocalRuntime(sut, guarantee, capture=capture)
        try:
            runtime.start(parallelism)
            half = len(batches) // 2
            for i, batch in enumerate(batches[:half]):
                runtime.write(i, batch)
            runtime.checkpoint(CommitFault.NONE)
            for i, batch in enumerate(batches[half:]):
                runtime.write(i, batch)
            runtime.end_of_input(CommitFault.NONE)
            assert runtime.phase is Phase.FINISHED
            for kind, value in capture.objects:
                check_pickles(f"a {kind.replace('_', ' ')}", value, compare=True)
        finally:
            runtime.close()
            sut.close()

    produced_objects_round_trip()
