"""Spark's ``variant`` columns in Parquet files, read as Spark's own reader reads them.

Over 450 lines because rebuilding a shredded value both reads the Variant binary
encoding (a leftover ``value``, its keys renumbered) and writes it, and the two halves
share the encoding's constants and layout rules.

Why: Spark writes a ``variant`` column as a Parquet group of ``metadata`` (the key
dictionary) and ``value`` (the Variant binary encoding), and since Spark 4 it
*shreds* the group by default (``spark.sql.variant.writeShredding.enabled``): parts
of each value move into a ``typed_value`` of a shape inferred per file - a primitive
column, a struct of ``{value, typed_value}`` groups per object field, or a list of
such groups - and only what does not fit that shape stays in ``value``. pyarrow
reads the group as a plain struct: not what Spark's reader gives (``variant``), and
not one type across files shredded in different shapes.

What: each group is rebuilt into pyspark's Arrow form of ``variant``,
``struct<value: binary, metadata: binary>`` with the ``metadata`` field tagged
``variant: true`` (`VARIANT`, which pyspark's ``from_arrow_schema`` maps to
``VariantType``), as Spark's reader rebuilds it (the reconstruction of the Parquet
VariantShredding spec, with the choices of Spark's ``ShreddingUtils.rebuild``):

- a null group is SQL null; a ``value`` of one null byte is the variant null;
- a group without ``typed_value`` (unshredded, or written with shredding off) is
  read as stored, bytes unchanged;
- a shredded group is encoded afresh: a new key dictionary in the order keys are
  met, integers in the smallest width that holds them, decimals in the smallest of
  4, 8 or 16 bytes their digits fit, object fields listed by key (as Java orders
  strings), each field's value where it was written, and the leftover ``value`` of
  a partially shredded object (or an unshredded part) copied with its keys renumbered;
- what the spec calls malformed (a shredded field group null, a value missing where
  one must be, a leftover ``value`` that is not an object or repeats a shredded
  field, a duplicate key) raises `MalformedVariant`, as Spark's reader fails.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import itertools
import math
import struct
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "VARIANT",
    "VARIANT_MARK",
    "MalformedVariant",
    "is_variant",
    "spark_variants",
    "stored_variant",
]

VARIANT: Final = pa.struct(
    [
        pa.field("value", pa.binary(), nullable=False),
        pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
    ]
)
"""pyspark's Arrow form of ``VariantType`` (``pyspark.sql.pandas.types.to_arrow_type``)."""


class _VariantMark(pa.ExtensionType):  # type: ignore[misc]  # pyarrow's classes are untyped
    """A type no Parquet column is read as: a variant where types are compared."""

    def __init__(self) -> None:
        super().__init__(pa.binary(), "sinkv2.variant")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(
        cls, storage_type: pa.DataType, serialized: bytes
    ) -> _VariantMark:
        return cls()


VARIANT_MARK: Final = _VariantMark()
"""Stands for `VARIANT` where nested types are compared without their fields' metadata.

A struct of binaries ``value`` and ``metadata`` equals `VARIANT` but for the
``metadata`` field's tag, which pyarrow's type equality ignores; this type equals
only itself.
"""


class MalformedVariant(ValueError):
    """A stored variant Spark's reader refuses too; the message says what is wrong."""


def is_variant(kind: pa.DataType) -> bool:
    """Whether ``kind`` is pyspark's Arrow form of ``variant`` (its tagged ``metadata``)."""
    if not pa.types.is_struct(kind) or kind.get_field_index("value") < 0:
        return False
    index = kind.get_field_index("metadata")
    tags = kind.field(index).metadata if index >= 0 else None
    return bool(tags and tags.get(b"variant") == b"true")


def stored_variant(kind: pa.DataType) -> bool:
    """Whether ``kind`` is a Parquet variant group as pyarrow reads it."""
    if not pa.types.is_struct(kind) or kind.get_field_index("metadata") < 0:
        return False
    names = {field.name for field in kind}
    return names <= {"metadata", "value", "typed_value"} and len(names) > 1


