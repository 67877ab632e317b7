"""`RedisSink`: at-least-once, idempotent writes to Redis through the async sink base."""

from __future__ import annotations

import urllib.parse
from collections.abc import Collection, Mapping
from typing import Any, Final, final

import attrs

from reference_sinks._arrow_types import check_columns_on_driver
from reference_sinks._json_values import Encoder
from reference_sinks._urls import masked_url
from reference_sinks.redis._modes import (
    RedisMode,
    StreamMode,
    check_mode,
    column_encoders,
    uses_columns,
)
from reference_sinks.redis._writer import RedisWriter
from sinkv2 import SinkWriter, SupportsPreWriteTopology, WriterInitContext
from sinkv2.asyncsink import AsyncSinkBase, AsyncSinkWriterConfiguration, BufferedRequestState
from sinkv2.errors import SinkConfigurationError

__all__ = ["DEFAULT_CONFIGURATION", "RedisSink"]

DEFAULT_CONFIGURATION: Final = AsyncSinkWriterConfiguration(
    max_batch_size=1_000,
    max_in_flight_requests=4,
    max_buffered_requests=10_000,
    max_time_in_buffer_ms=1_000,
    request_timeout_ms=30_000,
)
"""Hints for a nearby Redis: big pipelines, few in flight, a 30 s request timeout."""

_SCHEMES: Final = ("redis", "rediss", "unix")


def _entry_key(entry: list[Any]) -> bytes:
    """The ordering key of a request entry: its Redis key (a module function: it pickles)."""
    key: bytes = entry[0]
    return key


@final
@attrs.frozen
class _Converter:
    """The element converter: the mode's ``to_entry``, with the columns spelled by type.

    ``encoders`` (column -> encoder, from `column_encoders`) is ``None`` without an
    input schema; then values are encoded by their Python type.
    """

    mode: RedisMode
    encoders: Mapping[str, Encoder] | None = None

    def apply(self, element: Mapping[str, Any], context: SinkWriter.Context) -> list[Any]:
        encoders = self.encoders
        if not encoders or type(element) is not dict:
            return self.mode.to_entry(element)
        encoded = dict(element)
        for name, encode in encoders.items():
            value = encoded.get(name)
            if value is not None:
                encoded[name] = encode(value)
        return self.mode.to_entry(element, encoded)


def _check_url(url: object) -> str:
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in _SCHEMES:
        raise SinkConfigurationError(
            f"RedisSink url must be a redis://, rediss:// or unix:// URL (got {url!r} of type "
            f"{type(url).__name__}); e.g. 'redis://127.0.0.1:6379/0'. It writes to one Redis "
            "server: for Redis Sentinel or Cluster, point it at the primary (or a proxy)"
        )
    return url


def _check_client_options(options: object) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise SinkConfigurationError(
            f"RedisSink client_options must be a mapping of keyword -> value for "
            f"redis.asyncio.from_url (got {options!r} of type {type(options).__name__}); "
            "e.g. {'socket_timeout': 5}"
        )
    if "connection_pool" in options:
        raise SinkConfigurationError(
            "RedisSink client_options must not set connection_pool (got "
            f"{type(options['connection_pool']).__name__}): writers make their own connections "
            "from url. Redis Sentinel and Cluster pools are not supported; point url at the "
            "primary (or a proxy)"
        )
    return dict(options)


def _key_order(mode: RedisMode, keep_key_order: object) -> bool:
    if keep_key_order is None:
        return not (isinstance(mode, StreamMode) and mode.id is None)
    if not isinstance(keep_key_order, bool):
        raise SinkConfigurationError(
            f"RedisSink keep_key_order must be True, False or None (got {keep_key_order!r} "
            f"of type {type(keep_key_order).__name__}); None picks the mode's default"
        )
    if not keep_key_order and isinstance(mode, StreamMode) and mode.id is not None:
        raise SinkConfigurationError(
            "RedisSink keep_key_order=False cannot go with StreamMode(id=...): Redis refuses "
            "stream ids out of order, so entries of one stream must not overtake each other. "
            "Drop keep_key_order, or let Redis assign ids (id=None)"
        )
    return keep_key_order


