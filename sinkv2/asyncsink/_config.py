"""The async sink's buffering hints (Flink's ``AsyncSinkWriterConfiguration``) and retry policy."""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from typing import Any, final

import attrs

from sinkv2.asyncsink._rate_limiting import RateLimitingStrategy
from sinkv2.errors import SinkConfigurationError

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "AsyncSinkWriterConfiguration", "ExponentialBackoff"]

DEFAULT_REQUEST_TIMEOUT_MS = 600_000
"""Flink's default request timeout: 10 minutes."""


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SinkConfigurationError(
            f"{attribute.name!r} must be a positive int (got {value!r} of type "
            f"{type(value).__name__}); set it to at least 1"
        )


def _non_negative_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise SinkConfigurationError(
            f"{attribute.name!r} must be a number >= 0 (got {value!r} of type "
            f"{type(value).__name__})"
        )


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _positive(instance, attribute, value)


def _is_bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise SinkConfigurationError(
            f"{attribute.name!r} must be True or False (got {value!r} of type "
            f"{type(value).__name__})"
        )


@final
@attrs.frozen(kw_only=True)
class ExponentialBackoff:
    """How long a retried entry waits before it is sent again (not in Flink).

    The n-th retry waits a random time in ``[0, min(max_ms, initial_ms * multiplier**(n-1))]``
    ("full jitter"): retries of many writers spread out instead of hitting a
    recovering destination at the same instant. A ``ThrottledError`` with a
    ``retry_after_ms`` waits at least that long.

    Attributes:
        initial_ms: The cap of the first retry's wait. ``0`` retries at once, as Flink does.
        max_ms: The largest wait.
        multiplier: How fast the cap grows per retry.
    """

    initial_ms: float = attrs.field(default=50, validator=_non_negative_number)
    max_ms: float = attrs.field(default=5_000, validator=_non_negative_number)
    multiplier: float = attrs.field(default=2.0, validator=_non_negative_number)

    def __attrs_post_init__(self) -> None:
        if self.multiplier < 1:
            raise SinkConfigurationError(
                f"'multiplier' must be >= 1 (got {self.multiplier!r}); 2.0 doubles the wait "
                "per retry"
            )
        if self.max_ms < self.initial_ms:
            raise SinkConfigurationError(
                f"'max_ms' must be >= 'initial_ms' (got max_ms={self.max_ms!r}, "
                f"initial_ms={self.initial_ms!r})"
            )

    def delay_ms(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        if self.initial_ms == 0:
            return 0.0
        cap = min(self.max_ms, self.initial_ms * self.multiplier ** min(retry - 1, 64))
        return rng.uniform(0, cap)


@final
@attrs.frozen(kw_only=True)
class AsyncSinkWriterConfiguration:
    """The buffering hints of an async sink writer, with Flink's names and checks.

    Every value is checked here, so a bad one fails when the sink is built, not on
    an executor. Flink's builder has no defaults; these are Flink's Kinesis
    connector's, a good start for a request/response service.

    Attributes:
        max_batch_size: Most entries in one ``submit_request_entries`` call.
        max_in_flight_requests: Most requests outstanding at once.
        max_buffered_requests: Entries buffered before ``write`` blocks (back
            pressure). Must be greater than ``max_batch_size``.
        max_batch_size_in_bytes: Buffered bytes that trigger a flush; no batch is
            larger. Must be at least ``max_record_size_in_bytes``.
        max_time_in_buffer_ms: The oldest buffered entry is sent at the latest
            this long after it arrived (a timer).
        max_record_size_in_bytes: Larger entries are undeliverable: they go to the
            dead-letter hook (Flink fails the job). Restored state holding a larger
            entry is refused when the writer is built, as in Flink.
        request_timeout_ms: How long a request may take before it counts as failed.
        fail_on_timeout: ``False`` (Flink's default): a timed-out batch is retried;
            ``True``: the writer fails with `RequestTimeoutError`.
        rate_limiting_strategy: Decides how many requests and entries may be in
            flight. Default: Flink's congestion control with AIMD scaling. Each
            writer works on its own copy.
        retry_backoff: The wait before a retried entry is sent again (not in Flink).
        max_retries_per_entry: Retries an entry may spend on failures before it is
            undeliverable; ``None`` retries forever, as Flink does. Throttling does
            not spend it (not in Flink).
        ordering_key: Keeps per-key order across retries when set (not in Flink,
            which reorders): entries with equal keys are sent in input order, the
            next one only after the previous one landed. The price: at most one
            entry per key in flight. A timed-out request may still land after its
            retry; order across timeouts holds only if the destination drops late
            requests.
    """

    max_batch_size: int = attrs.field(default=500, validator=_positive)
    max_in_flight_requests: int = attrs.field(default=50, validator=_positive)
    max_buffered_requests: int = attrs.field(default=10_000, validator=_positive)
    max_batch_size_in_bytes: int = attrs.field(default=5 * 1024 * 1024, validator=_positive)
    max_time_in_buffer_ms: int = attrs.field(default=5_000, validator=_positive)
    max_record_size_in_bytes: int = attrs.field(default=1024 * 1024, validator=_positive)
    request_timeout_ms: int = attrs.field(default=DEFAULT_REQUEST_TIMEOUT_MS, validator=_positive)
    fail_on_timeout: bool = attrs.field(default=False, validator=_is_bool)
    rate_limiting_strategy: RateLimitingStrategy | None = None
    retry_backoff: ExponentialBackoff = attrs.field(
        factory=ExponentialBackoff, validator=attrs.validators.instance_of(ExponentialBackoff)
    )
    max_retries_per_entry: int | None = attrs.field(default=10, validator=_optional_positive)
    ordering_key: Callable[[Any], Hashable] | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_buffered_requests <= self.max_batch_size:
            raise SinkConfigurationError(
                "'max_buffered_requests' must be greater than 'max_batch_size' (got "
                f"max_buffered_requests={self.max_buffered_requests}, max_batch_size="
                f"{self.max_batch_size}); a full buffer must hold more than one batch"
            )
        if self.max_batch_size_in_bytes < self.max_record_size_in_bytes:
            raise SinkConfigurationError(
                "'max_batch_size_in_bytes' must be >= 'max_record_size_in_bytes' (got "
                f"max_batch_size_in_bytes={self.max_batch_size_in_bytes}, "
                f"max_record_size_in_bytes={self.max_record_size_in_bytes}); the largest "
                "record must fit in a batch"
            )
        if self.ordering_key is not None and not callable(self.ordering_key):
            raise SinkConfigurationError(
                f"'ordering_key' must be a function of a request entry (got "
                f"{self.ordering_key!r} of type {type(self.ordering_key).__name__})"
            )
        strategy = self.rate_limiting_strategy
        if strategy is not None:
            missing = [
                name
                for name in (
                    "register_in_flight_request",
                    "register_completed_request",
                    "should_block",
                    "get_max_batch_size",
                )
                if not callable(getattr(strategy, name, None))
            ]
            if missing:
                raise SinkConfigurationError(
                    f"'rate_limiting_strategy' must implement RateLimitingStrategy; "
                    f"{type(strategy).__name__} lacks {', '.join(missing)}"
                )