def spark_variants(column: pa.Array, spark: object) -> pa.Array:
    """``column`` with every variant group Spark's stored type (JSON) ``spark`` names rebuilt.

    Raises:
        MalformedVariant: A stored variant Spark's reader refuses too.
    """
    if spark == "variant" and stored_variant(column.type):
        return _column(column)
    if not isinstance(spark, dict) or "variant" not in repr(spark):
        return column
    if spark.get("type") == "struct" and pa.types.is_struct(column.type):
        inner = {f.get("name"): f.get("type") for f in spark.get("fields", [])}
        names = [field.name for field in column.type]
        children = [
            spark_variants(column.field(i), inner.get(name)) for i, name in enumerate(names)
        ]
        return pa.StructArray.from_arrays(children, names=names, mask=_nulls(column))
    if spark.get("type") == "array" and pa.types.is_list(column.type):
        offsets, (values,) = _children(column, column.values)
        values = spark_variants(values, spark.get("elementType"))
        return pa.ListArray.from_arrays(offsets, values, mask=_nulls(column))
    if spark.get("type") == "map" and pa.types.is_map(column.type):
        offsets, (keys, items) = _children(column, column.keys, column.items)
        keys = spark_variants(keys, spark.get("keyType"))
        items = spark_variants(items, spark.get("valueType"))
        return pa.MapArray.from_arrays(offsets, keys, items, mask=_nulls(column))
    return column


def _children(column: pa.Array, *children: pa.Array) -> tuple[pa.Array, list[pa.Array]]:
    """A list or map column's offsets from 0 and its children's values they cover."""
    first, last = column.offsets[0].as_py(), column.offsets[-1].as_py()
    offsets = pc.subtract(column.offsets, pa.scalar(first, column.offsets.type))
    return offsets, [child.slice(first, last - first) for child in children]


def _nulls(column: pa.Array) -> pa.Array | None:
    return column.is_null() if column.null_count else None


def _column(column: pa.Array) -> pa.Array:
    """A stored variant group column rebuilt as `VARIANT` (see the module docstring)."""
    kind = column.type
    mask = _nulls(column)
    metadata = column.field("metadata")
    if kind.get_field_index("typed_value") < 0:  # unshredded: as stored
        value = column.field("value")
        missing = pc.and_(value.is_null(), column.is_valid())
        if missing.true_count or pc.and_(metadata.is_null(), column.is_valid()).true_count:
            raise MalformedVariant("an unshredded variant has no value or no metadata")
        empty = pa.array([b""] * len(column), pa.binary())
        value = pc.if_else(value.is_null(), empty, value)
        metadata = pc.if_else(metadata.is_null(), empty, metadata)
        return pa.StructArray.from_arrays(
            [value.cast(pa.binary()), metadata.cast(pa.binary())], fields=list(VARIANT), mask=mask
        )
    shape = _Shape(kind)
    values, dictionaries = [], []
    for row in column.to_pylist():
        if row is None:
            values.append(b"")
            dictionaries.append(b"")
            continue
        if row["metadata"] is None:
            raise MalformedVariant("a shredded variant has no metadata")
        keys = _Keys()
        values.append(_rebuild(shape, row, _Stored(row["metadata"]), keys))
        dictionaries.append(keys.metadata())
    return pa.StructArray.from_arrays(
        [pa.array(values, pa.binary()), pa.array(dictionaries, pa.binary())],
        fields=list(VARIANT),
        mask=mask,
    )


# --- the Variant binary encoding ---------------------------------------------------------------

_PRIMITIVE, _SHORT_STRING, _OBJECT, _ARRAY = 0, 1, 2, 3
_TRUE, _FALSE, _DOUBLE, _DATE, _TIMESTAMP, _TIMESTAMP_NTZ = 1, 2, 7, 11, 12, 13
_FLOAT, _BINARY, _STRING, _UUID = 14, 15, 16, 20
_INTS: Final = ((3, 1), (4, 2), (5, 4), (6, 8))  # (type id, bytes), smallest first
_DECIMALS: Final = ((8, 4, 9), (9, 8, 18), (10, 16, 38))  # (type id, bytes, max digits)
_SIZES: Final = {0: 1, 1: 1, 2: 1, 3: 2, 4: 3, 5: 5, 6: 9, 7: 9, 8: 6, 9: 10, 10: 18, 11: 5}
_SIZES.update({12: 9, 13: 9, 14: 5, 17: 9, 18: 9, 19: 9, 20: 17})
_EPOCH: Final = datetime.datetime(1970, 1, 1)  # naive: timestamp_ntz's epoch
_EPOCH_UTC: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY: Final = datetime.date(1970, 1, 1)
_MAX_SHORT_STRING: Final = 63
_UUID_BYTES: Final = 16
_FLOAT_NAN: Final = struct.pack("<I", 0x7FC00000)
_DOUBLE_NAN: Final = struct.pack("<Q", 0x7FF8000000000000)


