"""A source's serializers against golden samples: bytes older versions wrote still read.

Splits and enumerator checkpoints sit in checkpoints and savepoints for as long as a
job may be restored, so a serializer must read every version it ever wrote (Flink's
serializer upgrade tests). A run only round-trips the current version; golden samples
- bytes an older version wrote, with the object they stand for - check the others.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.errors import SerializationError
from sinkv2.testing._source_engine import value_difference

__all__ = ["GOLDEN_SOURCE_SERIALIZERS", "check_source_golden_samples"]

GOLDEN_SOURCE_SERIALIZERS: Final = {
    "split": "get_split_serializer",
    "enumerator_checkpoint": "get_enumerator_checkpoint_serializer",
}
"""The names ``golden_samples`` may use, with the source's getter of each serializer."""

_HEADER: Final = struct.Struct(">ii")


def check_source_golden_samples(
    source: Any, golden_samples: Mapping[str, Mapping[int, tuple[bytes, object]]]
) -> None:
    """Raise unless every golden sample reads, through the source's serializer, as its object.

    Args:
        source: The source whose serializers read the samples.
        golden_samples: ``"split"`` or ``"enumerator_checkpoint"`` -> {version: (the
            payload bytes ``serialize`` wrote in that version, the object they must
            read as)}.

    Raises:
        ValueError: An unknown name, or a sample that is not ``(bytes, object)``.
        AssertionError: A sample does not read any more, or reads as something else.
    """
    for name, samples in golden_samples.items():
        getter = GOLDEN_SOURCE_SERIALIZERS.get(name)
        if getter is None:
            raise ValueError(
                f"golden_samples has an unknown serializer name {name!r}; use one of "
                f"{sorted(GOLDEN_SOURCE_SERIALIZERS)}"
            )
        serializer = getattr(source, getter)()
        for version, sample in sorted(samples.items()):
            if not (
                isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[0], bytes)
            ):
                raise ValueError(
                    f"golden_samples[{name!r}][{version!r}] must be (payload bytes, object) "
                    f"(got {describe(sample)})"
                )
            payload, expected = sample
            framed = _HEADER.pack(version, len(payload)) + payload
            what = f"check_source: the {name.replace('_', ' ')} serializer ({getter}())"
            try:
                back = SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
            except SerializationError as error:
                raise AssertionError(
                    f"{what}, at version {serializer.get_version()}, cannot read its version "
                    f"{version} golden sample any more: {type(error).__name__}: {error}. A "
                    "restore reads bytes of every version ever shipped: keep a reader for each "
                    "(deserialize(version, ...) must branch on version)"
                ) from error
            difference = value_difference(expected, back)
            if difference is not None:
                said = f"it wrote {short_repr(expected)} and read back {short_repr(back)}"
                where = difference.removeprefix(said)  # " (.field: a != b)", if it says
                raise AssertionError(
                    f"{what} reads its version {version} golden sample as {short_repr(back)}, "
                    f"not as {short_repr(expected)}{where}; deserialize(version, ...) must "
                    "read each version's own format"
                )
