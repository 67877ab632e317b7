"""Stream entries as Arrow rows: the declared fields parsed from Redis' strings.

A stream entry is an id and field -> value pairs, every value a byte string.
`EntryRows` turns the entries of one key into one Arrow batch of the produced
type: the key column, the id column, then each declared field, parsed to its
declared type by Arrow's cast from string (``"42"`` -> int64, ``"true"`` ->
bool, ``"2024-01-01T00:00:00Z"`` -> timestamp...). Fields an entry has but the
schema does not declare are ignored; a declared field an entry lacks is null.

The whole batch is cast at once; only when that fails is it searched for the
first value that does not parse, so the error names the key, the entry id, the
field and the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, final

import pyarrow as pa

from sinkv2.errors import SinkConfigurationError, SinkV2Error

__all__ = ["EntryRows", "StreamEntryError", "produced_schema"]

_AS_IS: Final = (pa.binary(), pa.large_binary())

Entry = tuple[bytes, dict[bytes, bytes]]
"""One entry as redis-py returns it: ``(id, {field: value})``, all bytes."""


class StreamEntryError(SinkV2Error, ValueError):
    """A stream entry does not fit the declared schema (a missing or unparsable field).

    Attributes:
        key: The stream's key.
        entry_id: The entry's id.
        field: The field's name.
    """

    def __init__(self, message: str, *, key: str, entry_id: str, field: str) -> None:
        super().__init__(message)
        self.key = key
        self.entry_id = entry_id
        self.field = field


def _castable(field: pa.Field) -> None:
    if field.type in _AS_IS:
        return
    try:
        pa.array([], pa.string()).cast(field.type)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as error:
        raise SinkConfigurationError(
            f"RedisStreamSource cannot parse field {field.name!r} as {field.type}: stream "
            f"values are strings, and Arrow has no cast from string to {field.type} "
            f"({error}). Declare it as a string, a number, a bool, a date, a timestamp "
            "or a decimal, or as binary to keep the bytes"
        ) from None


def produced_schema(fields: object, key_column: str, id_column: str) -> pa.Schema:
    """The produced type: ``key_column`` and ``id_column`` (strings, not null), then ``fields``.

    Raises:
        SinkConfigurationError: ``fields`` is not a schema (or a list of fields), a
            column name is used twice, or a field's type cannot be parsed from a string.
    """
    if isinstance(fields, pa.Schema):
        schema = fields
    else:
        try:
            schema = pa.schema(fields)
        except (TypeError, ValueError, pa.ArrowInvalid) as error:
            raise SinkConfigurationError(
                f"RedisStreamSource fields must be a pyarrow.Schema (or a list of "
                f"pyarrow fields) declaring each stream field to read (got {fields!r} of type "
                f"{type(fields).__name__}: {error}); e.g. "
                "pa.schema([('user', pa.string()), ('amount', pa.float64())])"
            ) from None
    for name, what in ((key_column, "key_column"), (id_column, "id_column")):
        if not isinstance(name, str) or not name:
            raise SinkConfigurationError(
                f"RedisStreamSource {what} must be a non-empty str (got {name!r})"
            )
    names = [key_column, id_column, *schema.names]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise SinkConfigurationError(
            f"RedisStreamSource columns must have distinct names, and {clashes} is used "
            f"twice (key_column={key_column!r}, id_column={id_column!r}, fields "
            f"{schema.names}); rename the field, or pass another key_column or id_column"
        )
    for field in schema:
        _castable(field)
    return pa.schema(
        [
            pa.field(key_column, pa.string(), nullable=False),
            pa.field(id_column, pa.string(), nullable=False),
            *schema,
        ]
    )


@final
class EntryRows:
    """Builds batches of the produced type from one key's entries.

    Args:
        schema: The produced type (`produced_schema`).
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._fields = [(field, field.name.encode()) for field in list(schema)[2:]]

    def batch(self, key: str, entries: Sequence[Entry]) -> pa.RecordBatch:
        """The entries of ``key`` as one batch, in order.

        Raises:
            StreamEntryError: A field is missing where the schema says not null, or its
                value does not parse as the declared type.
        """
        ids = [entry_id.decode("ascii") for entry_id, _ in entries]
        columns: list[pa.Array] = [
            pa.array([key] * len(entries), pa.string()),
            pa.array(ids, pa.string()),
        ]
        for field, raw_name in self._fields:
            raw = [values.get(raw_name) for _, values in entries]
            columns.append(self._column(key, ids, field, raw))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _column(
        self, key: str, ids: list[str], field: pa.Field, raw: list[bytes | None]
    ) -> pa.Array:
        if not field.nullable and None in raw:
            at = raw.index(None)
            raise StreamEntryError(
                f"entry {ids[at]} of stream {key!r} has no field {field.name!r}, which the "
                "schema declares not null; declare the field nullable, or add it to every "
                "entry",
                key=key,
                entry_id=ids[at],
                field=field.name,
            )
        array = pa.array(raw, pa.binary())
        if field.type in _AS_IS:
            return array.cast(field.type)
        try:
            return array.cast(pa.string()).cast(field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise self._first_bad(key, ids, field, raw) from error

    @staticmethod
    def _first_bad(
        key: str, ids: list[str], field: pa.Field, raw: Iterable[bytes | None]
    ) -> StreamEntryError:
        for entry_id, value in zip(ids, raw, strict=True):
            if value is None:
                continue
            try:
                pa.array([value], pa.binary()).cast(pa.string()).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                instead = (
                    "as binary and decode it"
                    if pa.types.is_string(field.type)
                    else "as a string (or binary) and parse it"
                )
                return StreamEntryError(
                    f"entry {entry_id} of stream {key!r}: field {field.name!r} = {value!r} "
                    f"does not parse as {field.type} ({error}); fix the entry, or declare "
                    f"the field {instead} downstream",
                    key=key,
                    entry_id=entry_id,
                    field=field.name,
                )
        return StreamEntryError(  # pragma: no cover - the batch failed, so one value does
            f"stream {key!r}: field {field.name!r} does not parse as {field.type}",
            key=key,
            entry_id=ids[0] if ids else "",
            field=field.name,
        )
