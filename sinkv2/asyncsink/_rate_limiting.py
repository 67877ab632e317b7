"""Rate limiting for async writers (Flink's ``RateLimitingStrategy``, AIMD congestion control)."""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar, final, runtime_checkable

import attrs

from sinkv2.errors import SinkConfigurationError

__all__ = [
    "AIMDScalingStrategy",
    "BasicRequestInfo",
    "BasicResultInfo",
    "CongestionControlRateLimitingStrategy",
    "RateLimitingStrategy",
    "RequestInfo",
    "ResultInfo",
    "ScalingStrategy",
]

T = TypeVar("T")


class RequestInfo(Protocol):
    """What the rate limiter is told about a request about to be sent."""

    def get_batch_size(self) -> int:
        """How many entries the request carries."""
        ...


class ResultInfo(Protocol):
    """What the rate limiter is told about a finished request."""

    def get_failed_messages(self) -> int:
        """How many of the request's entries failed (and will be retried)."""
        ...

    def get_batch_size(self) -> int:
        """How many entries the request carried."""
        ...


@final
@attrs.frozen
class BasicRequestInfo:
    """A plain `RequestInfo`."""

    batch_size: int

    def get_batch_size(self) -> int:
        """How many entries the request carries."""
        return self.batch_size


@final
@attrs.frozen
class BasicResultInfo:
    """A plain `ResultInfo`."""

    failed_messages: int
    batch_size: int

    def get_failed_messages(self) -> int:
        """How many of the request's entries failed."""
        return self.failed_messages

    def get_batch_size(self) -> int:
        """How many entries the request carried."""
        return self.batch_size


@runtime_checkable
class RateLimitingStrategy(Protocol):
    """Decides whether the writer may send another request now.

    The writer calls these on its own thread only. Strategies are stateful: each
    writer works on its own copy of the configured one.
    """

    def register_in_flight_request(self, request_info: RequestInfo) -> None:
        """A request was sent."""
        ...

    def register_completed_request(self, result_info: ResultInfo) -> None:
        """A request finished; ``get_failed_messages()`` of its entries will be retried."""
        ...

    def should_block(self, request_info: RequestInfo) -> bool:
        """``True`` if sending this request now would exceed the current limit."""
        ...

    def get_max_batch_size(self) -> int:
        """The largest batch the strategy admits now (it may shrink under congestion)."""
        ...


class ScalingStrategy(Protocol[T]):
    """How a limit grows after success and shrinks after failure."""

    def scale_up(self, current_rate: T) -> T:
        """The limit after a request without failures."""
        ...

    def scale_down(self, current_rate: T) -> T:
        """The limit after a request with failures."""
        ...


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SinkConfigurationError(
            f"{name!r} must be positive, an int >= 1 (got {value!r} of type "
            f"{type(value).__name__}); set it to at least 1"
        )


@final
@attrs.frozen(kw_only=True)
class AIMDScalingStrategy:
    """Additive increase, multiplicative decrease, as TCP does (Flink's ``AIMDScalingStrategy``).

    Attributes:
        rate_threshold: The limit never grows beyond this.
        increase_rate: Added after each request without failures (Flink: 10).
        decrease_factor: Multiplied in after a request with failures (Flink: 0.5).
    """

    rate_threshold: int
    increase_rate: int = 10
    decrease_factor: float = 0.5

    def __attrs_post_init__(self) -> None:
        _check_positive_int("rate_threshold", self.rate_threshold)
        _check_positive_int("increase_rate", self.increase_rate)
        factor = self.decrease_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor < 1:
            raise SinkConfigurationError(
                f"'decrease_factor' must be a number strictly between 0 and 1 (got "
                f"{factor!r} of type {type(factor).__name__}); 0.5 halves the limit on failure"
            )

    def scale_up(self, current_rate: int) -> int:
        """``current_rate + increase_rate``, at most ``rate_threshold``."""
        return min(current_rate + self.increase_rate, self.rate_threshold)

    def scale_down(self, current_rate: int) -> int:
        """``current_rate * decrease_factor`` rounded half up (Java's ``Math.round``), at least 1.

        Half up, not Python's half to even: halving 5, 9 and 21 gives 3, 5 and 11, as
        in Flink.
        """
        return max(1, math.floor(current_rate * self.decrease_factor + 0.5))


