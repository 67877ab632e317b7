"""What `RedisSink` writes per element: `SetMode`, `HashMode` or `StreamMode`.

Over 450 lines because the three modes share one value-encoding table (Spark's
spellings of every type) that must be read beside each mode's commands.

A mode turns an element (a dict of column name -> value, as Spark hands writers)
into a request entry, and packs a batch of entries into its RESP commands. Entries are
msgpack-storable lists of bytes, so the async sink's default state serializer
keeps them across a checkpoint:

- set: ``[key, value]``
- hash: ``[key, [field, value, field, value, ...]]``
- stream: ``[key, [field, value, ...], id or None]``

Keys and values are encoded to bytes once, in the converter: the entry's size is
then exact, and what is stored in the state is what is sent.

On Spark, writers know their input schema, and `column_encoders` compiles, per mode,
how each column's values are spelled (``docs/sinks/redis.md``): the JSON of `SetMode`
as Spark's JSON writer spells each type (`reference_sinks._json_values`), a hash or
stream field as Spark's ``CAST(... AS STRING)`` for numbers (``NaN``, ``Infinity``;
a float column's float32 digits) and as JSON text for arrays, maps and structs.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import json
import math
import string
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, TypeAlias, final

import attrs
import pyarrow as pa

from reference_sinks._json_values import Encoder, field_encoder, json_float
from sinkv2.errors import SinkConfigurationError
from sinkv2.text import describe

__all__ = [
    "HashMode",
    "KeySpec",
    "PackedEntry",
    "RedisMode",
    "SetMode",
    "StreamMode",
    "column_encoders",
    "encode_value",
    "json_text",
    "key_part",
    "key_template",
    "packed_entry",
    "show_key",
    "uses_columns",
]

Element: TypeAlias = Mapping[str, Any]
KeySpec: TypeAlias = "str | Callable[[Mapping[str, Any]], str | bytes | int]"
"""A key template such as ``"user:{id}"`` (columns in braces), or a function of the element."""


PackCommand: TypeAlias = Callable[[tuple[Any, ...]], bytes]
"""``hiredis.pack_command``: one command's arguments -> its RESP bytes."""


class PackedEntry(list[Any]):
    """A request entry that carries its commands, packed in RESP, and its size.

    Writers build these column-wise for a whole Arrow batch (``_batches``), so that
    neither is computed again per entry. It is the entry list in every other way:
    the state stores the list only (msgpack packs it as a list), and a restored
    entry, a plain list, is packed again when it is sent.
    """

    __slots__ = ("commands", "size")
    commands: bytes
    size: int


def packed_entry(items: list[Any], commands: bytes, size: int) -> PackedEntry:
    """``items`` as a `PackedEntry` with its ``commands`` (RESP) and ``size``."""
    entry = PackedEntry(items)
    entry.commands = commands
    entry.size = size
    return entry


def show_key(key: bytes) -> str:
    """A key for a message: text where it decodes, escapes where it does not."""
    return repr(key.decode("utf-8", "backslashreplace"))


def _number(value: Any) -> bytes:
    return str(value).encode()


def _iso(value: Any) -> bytes:
    return str(value.isoformat()).encode()


def _non_finite(value: float) -> bytes:
    """NaN and infinities as Spark casts them to string: ``NaN``, ``Infinity``, ``-Infinity``."""
    return str(json_float(value)).encode()


_ENCODERS: Final[dict[type, Callable[[Any], bytes]]] = {
    bytes: bytes,
    str: str.encode,
    bool: lambda value: b"true" if value else b"false",
    int: _number,
    decimal.Decimal: _number,
    float: lambda value: repr(value).encode() if math.isfinite(value) else _non_finite(value),
    datetime.datetime: _iso,
    datetime.date: _iso,
    datetime.time: _iso,
    bytearray: bytes,
    memoryview: bytes,
}


def encode_value(value: object, where: Callable[[], str]) -> bytes:
    """``value`` as the bytes Redis stores.

    bytes as they are, str as UTF-8, bool as ``true``/``false``, int and Decimal
    as digits, float as ``repr`` (round-trips), dates and times in ISO 8601.
    Subclasses (an ``IntEnum``, a ``pandas.Timestamp``) go as their base type.

    Raises:
        SinkConfigurationError: ``value`` is None or of another type; ``where()``
            says which key and field it was for (called only then).
    """
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = next((enc for kind, enc in _ENCODERS.items() if isinstance(value, kind)), None)
    if encoder is not None:
        return encoder(value)
    what = "None" if value is None else describe(value)
    raise SinkConfigurationError(
        f"RedisSink cannot store {what} as {where()}; Redis stores bytes, str and numbers. "
        "Convert it in your value/fields function (e.g. json.dumps), or drop nulls there"
    )


