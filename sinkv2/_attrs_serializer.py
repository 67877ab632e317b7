"""A ready `SimpleVersionedSerializer` for attrs classes, on msgpack.

Over 450 lines because the type checks on write (one per annotation form) are the
serializer's promise, and splitting them from the serializer would separate a check
from the rule it enforces.

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

Field types are checked on write, never coerced: cattrs would turn ``3.9`` into ``3``
for an ``int`` field, ``7`` into ``"7"`` for a ``str`` one, and ``True`` into ``1``,
so the committable read back would differ from the one written. `serialize` compares
each value against its field's annotation, the way a static type checker reads it
(``int`` is accepted where ``float`` is annotated, PEP 484's numeric tower; ``bool``
is not accepted where ``int`` is; a ``datetime`` is not a ``date``), and raises
`SerializationError` naming the field on a mismatch. Understood: ``str``, ``int``,
``float``, ``bool``, ``bytes``, ``None``, unions and ``Optional``, ``Literal``,
``tuple[X, ...]`` and fixed tuples, ``list``, ``set``, ``frozenset``, ``dict`` and
their ``collections.abc`` counterparts, nested (and generic) attrs classes, enums, and
any other class by ``isinstance`` (``datetime``, ``Decimal``, ...). ``Any``, type
variables and annotations that do not resolve are not checked. The checks are
compiled once per class.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import sys
import threading
import types
import typing
import weakref
from collections import abc
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar, final

import attrs
import cattrs
import msgpack
from cattrs.preconf.msgpack import make_converter

from sinkv2._text import describe, short_repr
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


@functools.cache
def _shared_default_converter() -> cattrs.Converter:
    """One `default_converter` per process, for every serializer that takes the default.

    Building a converter costs milliseconds (cattrs registers dozens of hook
    factories), and sinks build their serializers often (``get_*_serializer()`` per
    call). A converter generates and caches a function per class on first use;
    serializers of different classes share it safely, and none registers hooks on
    it (a serializer with its own hooks gets them through ``converter=``).
    """
    return default_converter()


# --- field type checks ------------------------------------------------------------------

_Check = Callable[[Any], None]
"""Raises `_Mismatch` when a value does not fit an annotation; returns None otherwise."""


class _Mismatch(Exception):  # internal signal, never escapes serialize()
    """A value that does not fit its annotation; ``path`` grows outwards as it unwinds."""

    def __init__(self, expected: str, value: object) -> None:
        super().__init__(expected)
        self.expected = expected
        self.value = value
        self.path: list[str] = []  # innermost segment first


_NONE_TYPE: Final = type(None)
_UNIONS: Final = (typing.Union, types.UnionType)
_EXCLUDED: Final[Mapping[type, tuple[type, ...]]] = {
    int: (bool,),  # True is not an int here: it would be stored as 1
    float: (bool,),
    dt.date: (dt.datetime,),  # a datetime in a date field would not read back
}
_ACCEPTED: Final[Mapping[type, tuple[type, ...]]] = {
    float: (float, int),  # PEP 484's numeric tower: an int fits a float field
    _NONE_TYPE: (_NONE_TYPE,),
}
_SEQUENCES: Final = (list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence)
_ABSTRACT: Final = frozenset(
    {
        abc.Iterable,
        abc.Collection,
        abc.Sequence,
        abc.MutableSequence,
        abc.Set,
        abc.MutableSet,
        abc.Mapping,
        abc.MutableMapping,
        abc.Container,
    }
)
_MAPPINGS: Final = frozenset({dict, abc.Mapping, abc.MutableMapping})
_COMPILED: dict[type, _Check] = {}
"""Each attrs class's field check, compiled on its first serialize()."""
_COMPILING: Final = threading.RLock()