def _primitive(type_id: int) -> bytes:
    return bytes([type_id << 2 | _PRIMITIVE])


def _width(number: int) -> int:
    """Bytes for an unsigned ``number`` (1 to 4), as Spark's ``getIntegerSize``."""
    return 1 if number <= 0xFF else 2 if number <= 0xFFFF else 3 if number <= 0xFFFFFF else 4


def _unsigned(data: bytes, pos: int, size: int) -> int:
    if pos + size > len(data):
        raise MalformedVariant("a variant value or metadata ends early")
    return int.from_bytes(data[pos : pos + size], "little")


class _Keys:
    """The key dictionary of the variant being built: ids in the order keys are added."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def add(self, key: str) -> int:
        return self.ids.setdefault(key, len(self.ids))

    def metadata(self) -> bytes:
        encoded = [key.encode("utf-8") for key in self.ids]
        total = sum(len(key) for key in encoded)
        size = _width(max(total, len(encoded)))
        offsets, at = [], 0
        for key in encoded:
            offsets.append(at)
            at += len(key)
        offsets.append(at)
        header = bytes([1 | (size - 1) << 6])  # version 1, not flagged sorted
        numbers = [len(encoded), *offsets]
        return header + b"".join(n.to_bytes(size, "little") for n in numbers) + b"".join(encoded)


class _Stored:
    """A stored metadata dictionary: its keys by id, parsed once."""

    def __init__(self, metadata: bytes) -> None:
        self.data = metadata
        self._keys: list[str] | None = None

    def key(self, key_id: int) -> str:
        if self._keys is None:
            self._keys = self._parse()
        if key_id >= len(self._keys):
            raise MalformedVariant(f"a variant field id {key_id} is not in its metadata")
        return self._keys[key_id]

    def _parse(self) -> list[str]:
        data = self.data
        if not data or data[0] & 0x0F != 1:
            raise MalformedVariant("a variant metadata is not of version 1")
        size = (data[0] >> 6) + 1
        count = _unsigned(data, 1, size)
        offsets = [_unsigned(data, 1 + size * (i + 1), size) for i in range(count + 1)]
        start = 1 + size * (count + 2)
        try:
            return [
                data[start + offsets[i] : start + offsets[i + 1]].decode("utf-8")
                for i in range(count)
            ]
        except UnicodeDecodeError as error:
            raise MalformedVariant(f"a variant metadata key is not UTF-8 ({error})") from None


def _java_order(key: str) -> bytes:
    """Sorts as Java's ``String.compareTo`` (UTF-16 code units), Spark's order of fields."""
    return key.encode("utf-16-be", "surrogatepass")


def _object(fields: list[tuple[str, int, bytes]]) -> bytes:
    """An object of (key, key id, value) in the order written; listed by key."""
    offsets, at = [], 0
    for _, _, value in fields:
        offsets.append(at)
        at += len(value)
    entries = sorted(zip(fields, offsets, strict=True), key=lambda entry: _java_order(entry[0][0]))
    for before, after in itertools.pairwise(entries):
        if before[0][0] == after[0][0]:
            raise MalformedVariant(f"a variant object holds the key {after[0][0]!r} twice")
    count = len(fields)
    large = count > 0xFF
    id_size = _width(max((key_id for _, key_id, _ in fields), default=0))
    offset_size = _width(at)
    header = bytes([(large << 4 | (id_size - 1) << 2 | (offset_size - 1)) << 2 | _OBJECT])
    parts = [header, count.to_bytes(4 if large else 1, "little")]
    parts += [key_id.to_bytes(id_size, "little") for (_, key_id, _), _ in entries]
    parts += [offset.to_bytes(offset_size, "little") for _, offset in entries]
    parts.append(at.to_bytes(offset_size, "little"))
    return b"".join(parts + [value for _, _, value in fields])


def _array(elements: list[bytes]) -> bytes:
    offsets, at = [], 0
    for element in elements:
        offsets.append(at)
        at += len(element)
    large = len(elements) > 0xFF
    offset_size = _width(at)
    header = bytes([(large << 2 | (offset_size - 1)) << 2 | _ARRAY])
    parts = [header, len(elements).to_bytes(4 if large else 1, "little")]
    parts += [offset.to_bytes(offset_size, "little") for offset in [*offsets, at]]
    return b"".join(parts + elements)


def _copy(value: bytes, pos: int, stored: _Stored, keys: _Keys) -> bytes:
    """The stored value at ``pos``, its objects' keys renumbered in ``keys``."""
    if pos >= len(value):
        raise MalformedVariant("a variant value ends early")
    header = value[pos]
    basic, info = header & 3, header >> 2
    if basic == _OBJECT:
        return _object(
            [
                (key, keys.add(key), _copy(value, at, stored, keys))
                for key, at in _object_fields(value, pos, stored)
            ]
        )
    if basic == _ARRAY:
        count, offset_size, offsets_at, data_at = _array_layout(value, pos)
        return _array(
            [
                _copy(
                    value,
                    data_at + _unsigned(value, offsets_at + i * offset_size, offset_size),
                    stored,
                    keys,
                )
                for i in range(count)
            ]
        )
    if basic == _SHORT_STRING:
        size = 1 + info
    elif info in (_BINARY, _STRING):
        size = 5 + _unsigned(value, pos + 1, 4)
    elif info in _SIZES:
        size = _SIZES[info]
    else:
        raise MalformedVariant(f"a variant value has the unknown primitive type {info}")
    if pos + size > len(value):
        raise MalformedVariant("a variant value ends early")
    return value[pos : pos + size]


