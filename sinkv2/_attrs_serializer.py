"""A ready `SimpleVersionedSerializer` for attrs classes, on msgpack.

Committables and writer states are usually small attrs classes. This serializer
turns them into msgpack maps keyed by field name (through cattrs, so nested attrs
classes, enums, tuples, sets, optionals and datetimes work), and keeps every older
version readable through a chain of upgrade functions.

Migration recipe, when a committable's fields change:

1. bump ``version`` (say from 1 to 2);
2. add ``upgrades={1: upgrade_v1}``, where ``upgrade_v1`` takes the decoded data of a
   version-1 payload (a dict keyed by field name) and returns version 2's dict;
3. keep the function forever: bytes written by version 1 may sit in a commit state
   store or checkpoint for as long as the job's history is kept.

A version-1 payload read by a version-3 serializer goes through ``upgrades[1]`` and
``upgrades[2]`` in turn.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, final

import attrs
import cattrs
import msgpack
from cattrs.preconf.msgpack import make_converter

from sinkv2._text import describe
from sinkv2.errors import (
    CorruptDataError,
    SerializationError,
    SinkConfigurationError,
    UnsupportedVersionError,
)

__all__ = ["AttrsMsgpackSerializer", "default_converter"]

T = TypeVar("T")

Upgrade = Callable[[Any], Any]
"""Turns the decoded data of version ``v`` into the decoded data of version ``v + 1``."""


def default_converter() -> cattrs.Converter:
    """The converter behind AttrsMsgpackSerializer: cattrs' msgpack one, datetimes exact.

    cattrs' msgpack preset stores datetimes as float timestamps, which loses
    microseconds far from 1970; a committable must read back exactly, so datetimes,
    dates and times travel as ISO-8601 strings instead.
    """
    converter = make_converter()
    for kind in (dt.datetime, dt.date, dt.time):
        converter.register_unstructure_hook(kind, lambda value: value.isoformat())
        converter.register_structure_hook(kind, lambda text, cls: cls.fromisoformat(text))
    return converter


@final
class AttrsMsgpackSerializer(Generic[T]):
    """Serializes instances of one attrs class as msgpack, reading every older version.

    Args:
        cls: The attrs class to serialize.
        version: The version written now; a non-negative int.
        upgrades: For each older version ``v`` still readable, a function from
            version ``v``'s decoded data (a dict keyed by field name) to version
            ``v + 1``'s. The keys must form an unbroken run ending at ``version - 1``.
        converter: A cattrs converter with extra hooks for field types msgpack and
            cattrs do not handle by default. Defaults to `default_converter`.

    Raises:
        SinkConfigurationError: ``cls`` is not an attrs class, ``version`` is not a
            non-negative int, or ``upgrades`` leaves a gap.
    """

    def __init__(
        self,
        cls: type[T],
        *,
        version: int = 1,
        upgrades: Mapping[int, Upgrade] | None = None,
        converter: cattrs.Converter | None = None,
    ) -> None:
        if not (isinstance(cls, type) and attrs.has(cls)):
            raise SinkConfigurationError(
                f"AttrsMsgpackSerializer needs an attrs class (got {describe(cls)}); "
                "decorate the class with @attrs.define or @attrs.frozen"
            )
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 2**31:
            raise SinkConfigurationError(
                f"AttrsMsgpackSerializer version must be an int in [0, 2**31) "
                f"(got {describe(version)})"
            )
        upgrades = dict(upgrades or {})
        expected = set(range(min(upgrades, default=version), version))
        if set(upgrades) != expected:
            raise SinkConfigurationError(
                f"AttrsMsgpackSerializer({cls.__qualname__}, version={version}) upgrades must "
                f"have one function per older version, an unbroken run ending at "
                f"{version - 1} (got versions {sorted(upgrades)}); add the missing ones "
                f"{sorted(expected - set(upgrades))} or drop {sorted(set(upgrades) - expected)}"
            )
        for old, upgrade in upgrades.items():
            if not callable(upgrade):
                raise SinkConfigurationError(
                    f"upgrades[{old}] must be a function from version {old}'s data to "
                    f"version {old + 1}'s (got {describe(upgrade)})"
                )
        self._cls: type[T] = cls  # type: ignore[assignment]  # attrs.has() narrows cls to AttrsInstance
        self._version = version
        self._upgrades = upgrades
        self._custom_converter = converter
        self._converter = converter or default_converter()

    def get_version(self) -> int:
        """The version `serialize` writes."""
        return self._version

    def get_supported_versions(self) -> tuple[int, ...]:
        """Every version `deserialize` reads: the current one and each with an upgrade."""
        return (*sorted(self._upgrades), self._version)

    def serialize(self, obj: T) -> bytes:
        """``obj`` as a msgpack map keyed by field name.

        Raises:
            SerializationError: ``obj`` is not an instance of the class, or a field
                value has no msgpack form (for example an int beyond 64 bits).
        """
        if not isinstance(obj, self._cls):
            raise SerializationError(
                f"{self!r} serializes {self._cls.__qualname__} instances (got {describe(obj)})",
                serializer=repr(self),
            )
        try:
            return msgpack.packb(self._converter.unstructure(obj, self._cls), use_bin_type=True)  # type: ignore[no-any-return]  # msgpack is untyped
        except Exception as error:
            raise SerializationError(
                f"{self!r} could not encode {describe(obj)}: {type(error).__name__}: {error}",
                serializer=repr(self),
            ) from error

    def deserialize(self, version: int, serialized: bytes) -> T:
        """The instance encoded in ``serialized`` by version ``version``.

        Raises:
            UnsupportedVersionError: ``version`` is newer than this serializer, or older
                than its oldest upgrade.
            CorruptDataError: The bytes are not one msgpack value, or the value does not
                fit the class.
        """
        supported = self.get_supported_versions()
        if version not in supported:
            raise UnsupportedVersionError(
                f"{self!r} cannot read version {version}; it reads versions {list(supported)}",
                serializer=repr(self),
                version=version,
                supported=supported,
            )
        try:
            data = msgpack.unpackb(serialized, raw=False, strict_map_key=False)
        except Exception as error:
            raise CorruptDataError(
                f"{self!r}: {len(serialized)} bytes of version {version} are not valid msgpack: "
                f"{type(error).__name__}: {error}",
                serializer=repr(self),
                version=version,
            ) from error
        for step in range(version, self._version):
            try:
                data = self._upgrades[step](data)
            except Exception as error:
                raise CorruptDataError(
                    f"{self!r}: upgrade from version {step} to {step + 1} failed: "
                    f"{type(error).__name__}: {error}",
                    serializer=repr(self),
                    version=version,
                ) from error
        try:
            return self._converter.structure(data, self._cls)
        except Exception as error:
            details = (
                "; ".join(cattrs.transform_error(error))
                if isinstance(error, cattrs.BaseValidationError)
                else f"{type(error).__name__}: {error}"
            )
            raise CorruptDataError(
                f"{self!r}: version {version} data does not fit "
                f"{self._cls.__qualname__}: {details}",
                serializer=repr(self),
                version=version,
            ) from error

    def __repr__(self) -> str:
        return f"AttrsMsgpackSerializer({self._cls.__qualname__}, version={self._version})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AttrsMsgpackSerializer):
            return NotImplemented
        return (self._cls, self._version, self._upgrades) == (
            other._cls,
            other._version,
            other._upgrades,
        )

    def __hash__(self) -> int:
        return hash((self._cls, self._version))

    def __getstate__(self) -> dict[str, Any]:
        # The default converter is rebuilt on arrival: its hook caches hold
        # generated functions that need not travel to executors.
        state = dict(self.__dict__)
        if self._custom_converter is None:
            del state["_converter"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "_converter" not in state:
            self._converter = default_converter()
