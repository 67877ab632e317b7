"""pgoutput's messages (protocol 1) as whole transactions of typed row changes.

pgoutput sends, per transaction, ``B`` (begin), a ``R`` (relation) before the first
change of each table in a decoding session, ``I``/``U``/``D`` changes with their
tuples in text form, and ``C`` (commit, with the commit record's end LSN). Changes
are kept until their commit arrives, so a caller only ever sees whole transactions,
positioned by their commit's end LSN: what the slot is advanced to, and what a
micro-batch's range ``(start, end]`` is measured in.

Column types map to Arrow once, when the source is made (`arrow_type`); a value's
text is parsed by psycopg's own loader for its type (text columns are taken as
they are), so every type psycopg reads is read as PostgreSQL wrote it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa

from reference_sinks.postgres._cdc_interval import IntervalArrayLoader, IntervalLoader
from reference_sinks.postgres._chunk_read import UnreadableValueError
from reference_sinks.postgres._table import Column
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "OPERATIONS",
    "Change",
    "Transaction",
    "TupleDecoder",
    "Value",
    "arrow_type",
    "transactions",
]

OPERATIONS: Final = ("insert", "update", "delete")

Value = bytes | bool | None
"""A column of a logged tuple: its text, ``None`` (null), ``False`` (an unchanged TOAST value)."""

_STRINGS: Final = frozenset(
    {"text", "varchar", "bpchar", "name", "uuid", "json", "jsonb", "citext", "xml"}
    | {"inet", "cidr", "macaddr", "macaddr8"}
)
_SCALARS: Final[dict[str, pa.DataType]] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "oid": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "interval": pa.duration("us"),  # as PostgresSource reads it (`_cdc_interval`)
}
_NUMERIC: Final = re.compile(r"numeric\((\d+),(\d+)\)")
_TEXT_ARRAY: Final = 1009
"""``text[]``'s type oid: arrays of the types read as text are parsed as it."""


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type a column's values are read as.

    Raises:
        SinkConfigurationError: The column's type has no mapping; the message names
            the column and its type.
    """
    base = column.base_type
    if base.startswith("_") and column.category == "A":
        element = attrs.evolve(
            column,
            base_type=base[1:],
            category=column.element_category or "S",
            type_name=column.type_name.removesuffix("[]"),
        )
        return pa.list_(arrow_type(element))
    if base in _STRINGS or column.category == "E":  # enums: their labels
        return pa.string()
    if base in _SCALARS:
        return _SCALARS[base]
    if base == "numeric":
        match = _NUMERIC.fullmatch(column.type_name.replace(" ", ""))
        if match and int(match.group(1)) <= 38:
            return pa.decimal128(int(match.group(1)), int(match.group(2)))
        return pa.string()  # unconstrained or wider than Arrow's decimal128: exact text
    raise SinkConfigurationError(
        f"column {column.name!r} is of type {column.type_name}, which PostgresCdcSource "
        "cannot map to an Arrow type (it reads booleans, integers, floats, numeric, text "
        "types, uuid, json, enums, network addresses, xml, bytea, date, time, "
        "timestamp[tz], interval, domains over these and arrays of these); leave it out with "
        "columns=[...]"
    )


@final
@attrs.frozen
class Change:
    """One row change: its operation, its new values, and its old values when sent.

    ``whole_old``: the old values are the whole row (``REPLICA IDENTITY FULL``), not
    only the old key (whose other columns come as null).
    """

    op: str
    new: tuple[Value, ...] | None
    old: tuple[Value, ...] | None
    whole_old: bool = False


@final
@attrs.frozen
class Transaction:
    """One committed transaction's changes to the table, positioned by its commit's end."""

    end_lsn: int
    changes: tuple[Change, ...]


_U8: Final = struct.Struct("!B")
_I16: Final = struct.Struct("!h")
_I32: Final = struct.Struct("!i")
_U32: Final = struct.Struct("!I")
_U64: Final = struct.Struct("!Q")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 1  # past the message type

    def take(self, kind: struct.Struct) -> int:
        (value,) = kind.unpack_from(self.data, self.at)
        self.at += kind.size
        return int(value)

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        text = self.data[self.at : end].decode()
        self.at = end + 1
        return text

    def tuple(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.take(_I16)):
            kind = self.data[self.at : self.at + 1]
            self.at += 1
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(False)
            elif kind == b"t":
                size = self.take(_I32)
                values.append(self.data[self.at : self.at + size])
                self.at += size
            else:
                raise ValueError(f"pgoutput tuple column of unknown kind {kind!r}")
        return tuple(values)


@final
@attrs.frozen
class _Relation:
    schema: str
    name: str
    columns: tuple[tuple[str, int, int], ...]  # (name, type oid, type modifier)
    identity: str  # replica identity: d(efault), n(othing), f(ull), i(ndex)


def _relation(reader: _Reader) -> tuple[int, _Relation]:
    oid = reader.take(_U32)
    namespace, name = reader.string(), reader.string()
    identity = chr(reader.take(_U8))
    found = []
    for _ in range(reader.take(_I16)):
        reader.take(_U8)  # flags: part of the key
        column = reader.string()
        found.append((column, reader.take(_U32), reader.take(_I32)))
    return oid, _Relation(namespace, name, tuple(found), identity)


def _change(kind: bytes, reader: _Reader) -> Change:
    old = new = None
    marker = reader.data[reader.at : reader.at + 1]
    reader.at += 1
    if marker in (b"K", b"O"):
        old = reader.tuple()
        if kind == b"U":
            reader.at += 1  # 'N'
            new = reader.tuple()
    else:
        new = reader.tuple()
    op = {b"I": "insert", b"U": "update", b"D": "delete"}[kind]
    return Change(op, new, old, whole_old=marker == b"O")


def _truncated(reader: _Reader) -> set[int]:
    reader.take(_I32)
    reader.take(_U8)
    return {reader.take(_U32) for _ in range((len(reader.data) - reader.at) // 4)}


_COUNTED: Final = {
    b"I": Change("insert", None, None),
    b"U": Change("update", None, None),
    b"D": Change("delete", None, None),
}


def transactions(
    messages: Iterable[bytes],
    schema: str,
    table: str,
    columns: Sequence[tuple[str, int, int]],
    *,
    values: bool = True,
    oid: int | None = None,
    full_identity: bool = False,
) -> Iterator[Transaction]:
    """The committed transactions in ``messages``, with their changes to ``schema.table``.

    A transaction that changed nothing of the table still comes (with no changes):
    it moves the position. ``columns`` are the table's columns as the source was
    made with them (name, type oid, type modifier: ``numeric(12,4)`` is not
    ``numeric(10,2)``), ``oid`` the table's oid then (when given, a relation of the
    table's name with another oid, or of the table's oid with another name, is an
    error: the table was dropped and made again, or renamed). With
    ``values=False`` the changes carry no values (counting them is all the driver's
    cut needs). With ``full_identity`` (``before=True``) the table must keep
    ``REPLICA IDENTITY FULL``, without which its updates log no old row.

    Raises:
        SinkConfigurationError: The table's columns changed since the source was made
            (DDL is not followed), it was renamed or dropped and made again, or a
            TRUNCATE of the table was published.
    """
    changes: list[Change] = []
    ours: set[int] = set()
    for data in messages:
        kind = data[:1]
        reader = _Reader(data)
        if kind == b"B":
            changes = []
        elif kind == b"C":
            reader.take(_U8)  # flags
            reader.take(_U64)  # the commit record's start
            yield Transaction(reader.take(_U64), tuple(changes))
            changes = []
        elif kind == b"R":
            relid, relation = _relation(reader)
            named = (relation.schema, relation.name) == (schema, table)
            if oid is not None and named != (relid == oid):
                what = (
                    f"was renamed to {relation.schema}.{relation.name}"
                    if relid == oid
                    else "was dropped and created again (or another table took its name)"
                )
                raise SinkConfigurationError(
                    f"table {schema}.{table} {what} since the source was made; "
                    "PostgresCdcSource does not follow DDL: start a new query (new source_id) "
                    "on the table as it is now, and reload the target"
                )
            if named:
                if relation.columns != tuple(columns):
                    raise SinkConfigurationError(
                        f"table {schema}.{table} changed since the source was made: its "
                        f"columns were {list(columns)}, the WAL now has "
                        f"{list(relation.columns)} (name, type oid, type modifier). "
                        "PostgresCdcSource does "
                        "not follow DDL; start a new query (new source_id) after a schema change"
                    )
                if full_identity and relation.identity != "f":
                    raise SinkConfigurationError(
                        f"table {schema}.{table} no longer has REPLICA IDENTITY FULL (now "
                        f"{relation.identity!r}), which before=True needs: its updates and "
                        "deletes since log no whole old row. Set it again (ALTER TABLE ... "
                        "REPLICA IDENTITY FULL) and start a new query (new source_id), or "
                        "read without before"
                    )
                ours.add(relid)
            else:
                ours.discard(relid)
        elif kind in (b"I", b"U", b"D"):
            if reader.take(_U32) in ours:  # else another table of the publication
                changes.append(_change(kind, reader) if values else _COUNTED[kind])
        elif kind == b"T" and _truncated(reader) & ours:
            raise SinkConfigurationError(
                f"table {schema}.{table} was truncated, and a TRUNCATE is not a row change "
                "PostgresCdcSource can emit: the rows it removed would stay downstream. Start "
                "a new query (new source_id, snapshot=True) to read the table afresh; or, to "
                "ignore truncates on purpose, read through a publication that does not "
                "publish them (CREATE PUBLICATION ... WITH (publish = 'insert, update, "
                "delete'))"
            )
        # 'O' (origin), 'Y' (type), 'M' (message): nothing to emit


class TupleDecoder:
    """Turns a change's text values into Python values of its columns' Arrow types."""

    def __init__(
        self,
        connection: psycopg.Connection[Any],
        names: Sequence[str],
        oids: Sequence[int],
        types: Sequence[pa.DataType],
        wanted: Iterable[int] | None = None,
    ) -> None:
        import psycopg  # noqa: PLC0415  # optional extra
        from psycopg import pq  # noqa: PLC0415  # optional extra

        self._data_error = psycopg.DataError
        self.names = list(names)
        self._wanted = None if wanted is None else frozenset(wanted)
        """The indexes of the columns read; the others come as null, never decoded."""
        self._loaders: list[Any] = []
        for oid, kind in zip(oids, types, strict=True):
            if pa.types.is_string(kind):
                self._loaders.append(None)
                continue
            if pa.types.is_duration(kind):
                self._loaders.append(IntervalLoader())
                continue
            if pa.types.is_list(kind) and pa.types.is_duration(kind.value_type):
                texts = connection.adapters.get_loader(_TEXT_ARRAY, pq.Format.TEXT)
                assert texts is not None  # psycopg loads text[] always
                self._loaders.append(IntervalArrayLoader(texts(_TEXT_ARRAY, connection)))
                continue
            # uuid[], json[], numeric[] ...: the elements' text, as the scalars are read
            # (their own loaders would make UUIDs, dicts, Decimals)
            texts = pa.types.is_list(kind) and pa.types.is_string(kind.value_type)
            parse_as = _TEXT_ARRAY if texts else oid
            loader = connection.adapters.get_loader(parse_as, pq.Format.TEXT)
            if loader is None:  # pragma: no cover - every mapped type has a loader
                raise SinkConfigurationError(f"psycopg has no text loader for type oid {oid}")
            self._loaders.append(loader(parse_as, connection))

    def values(self, text: tuple[Value, ...], *, op: str) -> list[Any]:
        """The values of ``text`` (``None`` stays null).

        Raises:
            SinkConfigurationError: A value was not sent (an unchanged TOAST value of
                an update without REPLICA IDENTITY FULL).
            UnreadableValueError: A value has no value of its column's type in Python
                (an infinite timestamp or date, ``24:00:00``); the message names the column.
        """
        out: list[Any] = []
        for index, (name, loader, value) in enumerate(
            zip(self.names, self._loaders, text, strict=True)
        ):
            if value is None or (self._wanted is not None and index not in self._wanted):
                out.append(None)
            elif value is False:
                raise SinkConfigurationError(
                    f"an {op} did not carry column {name!r}: an unchanged large (TOASTed) "
                    "value is not logged unless the table has REPLICA IDENTITY FULL. Set it "
                    "so that later updates log whole rows; this change stays unreadable with "
                    "the column: leave the column out (columns=[...]) to read past it, or "
                    "start over under a new source_id"
                )
            elif loader is None:
                out.append(bytes(value).decode())
            else:
                try:
                    out.append(loader.load(value))
                except (ValueError, OverflowError, self._data_error) as error:
                    raise UnreadableValueError(
                        f"column {name!r}: the value {bytes(value)[:80]!r} has no value of "
                        f"the column's Arrow type ({type(error).__name__}: {error})"
                    ) from error
        return out

    def merge(self, change: Change) -> tuple[Value, ...]:
        """The new values, unchanged TOAST values taken from the whole old row if it came.

        An old key alone (an update of the key without ``REPLICA IDENTITY FULL``) has
        the other columns null, not their values: those stay unsent (`values` names them).
        """
        new, old = change.new, change.old
        assert new is not None
        if old is None or not change.whole_old or False not in new:
            return new
        return tuple(o if n is False else n for n, o in zip(new, old, strict=True))