def _object_fields(value: bytes, pos: int, stored: _Stored) -> list[tuple[str, int]]:
    """The (key, position of its value) of the stored object at ``pos``."""
    info = value[pos] >> 2
    offset_size, id_size, large = (info & 3) + 1, (info >> 2 & 3) + 1, info >> 4 & 1
    count_size = 4 if large else 1
    count = _unsigned(value, pos + 1, count_size)
    ids_at = pos + 1 + count_size
    offsets_at = ids_at + count * id_size
    data_at = offsets_at + (count + 1) * offset_size
    return [
        (
            stored.key(_unsigned(value, ids_at + i * id_size, id_size)),
            data_at + _unsigned(value, offsets_at + i * offset_size, offset_size),
        )
        for i in range(count)
    ]


def _array_layout(value: bytes, pos: int) -> tuple[int, int, int, int]:
    info = value[pos] >> 2
    offset_size, large = (info & 3) + 1, info >> 2 & 1
    count_size = 4 if large else 1
    count = _unsigned(value, pos + 1, count_size)
    offsets_at = pos + 1 + count_size
    return count, offset_size, offsets_at, offsets_at + (count + 1) * offset_size


# --- rebuilding shredded groups ----------------------------------------------------------------


class _Shape:
    """A ``{value, typed_value}`` group's type, compiled once per column.

    Exactly one of ``fields`` (a shredded object's), ``element`` (an array's) and
    ``scalar`` (a primitive's encoder) is set when the group has a ``typed_value``.
    """

    def __init__(self, kind: pa.DataType) -> None:
        if not pa.types.is_struct(kind):
            raise MalformedVariant(f"a shredded group is {kind}, not a struct")
        self.fields: list[tuple[str, _Shape]] | None = None
        self.element: _Shape | None = None
        self.scalar: Callable[[Any], bytes] | None = None
        index = kind.get_field_index("typed_value")
        typed = kind.field(index).type if index >= 0 else None
        if typed is None:
            return
        if pa.types.is_struct(typed):
            self.fields = [(field.name, _Shape(field.type)) for field in typed]
        elif pa.types.is_list(typed) or pa.types.is_large_list(typed):
            self.element = _Shape(typed.value_type)
        else:
            self.scalar = _scalar(typed)


def _rebuild(shape: _Shape, row: dict[str, Any], stored: _Stored, keys: _Keys) -> bytes:
    """A ``{value, typed_value}`` group's variant, as Spark's ``ShreddingUtils.rebuild``."""
    typed, value = row.get("typed_value"), row.get("value")
    if typed is None:
        if value is None:
            raise MalformedVariant("a variant value is missing where one must be")
        return _copy(value, 0, stored, keys)
    if shape.scalar is not None:
        return shape.scalar(typed)
    if shape.element is not None:
        if any(group is None for group in typed):
            raise MalformedVariant("a shredded array holds a null element group")
        return _array([_rebuild(shape.element, group, stored, keys) for group in typed])
    fields = []
    for name, inner in shape.fields or ():
        group = typed[name]
        if group is None:
            raise MalformedVariant(f"the shredded field group {name!r} is null")
        if group.get("typed_value") is not None or group.get("value") is not None:
            key_id = keys.add(name)
            fields.append((name, key_id, _rebuild(inner, group, stored, keys)))
    if value is not None:  # a partially shredded object: the fields left in value
        if not value or value[0] & 3 != _OBJECT:
            raise MalformedVariant("a shredded object's leftover value is not an object")
        shredded = {name for name, _ in shape.fields or ()}
        for key, at in _object_fields(value, 0, stored):
            if key in shredded:
                raise MalformedVariant(f"the shredded field {key!r} is also in value")
            fields.append((key, keys.add(key), _copy(value, at, stored, keys)))
    return _object(fields)