@final
class CongestionControlRateLimitingStrategy:
    """Limits requests in flight and entries in flight; the entry limit adapts (Flink's default).

    A request may be sent while fewer than ``max_in_flight_requests`` are out and
    the entries in flight plus its own stay within the current message limit. The
    limit starts at ``initial_max_in_flight_messages``, and the scaling strategy
    raises it after every request without failures and lowers it after one with
    failures (throttling included). The writer's batches shrink with it.

    Raises:
        SinkConfigurationError: at construction, when a limit is not a positive
            int or ``scaling_strategy`` lacks ``scale_up`` / ``scale_down`` (Flink's
            builder refuses the same).
    """

    def __init__(
        self,
        *,
        max_in_flight_requests: int,
        initial_max_in_flight_messages: int,
        scaling_strategy: ScalingStrategy[int],
    ) -> None:
        _check_positive_int("max_in_flight_requests", max_in_flight_requests)
        _check_positive_int("initial_max_in_flight_messages", initial_max_in_flight_messages)
        missing = [
            name
            for name in ("scale_up", "scale_down")
            if not callable(getattr(scaling_strategy, name, None))
        ]
        if missing:
            raise SinkConfigurationError(
                "'scaling_strategy' must be a ScalingStrategy with scale_up and scale_down "
                f"(got {scaling_strategy!r} of type {type(scaling_strategy).__name__}, which "
                f"lacks {', '.join(missing)}); pass AIMDScalingStrategy(rate_threshold=...) "
                "for Flink's default"
            )
        self.max_in_flight_requests = max_in_flight_requests
        self.max_in_flight_messages = initial_max_in_flight_messages
        self.scaling_strategy = scaling_strategy
        self.current_in_flight_requests = 0
        self.current_in_flight_messages = 0

    @classmethod
    def flink_default(
        cls, *, max_batch_size: int, max_in_flight_requests: int
    ) -> CongestionControlRateLimitingStrategy:
        """What Flink's ``AsyncSinkWriter`` builds when no strategy is configured."""
        return cls(
            max_in_flight_requests=max_in_flight_requests,
            initial_max_in_flight_messages=max_batch_size,
            scaling_strategy=AIMDScalingStrategy(
                rate_threshold=max_batch_size * max_in_flight_requests
            ),
        )

    def register_in_flight_request(self, request_info: RequestInfo) -> None:
        """Count the request and its entries as in flight."""
        self.current_in_flight_requests += 1
        self.current_in_flight_messages += request_info.get_batch_size()

    def register_completed_request(self, result_info: ResultInfo) -> None:
        """Release the request's slots and scale the message limit."""
        self.current_in_flight_requests = max(0, self.current_in_flight_requests - 1)
        self.current_in_flight_messages = max(
            0, self.current_in_flight_messages - result_info.get_batch_size()
        )
        if result_info.get_failed_messages() > 0:
            self.max_in_flight_messages = self.scaling_strategy.scale_down(
                self.max_in_flight_messages
            )
        else:
            self.max_in_flight_messages = self.scaling_strategy.scale_up(
                self.max_in_flight_messages
            )

    def should_block(self, request_info: RequestInfo) -> bool:
        """``True`` while the request slots or the message limit are used up."""
        return (
            self.current_in_flight_requests >= self.max_in_flight_requests
            or self.current_in_flight_messages + request_info.get_batch_size()
            > self.max_in_flight_messages
        )

    def get_max_batch_size(self) -> int:
        """The current message limit."""
        return self.max_in_flight_messages

    def __repr__(self) -> str:
        return (
            f"CongestionControlRateLimitingStrategy(in flight: {self.current_in_flight_requests}/"
            f"{self.max_in_flight_requests} requests, {self.current_in_flight_messages}/"
            f"{self.max_in_flight_messages} entries)"
        )