@final
class RedisSink(
    AsyncSinkBase[Mapping[str, Any], list[Any]], SupportsPreWriteTopology[Mapping[str, Any]]
):
    """Writes each element to Redis as ``SET``, ``HSET`` or ``XADD``: at least once.

    Configured, not subclassed. Each writer sends batches as pipelines (one round
    trip per batch, several batches in flight), retries what failed, and keeps the
    entries it has not delivered in its checkpoint state. A re-delivered ``SET`` or
    ``HSET`` writes the same value again, so re-delivery after a retry or a restart
    is harmless; see `StreamMode` for streams.

    Per-key order: with ``keep_key_order`` (the default, except for streams with
    ids assigned by Redis) at most one entry per key is in flight and retries keep
    input order, so the last element of a key is the one Redis keeps. Turn it off
    for keys that are written once, to skip the bookkeeping.

    Args:
        url: ``redis://host:port/db``, ``rediss://`` (TLS) or ``unix://path``; may carry
            a user and password.
        mode: `SetMode`, `HashMode` or `StreamMode`.
        configuration: The buffering hints; defaults to `DEFAULT_CONFIGURATION`. Leave
            its ``ordering_key`` unset: the sink sets it from ``keep_key_order``.
        keep_key_order: ``None`` (the mode's default), ``True`` or ``False``.
        client_options: Keyword arguments of ``redis.asyncio.from_url``
            (``socket_timeout``, ``ssl_ca_certs``...). ``retry`` defaults to none: the
            async base does the retrying.

    Raises:
        SinkConfigurationError: an argument is invalid (checked here, on the driver).
    """

    def __init__(
        self,
        url: str,
        mode: RedisMode,
        *,
        configuration: AsyncSinkWriterConfiguration | None = None,
        keep_key_order: bool | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = _check_url(url)
        self.mode = check_mode(mode)
        self.client_options = _check_client_options(client_options)
        if configuration is None:
            configuration = DEFAULT_CONFIGURATION
        if not isinstance(configuration, AsyncSinkWriterConfiguration):
            raise SinkConfigurationError(
                "RedisSink configuration must be an AsyncSinkWriterConfiguration (got "
                f"{configuration!r} of type {type(configuration).__name__})"
            )
        if configuration.ordering_key is not None:
            raise SinkConfigurationError(
                "RedisSink sets the configuration's ordering_key itself (to the Redis key) "
                f"(got ordering_key={configuration.ordering_key!r}); leave it unset and "
                "pass keep_key_order=True or False"
            )
        self.keep_key_order = _key_order(self.mode, keep_key_order)
        if self.keep_key_order:
            configuration = attrs.evolve(configuration, ordering_key=_entry_key)
        super().__init__(_Converter(self.mode), configuration)

    def add_pre_write_topology(self, input: Any) -> Any:
        """``input`` unchanged, once its column types are checked (on the driver).

        When the mode stores the columns, a column whose type has no spelling in
        Redis is refused here, before any Spark job, as the writers would refuse it.

        Raises:
            SinkConfigurationError: a column's type has no spelling in Redis (a
                day-time interval); the message names the column and its Spark type.
        """
        if uses_columns(self.mode):
            check_columns_on_driver(input, lambda schema: column_encoders(self.mode, schema))
        return input

    def restore_writer(
        self,
        context: WriterInitContext,
        recovered_state: Collection[BufferedRequestState[list[Any]]],
    ) -> RedisWriter:
        """A writer whose buffer starts with the recovered entries.

        With an input schema (on Spark) and the mode's default value or fields, the
        columns are spelled by their types (`column_encoders`).

        Raises:
            ImportError: redis-py is not installed (the message has the install line).
            SinkConfigurationError: a column's type has no spelling in Redis (before
                any element is converted).
        """
        converter = self.element_converter
        schema = context.get_input_schema()
        encoders = None
        if schema is not None and uses_columns(self.mode):
            encoders = column_encoders(self.mode, schema)
            converter = _Converter(self.mode, encoders)
        return RedisWriter(
            converter,  # type: ignore[arg-type]  # always a _Converter here
            context,
            self.configuration,
            recovered_state,
            url=self.url,
            mode=self.mode,
            client_options=self.client_options,
            encoders=encoders,
        )

    def __repr__(self) -> str:
        return (
            f"RedisSink({masked_url(self.url)!r}, {self.mode!r}, "
            f"keep_key_order={self.keep_key_order})"
        )