def _scalar(kind: pa.DataType) -> Callable[[Any], bytes]:  # noqa: PLR0911  # one per kind
    """The encoder of a shredded primitive ``typed_value``, as Spark appends it."""
    if pa.types.is_boolean(kind):
        return lambda typed: _primitive(_TRUE if typed else _FALSE)
    if pa.types.is_signed_integer(kind):
        return _integer
    if pa.types.is_float32(kind) or pa.types.is_float64(kind):
        return functools.partial(_float, double=pa.types.is_float64(kind))
    if pa.types.is_decimal(kind):
        return functools.partial(_decimal, scale=kind.scale)
    if pa.types.is_date32(kind):
        return _date
    if pa.types.is_timestamp(kind) and kind.unit == "us":
        return functools.partial(_timestamp, zoned=kind.tz is not None)
    return _bytes(kind)


def _bytes(kind: pa.DataType) -> Callable[[Any], bytes]:
    """The encoder of a shredded binary, string or UUID ``typed_value``."""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return lambda typed: _primitive(_BINARY) + len(typed).to_bytes(4, "little") + typed
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _string
    if pa.types.is_fixed_size_binary(kind) and kind.byte_width == _UUID_BYTES:
        return lambda typed: _primitive(_UUID) + bytes(typed)
    raise MalformedVariant(f"a shredded typed_value of type {kind}, which Spark does not read")


def _string(typed: str) -> bytes:
    text = typed.encode("utf-8")
    if len(text) <= _MAX_SHORT_STRING:
        return bytes([len(text) << 2 | _SHORT_STRING]) + text
    return _primitive(_STRING) + len(text).to_bytes(4, "little") + text


def _date(typed: datetime.date) -> bytes:
    return _primitive(_DATE) + (typed - _EPOCH_DAY).days.to_bytes(4, "little", signed=True)


def _timestamp(typed: datetime.datetime, *, zoned: bool) -> bytes:
    micros = _micros(typed - (_EPOCH_UTC if zoned else _EPOCH))
    kind = _TIMESTAMP if zoned else _TIMESTAMP_NTZ
    return _primitive(kind) + micros.to_bytes(8, "little", signed=True)


def _integer(number: int) -> bytes:
    """An integer in the smallest width that holds it (Spark's ``appendLong``)."""
    for type_id, size in _INTS:
        if -(1 << (8 * size - 1)) <= number < 1 << (8 * size - 1):
            return _primitive(type_id) + number.to_bytes(size, "little", signed=True)
    raise MalformedVariant(f"a shredded integer {number} does not fit 64 bits")


def _float(number: float, *, double: bool) -> bytes:
    """A float or double; NaN as Java's ``floatToIntBits``/``doubleToLongBits`` write it."""
    if double:
        return _primitive(_DOUBLE) + (
            _DOUBLE_NAN if math.isnan(number) else struct.pack("<d", number)
        )
    return _primitive(_FLOAT) + (_FLOAT_NAN if math.isnan(number) else struct.pack("<f", number))


def _micros(delta: datetime.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _decimal(typed: decimal.Decimal, *, scale: int) -> bytes:
    """A decimal of the column's ``scale``, in the smallest encoding its digits fit."""
    sign, digits, exponent = typed.as_tuple()
    shift = scale + int(exponent)  # pyarrow's decimals have at most the column's scale
    if shift < 0:
        raise MalformedVariant(f"a shredded decimal {typed} has more than {scale} decimals")
    unscaled = int("".join(map(str, digits)) + "0" * shift)
    unscaled = -unscaled if sign else unscaled
    precision = len(str(abs(unscaled)))
    for type_id, size, most in _DECIMALS:
        if scale <= most and precision <= most:
            return (
                _primitive(type_id)
                + bytes([scale])
                + unscaled.to_bytes(size, "little", signed=True)
            )
    raise MalformedVariant(f"a shredded decimal {typed} has more than 38 digits")