def _json_default(value: object) -> object:
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _non_finite_as_text(value: Any) -> Any:
    """``value`` with NaN and infinities as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, Mapping):
        return {key: _non_finite_as_text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_non_finite_as_text(item) for item in value]
    return value


_JSON_ENCODER: Final = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
)


def _dumps(element: Any) -> bytes:
    return _JSON_ENCODER.encode(element).encode()


def json_text(value: object) -> str:
    """One value as `element_as_json` spells it inside the element's JSON.

    Raises:
        TypeError: the value has no JSON spelling.
    """
    try:
        return _JSON_ENCODER.encode(value)
    except ValueError:  # a NaN or an infinity
        return _JSON_ENCODER.encode(_non_finite_as_text(value))


def element_as_json(element: Element) -> bytes:
    """The default value of `SetMode`: the element as compact JSON (dates ISO 8601).

    NaN and infinities as Spark's JSON writer spells them (``"NaN"``...): strict
    JSON has no such numbers.
    """
    try:
        try:
            return _dumps(element)
        except ValueError:  # a NaN or an infinity: rare, so not looked for on every element
            return _dumps(_non_finite_as_text(element))
    except (TypeError, ValueError) as error:
        raise SinkConfigurationError(
            f"RedisSink's default SetMode value (the element as JSON) cannot encode "
            f"{describe(element)}: {error}; pass value=... to SetMode"
        ) from error


def key_part(value: object, template: str, name: str) -> bytes:
    """Column ``name``'s value as ``template`` puts it into a key: as a hash field stores it.

    So bytes go as they are (not as ``b'...'``), booleans as ``true``/``false``,
    timestamps in ISO 8601, as `encode_value` spells them.

    Raises:
        SinkConfigurationError: a value no key can hold (a list, a dict).
    """
    try:
        return encode_value(value, lambda: "")
    except SinkConfigurationError:
        raise SinkConfigurationError(
            f"RedisSink key template {template!r}: column {name!r} holds {describe(value)}, "
            "which no key can hold; keys are made of strings, bytes, numbers, booleans, "
            "dates and times. Pass a key function for anything else"
        ) from None


def _template_fields(template: str) -> tuple[str, ...]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise SinkConfigurationError(
            f"RedisSink key template {template!r} does not parse ({error}); write columns "
            "in braces, e.g. 'user:{id}', and double literal braces ('{{')"
        ) from error
    fields = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise SinkConfigurationError(
                f"RedisSink key template {template!r} has the placeholder {{{name}}}; a "
                "placeholder must be a bare column name such as {id} (no index, attribute, "
                "format spec or conversion). Use a key function for anything else"
            )
        fields.append(name)
    return tuple(fields)


@final
@attrs.frozen
class _Key:
    """A compiled key spec: a template with its column names, or a function."""

    template: str | None
    names: tuple[str, ...]
    function: Callable[[Element], Any] | None

    @staticmethod
    def of(spec: object, mode: str) -> _Key:
        if isinstance(spec, str):
            if not spec:
                raise SinkConfigurationError(
                    f"{mode} key must not be empty; pass a template such as 'user:{{id}}' or "
                    "a function of the element"
                )
            return _Key(spec, _template_fields(spec), None)
        if callable(spec):
            return _Key(None, (), spec)
        raise SinkConfigurationError(
            f"{mode} key must be a template str such as 'user:{{id}}' or a function "
            f"element -> str (got {describe(spec)})"
        )

    def __call__(self, element: Element) -> bytes:
        if self.function is not None:
            key = self.function(element)
            if key is None or isinstance(key, bool) or not isinstance(key, str | bytes | int):
                raise SinkConfigurationError(
                    f"RedisSink key function must return str, bytes or int (got "
                    f"{describe(key)} for element {element!r})"
                )
            return key if isinstance(key, bytes) else str(key).encode()
        template = str(self.template)
        values: dict[str, bytes] = {}
        for name in self.names:
            try:
                value = element[name]
            except KeyError:
                raise SinkConfigurationError(
                    f"RedisSink key template {template!r} names column {name!r}, which the "
                    f"element lacks (columns: {sorted(element)}); fix the template or select "
                    "the column"
                ) from None
            if value is None:
                raise SinkConfigurationError(
                    f"RedisSink key template {template!r}: column {name!r} is null in element "
                    f"{element!r}; a key must not contain 'None'. Filter null keys first"
                )
            values[name] = key_part(value, template, name)
        return b"".join(
            literal.encode() + (b"" if name is None else values[name])
            for literal, name, _, _ in string.Formatter().parse(template)
        )


def _check_ttl(ttl_ms: object, mode: str) -> int | None:
    if ttl_ms is None:
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise SinkConfigurationError(
            f"{mode} ttl_ms must be a positive int of milliseconds or None (got "
            f"{describe(ttl_ms)}); None keeps keys forever"
        )
    return ttl_ms


def _check_function(value: object, name: str, shape: str) -> None:
    if value is not None and not callable(value):
        raise SinkConfigurationError(
            f"{name} must be a function {shape} or None (got {describe(value)})"
        )


def _field_where(name: bytes, key: bytes) -> str:
    return f"field {name!r} of key {show_key(key)}"


def _flat_fields(mapping: object, key: bytes, mode: str) -> list[bytes]:
    if not isinstance(mapping, Mapping):
        raise SinkConfigurationError(
            f"{mode} fields function must return a mapping of field -> value (got "
            f"{describe(mapping)} for key {show_key(key)})"
        )
    flat: list[bytes] = []
    for field, value in mapping.items():
        if value is None:
            continue  # Redis has no null: an absent field is the null
        name = encode_value(field, lambda: f"a field name of key {show_key(key)}")
        flat.append(name)
        flat.append(encode_value(value, functools.partial(_field_where, name, key)))
    return flat


@final
@attrs.frozen(kw_only=True)
class SetMode:
    """``SET key value [PX ttl_ms]`` per element: the latest element of a key wins.

    Idempotent: writing an element again stores the same value.

    Attributes:
        key: A template such as ``"user:{id}"`` (bare column names in braces) or a
            function element -> str/bytes/int.
        value: A function element -> bytes/str/number; ``None`` stores the element
            as compact JSON (dates ISO 8601, decimals as strings).
        ttl_ms: Expire keys this many milliseconds after each write (``PX``); ``None``
            keeps them.
    """

    key: KeySpec
    value: Callable[[Element], Any] | None = None
    ttl_ms: int | None = None
    command: ClassVar[str] = "SET"
    simple_replies: ClassVar[bool] = True
    """Every reply is one line (``+OK`` or an error)."""
    _key: _Key = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_key", _Key.of(self.key, "SetMode"))
        _check_function(self.value, "SetMode value", "element -> bytes/str/number")
        _check_ttl(self.ttl_ms, "SetMode")

    def to_entry(self, element: Element, encoded: Element | None = None) -> list[Any]:
        """``[key, value]``.

        ``encoded`` is the element with its columns spelled by `column_encoders`.
        """
        key = self._key(element)
        if self.value is None:
            return [key, element_as_json(element if encoded is None else encoded)]
        return [key, encode_value(self.value(element), lambda: f"the value of key {show_key(key)}")]

    def pack(self, entries: list[list[Any]], pack: PackCommand) -> tuple[bytes, list[int]]:
        """One ``SET`` per entry, packed: the RESP bytes and the commands per entry."""
        if self.ttl_ms is None:
            packed = [
                entry.commands
                if entry.__class__ is PackedEntry
                else pack((b"SET", entry[0], entry[1]))
                for entry in entries
            ]
        else:
            ttl = b"%d" % self.ttl_ms
            packed = [
                entry.commands
                if entry.__class__ is PackedEntry
                else pack((b"SET", entry[0], entry[1], b"PX", ttl))
                for entry in entries
            ]
        return b"".join(packed), [1] * len(entries)

    def entry_size(self, entry: list[Any]) -> int:
        """Key plus value bytes."""
        if entry.__class__ is PackedEntry:
            return entry.size
        return len(entry[0]) + len(entry[1])


@final
@attrs.frozen(kw_only=True)
class HashMode:
    """``HSET key field value ...`` per element, then ``PEXPIRE key ttl_ms`` if set.

    Idempotent: writing an element again sets the same fields. Fields are merged
    into the hash: a field the element does not carry (or carries as null) keeps
    what an earlier write stored. An element without any non-null field writes
    nothing (Redis has no empty hash).

    Attributes:
        key: A template such as ``"user:{id}"`` or a function element -> str/bytes/int.
        fields: A function element -> mapping of field -> value; ``None`` stores the
            element's columns. Null values are skipped.
        ttl_ms: Expire the hash this many milliseconds after each write; ``None``
            keeps it.
    """

    key: KeySpec
    fields: Callable[[Element], Mapping[Any, Any]] | None = None
    ttl_ms: int | None = None
    command: ClassVar[str] = "HSET"
    simple_replies: ClassVar[bool] = True
    """Every reply is one line (``:<fields added>``, ``:0``/``:1`` or an error)."""
    _key: _Key = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_key", _Key.of(self.key, "HashMode"))
        _check_function(self.fields, "HashMode fields", "element -> mapping")
        _check_ttl(self.ttl_ms, "HashMode")

    def to_entry(self, element: Element, encoded: Element | None = None) -> list[Any]:
        """``[key, [field, value, ...]]``.

        ``encoded`` is the element with its columns spelled by `column_encoders`.
        """
        key = self._key(element)
        if self.fields is not None:
            mapping = self.fields(element)
        else:
            mapping = element if encoded is None else encoded
        return [key, _flat_fields(mapping, key, "HashMode")]

    def pack(self, entries: list[list[Any]], pack: PackCommand) -> tuple[bytes, list[int]]:
        """``HSET`` (and ``PEXPIRE``) per entry, nothing for an entry without fields."""
        packed: list[bytes] = []
        counts: list[int] = []
        ttl = None if self.ttl_ms is None else b"%d" % self.ttl_ms
        for entry in entries:
            key, fields = entry
            if not fields:
                counts.append(0)
                continue
            counts.append(1 if ttl is None else 2)
            if entry.__class__ is PackedEntry:
                packed.append(entry.commands)
                continue
            packed.append(pack((b"HSET", key, *fields)))
            if ttl is not None:
                packed.append(pack((b"PEXPIRE", key, ttl)))
        return b"".join(packed), counts

    def entry_size(self, entry: list[Any]) -> int:
        """Key plus field and value bytes."""
        if entry.__class__ is PackedEntry:
            return entry.size
        return len(entry[0]) + sum(map(len, entry[1]))


@final
@attrs.frozen(kw_only=True)
class StreamMode:
    """``XADD key id field value ...`` per element: append to a stream.

    Without ``id`` Redis assigns ids (``*``): a re-delivered element is appended
    again, so readers see duplicates after a retry or a restore (at least once).

    With ``id`` (a function element -> ``"<ms>-<seq>"`` or ``"<ms>"``, meaning
    ``<ms>-0``) re-delivery is harmless: Redis refuses an id that is not above the
    stream's last one, and the sink then looks the id up; if the stream holds it,
    the element landed before and counts as delivered. If it does not, the id is
    out of order (lower than one written after it) and the writer fails with
    `FatalDestinationError`: ids must increase per stream in input order. The sink
    keeps per-stream order for this, so one stream gets one entry per round trip.

    Attributes:
        key: The stream: a template such as ``"events:{kind}"`` (or a constant such
            as ``"events"``) or a function element -> str/bytes/int.
        fields: A function element -> mapping of field -> value; ``None`` stores the
            element's columns. Null values are skipped; at least one must remain.
        id: A function element -> entry id, or ``None`` for ids assigned by Redis.
    """

    key: KeySpec
    fields: Callable[[Element], Mapping[Any, Any]] | None = None
    id: Callable[[Element], str | bytes] | None = None
    command: ClassVar[str] = "XADD"
    simple_replies: ClassVar[bool] = False
    """Replies are bulk strings (the ids)."""
    _key: _Key = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_key", _Key.of(self.key, "StreamMode"))
        _check_function(self.fields, "StreamMode fields", "element -> mapping")
        _check_function(self.id, "StreamMode id", "element -> '<ms>-<seq>'")

    def to_entry(self, element: Element, encoded: Element | None = None) -> list[Any]:
        """``[key, [field, value, ...], id or None]``; ``encoded`` as for `HashMode`."""
        key = self._key(element)
        if self.fields is not None:
            mapping = self.fields(element)
        else:
            mapping = element if encoded is None else encoded
        flat = _flat_fields(mapping, key, "StreamMode")
        if not flat:
            raise SinkConfigurationError(
                f"StreamMode: element {element!r} has no non-null field for stream "
                f"{show_key(key)}; a stream entry needs at least one. Filter such elements "
                "or map them in fields=..."
            )
        entry_id = None
        if self.id is not None:
            raw = self.id(element)
            if isinstance(raw, bytes):
                raw = raw.decode("ascii", "backslashreplace")
            if not isinstance(raw, str) or not _is_stream_id(raw):
                raise SinkConfigurationError(
                    f"StreamMode id function must return an id '<ms>-<seq>' or '<ms>' of "
                    f"non-negative integers (got {describe(raw)} for stream {show_key(key)})"
                )
            entry_id = (raw if "-" in raw else f"{raw}-0").encode()
        return [key, flat, entry_id]

    def pack(self, entries: list[list[Any]], pack: PackCommand) -> tuple[bytes, list[int]]:
        """One ``XADD`` per entry, packed: the RESP bytes and the commands per entry."""
        packed = [
            pack((b"XADD", key, entry_id or b"*", *fields)) for key, fields, entry_id in entries
        ]
        return b"".join(packed), [1] * len(entries)

    def entry_size(self, entry: list[Any]) -> int:
        """Key, id, field and value bytes."""
        return len(entry[0]) + len(entry[2] or b"") + sum(map(len, entry[1]))


def _is_stream_id(raw: str) -> bool:
    parts = raw.split("-")
    return 1 <= len(parts) <= 2 and all(part.isdigit() and part.isascii() for part in parts)


RedisMode: TypeAlias = "SetMode | HashMode | StreamMode"
"""What `RedisSink` writes: one of the three modes."""


def _column_where(field: pa.Field) -> str:
    return f"RedisSink: column {field.name!r} of type {field.type}"


def _as_json_text(encoder: Encoder | None) -> Encoder:
    def encode(value: Any) -> str:
        return json.dumps(
            value if encoder is None else encoder(value),
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )

    return encode


def column_encoders(mode: RedisMode, schema: pa.Schema) -> dict[str, Encoder]:
    """How ``mode`` spells the columns of rows of ``schema``: column -> encoder of its values.

    `SetMode`'s JSON: each type as Spark's JSON writer spells it. Hash and stream
    fields: floats as Spark's ``CAST(... AS STRING)`` (``NaN``, ``Infinity``, a float
    column's float32 digits), arrays, maps and structs as their JSON text; other
    values as `encode_value` stores them (binary as it is).

    Raises:
        SinkConfigurationError: a column's type has no such spelling (a day-time
            interval); the message names the column and its type.
    """
    encoders: dict[str, Encoder] = {}
    for field in schema:
        encoder = field_encoder(field, functools.partial(_column_where, field))
        if pa.types.is_float64(field.type):
            continue  # NaN and infinities are spelled when encoded (element_as_json, _ENCODERS)
        if isinstance(mode, SetMode):
            if encoder is not None:
                encoders[field.name] = encoder
        elif pa.types.is_nested(field.type):
            encoders[field.name] = _as_json_text(encoder)
        elif pa.types.is_floating(field.type) and encoder is not None:
            encoders[field.name] = encoder
    return encoders


def check_mode(mode: object) -> RedisMode:
    """``mode`` if it is one of the three modes.

    Raises:
        SinkConfigurationError: it is not.
    """
    if not isinstance(mode, SetMode | HashMode | StreamMode):
        raise SinkConfigurationError(
            f"RedisSink mode must be SetMode, HashMode or StreamMode (got {describe(mode)}); "
            "e.g. SetMode(key='user:{id}')"
        )
    return mode


def key_template(mode: RedisMode) -> str | None:
    """The mode's key template, or ``None`` for a key function."""
    return mode._key.template


def uses_columns(mode: RedisMode) -> bool:
    """Whether ``mode`` stores the element's columns (no value or fields function)."""
    return (mode.value if isinstance(mode, SetMode) else mode.fields) is None