def _type_name(annotation: Any) -> str:
    """``annotation`` as a reader writes it: ``tuple[str, ...]``, ``int | None``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is None or annotation is _NONE_TYPE:
        return "None"
    if origin in _UNIONS:
        return " | ".join(_type_name(arg) for arg in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin is not None:
        name = getattr(origin, "__qualname__", None) or repr(origin)
        shown = ", ".join("..." if arg is Ellipsis else _type_name(arg) for arg in args)
        return f"{name}[{shown}]" if args else name
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation)


def _simple(annotation: Any) -> tuple[tuple[type, ...], tuple[type, ...]] | None:
    """(accepted, excluded) types if ``isinstance`` alone decides ``annotation``."""
    if annotation is None:
        annotation = _NONE_TYPE
    if typing.get_origin(annotation) in _UNIONS:
        members = [_simple(arg) for arg in typing.get_args(annotation)]
        if any(member is None for member in members):
            return None
        accepted = tuple(t for member in members if member for t in member[0])
        excluded = tuple(
            e
            for member in members
            if member
            for e in member[1]
            if not any(issubclass(e, t) and e not in _EXCLUDED.get(t, ()) for t in accepted)
        )
        return accepted, excluded
    if (
        not isinstance(annotation, type)
        or typing.get_args(annotation)
        or attrs.has(annotation)
        or getattr(annotation, "_is_protocol", False)
        or annotation in {object, Any}
    ):
        return None
    return _ACCEPTED.get(annotation, (annotation,)), _EXCLUDED.get(annotation, ())


def _compile(annotation: Any) -> _Check | None:  # noqa: PLR0911  # one branch per annotation form
    """A check for ``annotation``, or None where anything goes."""
    while (
        isinstance(annotation, typing.NewType) or typing.get_origin(annotation) is typing.Annotated
    ):
        annotation = (
            annotation.__supertype__
            if isinstance(annotation, typing.NewType)
            else typing.get_args(annotation)[0]
        )
    if annotation is Any or annotation is object or isinstance(annotation, (TypeVar, str)):
        return None
    expected = _type_name(annotation)
    simple = _simple(annotation)
    if simple is not None:
        accepted, excluded = simple

        def check_instance(value: Any) -> None:
            if not isinstance(value, accepted) or isinstance(value, excluded):
                raise _Mismatch(expected, value)

        return check_instance
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_check(annotation)
    if origin in _UNIONS:
        members = [_compile(arg) for arg in args]
        if any(member is None for member in members):
            return None
        return _union_check(expected, typing.cast("list[_Check]", members))
    if origin is typing.Literal:

        def check_literal(value: Any) -> None:
            if not any(type(value) is type(option) and value == option for option in args):
                raise _Mismatch(expected, value)

        return check_literal
    if not isinstance(origin, type):
        return None  # Callable, type[...], ...: nothing msgpack could hold
    if attrs.has(origin):  # a generic attrs class: its own fields, type variables unchecked
        return _attrs_check(origin)
    if origin in _MAPPINGS or (issubclass(origin, dict) and len(args) == 2):  # key and value
        key_annotation, item_annotation = args or (Any, Any)
        return _mapping_check(origin, expected, key_annotation, item_annotation)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):  # tuple[X, ...]
        return _fixed_tuple_check(expected, [_compile(arg) for arg in args])
    if origin in _ABSTRACT or issubclass(origin, (list, tuple, set, frozenset)):
        return _collection_check(origin, expected, args[0] if args else Any)
    return _compile(origin)


def _union_check(expected: str, members: list[_Check]) -> _Check:
    def check_union(value: Any) -> None:
        deepest: _Mismatch | None = None
        for member in members:
            try:
                member(value)
            except _Mismatch as mismatch:
                if deepest is None or len(mismatch.path) > len(deepest.path):
                    deepest = mismatch
            else:
                return
        # A value that got into a member (a tuple with one bad element) says where.
        raise deepest if deepest is not None and deepest.path else _Mismatch(expected, value)

    return check_union


def _item_check(annotation: Any) -> tuple[tuple[type, ...], tuple[type, ...], _Check | None]:
    """(accepted, excluded, None) where ``isinstance`` decides, else ((object,), (), check)."""
    kinds = _simple(annotation)
    if kinds is not None:
        return (*kinds, None)
    return (object,), (), _compile(annotation)


def _collection_check(origin: type, expected: str, item_annotation: Any) -> _Check:
    sequence = issubclass(origin, _SEQUENCES)
    accepted, excluded, item = _item_check(item_annotation)
    unchecked = item is None and accepted == (object,)

    def located(value: Any, mismatch: _Mismatch, position: object) -> _Mismatch:
        if sequence:
            index = next(i for i, element in enumerate(value) if element is position)
            mismatch.path.append(f"[{index}]")
        else:
            mismatch.path.append(" (an element)")
        return mismatch

    def check_collection(value: Any) -> None:
        if type(value) is not origin:  # the exact type needs no further look
            if not isinstance(value, origin) or (sequence and isinstance(value, (str, bytes))):
                raise _Mismatch(expected, value)
            if not isinstance(value, abc.Collection):
                return  # an iterator is not walked: that would consume it
        if unchecked:
            return
        for element in value:
            if not isinstance(element, accepted) or isinstance(element, excluded):
                raise located(value, _Mismatch(_type_name(item_annotation), element), element)
            if item is not None:
                try:
                    item(element)
                except _Mismatch as mismatch:
                    raise located(value, mismatch, element) from None

    return check_collection


def _fixed_tuple_check(expected: str, items: list[_Check | None]) -> _Check:
    def check_tuple(value: Any) -> None:
        if not isinstance(value, tuple) or len(value) != len(items):
            raise _Mismatch(expected, value)
        index = 0
        try:
            for index, (check, element) in enumerate(zip(items, value, strict=True)):  # noqa: B007  # read in the handler
                if check is not None:
                    check(element)
        except _Mismatch as mismatch:
            mismatch.path.append(f"[{index}]")
            raise

    return check_tuple


def _mapping_check(origin: Any, expected: str, key_annotation: Any, item_annotation: Any) -> _Check:
    keys_accepted, keys_excluded, key = _item_check(key_annotation)
    accepted, excluded, item = _item_check(item_annotation)
    unchecked = (key, item) == (None, None) and keys_accepted == accepted == (object,)

    def check_entry(name: Any, element: Any) -> None:
        try:
            if not isinstance(name, keys_accepted) or isinstance(name, keys_excluded):
                raise _Mismatch(_type_name(key_annotation), name)
            if key is not None:
                key(name)
        except _Mismatch as mismatch:
            mismatch.path.append(f" (the key {short_repr(name, 40)})")
            raise
        try:
            if not isinstance(element, accepted) or isinstance(element, excluded):
                raise _Mismatch(_type_name(item_annotation), element)
            if item is not None:
                item(element)
        except _Mismatch as mismatch:
            mismatch.path.append(f"[{short_repr(name, 40)}]")
            raise

    def check_mapping(value: Any) -> None:
        if not isinstance(value, origin):
            raise _Mismatch(expected, value)
        if unchecked:
            return
        if key is None and item is None:  # isinstance decides: one tight loop
            for name, element in value.items():
                if (
                    not isinstance(name, keys_accepted)
                    or isinstance(name, keys_excluded)
                    or not isinstance(element, accepted)
                    or isinstance(element, excluded)
                ):
                    check_entry(name, element)  # raises, saying where
            return
        for name, element in value.items():
            check_entry(name, element)

    return check_mapping


_RESOLVED: weakref.WeakKeyDictionary[type, tuple[object, list[type]]] = weakref.WeakKeyDictionary()
"""Each attrs class: the ``__attrs_attrs__`` tuple last resolved, and its nested classes."""


def _resolve_nested_references(cls: type, fields: tuple[attrs.Attribute[Any], ...]) -> None:
    """Resolve forward references left inside a field's type (``tuple["Node", ...]``).

    A builtin generic keeps a quoted name as a plain str, and Python 3.10's
    ``typing.get_type_hints`` (which attrs uses) does not look inside one, so cattrs
    would meet a name instead of a class; 3.11 resolves them itself (this is then a
    no-op).
    """
    with contextlib.suppress(Exception):
        attrs.resolve_types(cls)  # first, so that attrs (and cattrs) never redo it over ours
    module = sys.modules.get(cls.__module__)
    namespace = {**(vars(module) if module is not None else {}), cls.__name__: cls}
    for field in fields:
        with contextlib.suppress(Exception):  # a name that does not resolve stays as it was
            resolved = _deep_resolve(field.type, namespace)
            if resolved is not field.type:
                object.__setattr__(field, "type", resolved)


def _deep_resolve(kind: Any, namespace: dict[str, Any]) -> Any:
    if isinstance(kind, typing.ForwardRef | str):  # a builtin generic keeps a str as is
        text = kind if isinstance(kind, str) else kind.__forward_arg__
        # the annotation's own text, evaluated in its module as typing.get_type_hints does
        return _deep_resolve(eval(text, namespace), namespace)
    args = getattr(kind, "__args__", None)
    origin = typing.get_origin(kind)
    if not args or origin is None:
        return kind
    new = tuple(arg if arg is Ellipsis else _deep_resolve(arg, namespace) for arg in args)
    if all(a is b for a, b in zip(new, args, strict=True)):
        return kind
    if isinstance(kind, types.GenericAlias):
        return types.GenericAlias(origin, new)
    if origin is typing.Union or isinstance(kind, types.UnionType):
        return typing.Union[new]  # noqa: UP007  # rebuilt from its members
    return kind.copy_with(new)


def resolve_annotations(cls: type, seen: set[type] | None = None) -> None:
    """Turn ``cls``'s string annotations (PEP 563) into types, and its nested classes' too.

    attrs resolves a class once and marks it so; but a class pickled by value (a
    class defined in a script, shipped to Spark's workers by cloudpickle) gets its
    fields' string annotations back each time a reused worker unpickles it into the
    same class object, while the mark stays. cattrs then cannot read the class. The
    fields tuple is the witness: a new one means resolve again. A name that does not
    resolve stays a string (and cattrs names it).
    """
    fields = cls.__dict__.get("__attrs_attrs__")
    if fields is None or (seen is not None and cls in seen):
        return
    known = _RESOLVED.get(cls)
    if known is None or known[0] is not fields:
        if any(isinstance(field.type, str) for field in fields):
            with contextlib.suppress(Exception):  # names that do not resolve stay strings
                type.__setattr__(cls, "__attrs_types_resolved__", None)
                attrs.resolve_types(cls)
        _resolve_nested_references(cls, fields)
        nested = [found for field in fields for found in _attrs_classes_in(field.type)]
        known = _RESOLVED[cls] = (fields, nested)
    if known[1]:
        seen = {cls} if seen is None else seen | {cls}
        for inner in known[1]:
            resolve_annotations(inner, seen)


def _attrs_classes_in(annotation: Any) -> list[type]:
    """The attrs classes an annotation names, at any depth (``list[Split] | None``)."""
    if isinstance(annotation, type) and attrs.has(annotation):
        return [annotation]
    return [found for arg in typing.get_args(annotation) for found in _attrs_classes_in(arg)]


def _attrs_check(cls: type) -> _Check:
    """The check of one attrs class: an instance, and each field's value; cached per class."""
    with _COMPILING:
        found = _COMPILED.get(cls)
        if found is not None:
            return found
        simple: list[tuple[str, tuple[type, ...], tuple[type, ...], str]] = []
        nested: list[tuple[str, _Check]] = []
        expected = _type_name(cls)

        def check_attrs(value: Any) -> None:
            if not isinstance(value, cls):
                raise _Mismatch(expected, value)
            name = ""
            try:
                for name, accepted, excluded, wanted in simple:
                    field = getattr(value, name)
                    if not isinstance(field, accepted) or isinstance(field, excluded):
                        raise _Mismatch(wanted, field)
                for name, check in nested:
                    check(getattr(value, name))
            except _Mismatch as mismatch:
                mismatch.path.append(f".{name}")
                raise

        _COMPILED[cls] = check_attrs  # first: a class may refer to itself
        with contextlib.suppress(Exception):  # names that do not resolve stay unchecked
            attrs.resolve_types(cls)
        for attribute in attrs.fields(cls):
            if attribute.type is None:
                continue
            try:
                kinds = _simple(attribute.type)
                check = None if kinds else _compile(attribute.type)
            except Exception:  # noqa: BLE001  # an annotation form not understood: unchecked
                continue
            if kinds is not None:
                simple.append((attribute.name, *kinds, _type_name(attribute.type)))
            elif check is not None:
                nested.append((attribute.name, check))
        return check_attrs


def _mismatch_error(serializer: object, cls: type, mismatch: _Mismatch) -> SerializationError:
    field = cls.__qualname__ + "".join(reversed(mismatch.path))
    value = mismatch.value
    hint = ""
    if isinstance(value, bool) and "bool" not in mismatch.expected:
        hint = ", and a bool is not a number here: it would be stored as 0 or 1"
    elif isinstance(value, float) and mismatch.expected.startswith("int"):
        hint = ", and int(value) drops the fraction if that is what you mean"
    return SerializationError(
        f"{serializer!r} cannot serialize {field}: it must be {mismatch.expected} "
        f"(got {describe(value)}){hint}; convert the value before building the object, or "
        "annotate the field with the type it really holds (the serializer converts nothing: "
        "the value would read back changed)",
        serializer=repr(serializer),
    )


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
        self._converter = converter or _shared_default_converter()
        self._check: _Check | None = None  # compiled on first serialize()
        # Where the class's module is importable (the driver, before the class is
        # pickled by value to Spark's workers), so its fields travel resolved.
        resolve_annotations(cls)

    def get_version(self) -> int:
        """The version `serialize` writes."""
        return self._version

    def get_supported_versions(self) -> tuple[int, ...]:
        """Every version `deserialize` reads: the current one and each with an upgrade."""
        return (*sorted(self._upgrades), self._version)

    def serialize(self, obj: T) -> bytes:
        """``obj`` as a msgpack map keyed by field name.

        Every field value is checked against its annotation first (see the module
        docstring): nothing is converted on the way.

        Raises:
            SerializationError: ``obj`` is not an instance of the class, a field value
                does not fit its annotation (the message names the field, the type it
                must be, and the value), or a value has no msgpack form (for example an
                int beyond 64 bits).
        """
        if not isinstance(obj, self._cls):
            raise SerializationError(
                f"{self!r} serializes {self._cls.__qualname__} instances (got {describe(obj)})",
                serializer=repr(self),
            )
        resolve_annotations(self._cls)
        check = self._check
        if check is None:
            check = self._check = _attrs_check(self._cls)
        try:
            check(obj)
        except _Mismatch as mismatch:
            raise _mismatch_error(self, self._cls, mismatch) from None
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
        resolve_annotations(self._cls)
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
        # The default converter is not shipped: its hook caches hold generated
        # functions that need not travel to executors, which have their own.
        state = dict(self.__dict__)
        state["_check"] = None  # compiled again where it is used
        if self._custom_converter is None:
            del state["_converter"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "_converter" not in state:
            self._converter = _shared_default_converter()
