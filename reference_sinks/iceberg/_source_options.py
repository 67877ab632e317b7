"""`IcebergSource` from Spark's string options: ``.option("source", "iceberg")``."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Final

from reference_sinks.iceberg._catalog import local_catalog
from reference_sinks.iceberg._source import IcebergSource, StartingPoint
from sinkv2.errors import SinkConfigurationError

__all__ = ["iceberg_source_from_options"]

_KNOWN: Final = (
    "table",
    "warehouse",
    "catalog_name",
    "snapshot_id",
    "as_of",
    "ref",
    "row_filter",
    "selected_fields",
    "case_sensitive",
    "batch_rows",
    "monitor_interval",
    "start",
    "skip_overwrites",
)
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _int(name: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise SinkConfigurationError(
            f"the {name!r} option must be an integer (got {raw!r})"
        ) from None


def _time(name: str, raw: str, expected: str) -> dt.datetime:
    """An ISO time with its zone, or an error naming the option."""
    try:
        moment = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise SinkConfigurationError(
            f"the {name!r} option must be {expected}an ISO time with its zone such as "
            f"'2024-03-30T10:00:00+00:00' (got {raw!r})"
        )
    return moment


def _start(raw: str | None) -> StartingPoint:
    if raw is None:
        return "table"
    text = raw.strip().lower()
    if text in ("table", "earliest", "latest"):
        return text  # type: ignore[return-value]  # one of the literals, checked
    if text.lstrip("-").isdigit():
        return int(text)
    return _time("start", raw, "'table', 'earliest', 'latest', a snapshot id or ")


def _interval(raw: str) -> float:
    try:
        interval = float(raw)
    except ValueError:
        interval = math.nan
    if not 0 < interval < math.inf:
        raise SinkConfigurationError(
            f"the 'monitor_interval' option must be a positive, finite number of seconds, "
            f"e.g. '10' (got {raw!r})"
        )
    return interval


def iceberg_source_from_options(
    *,
    table: str | None = None,
    warehouse: str | None = None,
    catalog_name: str | None = None,
    snapshot_id: str | None = None,
    as_of: str | None = None,
    ref: str | None = None,
    row_filter: str | None = None,
    selected_fields: str | None = None,
    case_sensitive: str | None = None,
    batch_rows: str | None = None,
    monitor_interval: str | None = None,
    start: str | None = None,
    skip_overwrites: str | None = None,
    **catalog_options: str,
) -> IcebergSource:
    """An `IcebergSource` from Spark's string options.

    ``table`` is required. The catalog: ``warehouse`` (the embedded `local_catalog`),
    or ``catalog.<property>`` options (pyiceberg's ``load_catalog(catalog_name,
    **properties)``, e.g. ``catalog.uri``, ``catalog.type``). ``selected_fields`` is
    comma-separated; ``as_of`` is an ISO time with its zone. ``monitor_interval``
    (seconds) makes the source continuous;
    ``start`` and ``skip_overwrites`` go with it.

    Raises:
        SinkConfigurationError: A missing or bad option, named.
    """
    if not table:
        raise SinkConfigurationError(
            "the iceberg source needs the 'table' option; e.g. .option('table', 'db.events')"
        )
    unknown = [key for key in catalog_options if not key.startswith("catalog.")]
    if unknown:
        raise SinkConfigurationError(
            f"the iceberg source does not know the options {sorted(unknown)}; it takes "
            f"{', '.join(_KNOWN)}, and catalog properties spelled 'catalog.<property>'"
        )
    properties = {key.removeprefix("catalog."): value for key, value in catalog_options.items()}
    catalog: Any
    if warehouse is not None:
        if properties:
            raise SinkConfigurationError(
                "the iceberg source takes 'warehouse' (the local catalog) or 'catalog.*' "
                "options, not both"
            )
        catalog = local_catalog(warehouse, name=catalog_name or "sinkv2")
    elif properties:
        from pyiceberg.catalog import load_catalog  # noqa: PLC0415  # optional extra

        try:
            catalog = load_catalog(catalog_name or "default", **properties)
        except (ValueError, NotImplementedError, ImportError) as error:
            raise SinkConfigurationError(
                f"the iceberg source's catalog options {sorted(catalog_options)} do not make a "
                f"pyiceberg catalog: {error}; set e.g. 'catalog.type' and 'catalog.uri', or use "
                "'warehouse' for the local catalog"
            ) from error
    else:
        raise SinkConfigurationError(
            "the iceberg source needs a catalog: .option('warehouse', '/data/warehouse') for "
            "the local catalog, or 'catalog.<property>' options such as 'catalog.uri'"
        )
    flag = {"case_sensitive": case_sensitive, "skip_overwrites": skip_overwrites}
    flags = {}
    for name, raw in flag.items():
        if raw is not None and raw.strip().lower() not in _TRUE + _FALSE:
            raise SinkConfigurationError(f"the {name!r} option must be true or false (got {raw!r})")
        flags[name] = raw is not None and raw.strip().lower() in _TRUE
    fields = None
    if selected_fields is not None:
        fields = [name.strip() for name in selected_fields.split(",") if name.strip()]
    rows = _int("batch_rows", batch_rows)
    source = IcebergSource(
        catalog,
        table,
        snapshot_id=_int("snapshot_id", snapshot_id),
        as_of=None if as_of is None else _time("as_of", as_of, ""),
        ref=ref,
        row_filter=row_filter,
        selected_fields=fields,
        case_sensitive=case_sensitive is None or flags["case_sensitive"],
        batch_rows=65_536 if rows is None else rows,
    )
    if monitor_interval is None:
        if start is not None or skip_overwrites is not None:
            raise SinkConfigurationError(
                "the options 'start' and 'skip_overwrites' are for a stream; add "
                ".option('monitor_interval', '<seconds>')"
            )
        return source
    return source.monitor_continuously(
        _interval(monitor_interval), start=_start(start), skip_overwrites=flags["skip_overwrites"]
    )
