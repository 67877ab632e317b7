"""Which failures an async sink retries, and what happens to entries it gives up on.

Flink's ``FatalExceptionClassifier.isFatal`` returns ``True`` for errors that are
*not* fatal (its users say so in their code); here the answer is a value that says
what it means: `ErrorVerdict.RETRYABLE` or `ErrorVerdict.FATAL`.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Generic, TypeVar, final

import attrs

from sinkv2.errors import FatalDestinationError, RetryableError

__all__ = ["DeadLetter", "ErrorVerdict", "default_error_verdict"]

RequestEntryT = TypeVar("RequestEntryT")


class ErrorVerdict(enum.Enum):
    """What to do about an error raised by ``submit_request_entries``."""

    RETRYABLE = "retryable"
    """Send the batch again later; each entry spends one retry."""
    FATAL = "fatal"
    """Fail the writer; retrying cannot help."""


def default_error_verdict(error: BaseException) -> ErrorVerdict:
    """The classification every async writer starts from.

    Retryable: `RetryableError` (and `ThrottledError`), connection and other OS
    errors, timeouts. Fatal: `FatalDestinationError` and everything else - a
    ``TypeError`` or ``KeyError`` in the sink's own code does not heal by retrying.
    """
    if isinstance(error, FatalDestinationError):
        return ErrorVerdict.FATAL
    if isinstance(error, RetryableError | OSError | TimeoutError | asyncio.TimeoutError):
        return ErrorVerdict.RETRYABLE
    return ErrorVerdict.FATAL


@final
@attrs.frozen
class DeadLetter(Generic[RequestEntryT]):
    """An entry the writer gives up on, handed to the dead-letter hook.

    Attributes:
        request_entry: The entry.
        attempts: How many times sending it failed.
        reason: Why it is undeliverable, in words (the last error, or its size).
        error: The last error, if there was one.
    """

    request_entry: RequestEntryT
    attempts: int
    reason: str
    error: BaseException | None = None
