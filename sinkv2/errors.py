"""Every error sinkv2 raises on purpose derives from one root, `SinkV2Error`.

The hierarchy is small and each leaf says what kind of mistake it is, so callers
can catch what they can handle and let the rest fail the job:

```text
SinkV2Error
├── SinkDefinitionError (TypeError)       a sink or writer does not implement what it claims
├── SinkConfigurationError (ValueError)   a setting has a bad value
├── SerializationError (ValueError)       bytes could not be written or read
│   ├── CorruptDataError                  truncated, garbled, or undecodable bytes
│   └── UnsupportedVersionError           bytes of a version the serializer cannot read
├── SinkWriterError                       a writer failed; the job failed and nothing was committed
├── DestinationError                      an async sink's destination said something about a request
│   ├── RetryableError                    raise it from submit_request_entries: retry the batch
│   │   └── ThrottledError                the destination asks to slow down (429, 503, Retry-After)
│   ├── FatalDestinationError             a request failed in a way retrying cannot fix
│   ├── RequestTimeoutError (TimeoutError) no answer in request_timeout_ms, fail_on_timeout set
│   └── UndeliverableEntriesError         out of retry budget or too large; no dead-letter hook
├── CommitError                           a commit did not complete; the job must fail
│   ├── CommitFailedError                 a committable failed with an unknown reason
│   └── CommitRetriesExhaustedError       committables still asked to retry after the budget
├── CommitStateError                      the commit state store refused an operation
│   ├── ConcurrentCommitError             another driver holds this sink id right now
│   └── StaleFencingTokenError            this driver was fenced off by a newer one
└── IllegalLifecycleError (RuntimeError)  a method was called out of its documented order
```

Builtin bases are mixed in where the meaning matches, so ``except TypeError`` still
catches a half-implemented sink and ``except ValueError`` still catches a bad setting.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

__all__ = [
    "CommitError",
    "CommitFailedError",
    "CommitRetriesExhaustedError",
    "CommitStateError",
    "ConcurrentCommitError",
    "CorruptDataError",
    "DestinationError",
    "FatalDestinationError",
    "IllegalLifecycleError",
    "RequestTimeoutError",
    "RetryableError",
    "SerializationError",
    "SinkConfigurationError",
    "SinkDefinitionError",
    "SinkV2Error",
    "SinkWriterError",
    "StaleFencingTokenError",
    "ThrottledError",
    "UndeliverableEntriesError",
    "UnsupportedVersionError",
]


class SinkV2Error(Exception):
    """Root of every error that sinkv2 raises on purpose."""


class SinkDefinitionError(SinkV2Error, TypeError):
    """A sink, writer or serializer does not implement the interfaces it claims.

    Raised before any data moves: by `inspect_sink` when a mixin is half
    implemented, and by the runtime when a writer returned by a sink lacks the
    methods the sink's mixins require.
    """


class SinkConfigurationError(SinkV2Error, ValueError):
    """A configuration value is out of range or of the wrong type."""


class SerializationError(SinkV2Error, ValueError):
    """Bytes could not be produced from, or turned back into, an object.

    Attributes:
        serializer: A description of the serializer involved.
    """

    def __init__(self, message: str, *, serializer: str) -> None:
        super().__init__(message)
        self.serializer = serializer


class CorruptDataError(SerializationError):
    """The bytes are truncated, have inconsistent framing, or the payload does not decode.

    Attributes:
        version: The version read from the framing, or ``None`` if even that was unreadable.
    """

    def __init__(self, message: str, *, serializer: str, version: int | None = None) -> None:
        super().__init__(message, serializer=serializer)
        self.version = version


class UnsupportedVersionError(SerializationError):
    """The bytes carry a version the serializer does not know how to read.

    Usually the bytes were written by a newer release of the sink than the one
    reading them, or an old version was dropped from the serializer's readers.

    Attributes:
        version: The version found in the bytes.
        supported: The versions the serializer says it can read.
    """

    def __init__(
        self, message: str, *, serializer: str, version: int, supported: Sequence[int]
    ) -> None:
        super().__init__(message, serializer=serializer)
        self.version = version
        self.supported = supported


class SinkWriterError(SinkV2Error):
    """A writer failed on an element, or while flushing or preparing its commit.

    The job failed before anything was committed, so nothing of it is visible.

    Attributes:
        subtask_id: The subtask (on Spark: the partition) whose writer failed.
        position: The 0-based position of the failing element within the subtask's
            input, or ``None`` if the failure was not in ``write``.
        worker_traceback: The last lines of the cause's traceback in the worker
            that ran the writer, if it ran in another process; also in the message.
    """

    def __init__(
        self,
        message: str,
        *,
        subtask_id: int,
        position: int | None,
        worker_traceback: str | None = None,
    ) -> None:
        if worker_traceback:
            message = f"{message}\n\nIn the writer's worker (last lines):\n{worker_traceback}"
        super().__init__(message)
        self.subtask_id = subtask_id
        self.position = position
        self.worker_traceback = worker_traceback


class DestinationError(SinkV2Error):
    """Root of what an async sink's destination reports about a request."""


class RetryableError(DestinationError):
    """Raise it from ``submit_request_entries`` when the whole batch should be retried.

    The entries go back to the head of the buffer, in their order, after a backoff;
    each retry spends one unit of every entry's retry budget.
    """


class ThrottledError(RetryableError):
    """The destination asks the writer to slow down (HTTP 429/503, a busy server).

    The batch is retried without spending the entries' retry budget (they are
    not at fault), no earlier than ``retry_after_ms`` when the destination said
    when, and the rate limiter scales down.

    Attributes:
        retry_after_ms: How long the destination asked to wait, if it said.
    """

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class FatalDestinationError(DestinationError):
    """A request failed in a way retrying cannot fix; the writer fails.

    Raised by the writer with the destination's error as ``__cause__`` when the
    error classifier calls an error fatal. Sink authors may raise it themselves
    from ``submit_request_entries`` to say so directly.
    """


class RequestTimeoutError(DestinationError, TimeoutError):
    """A request got no answer within ``request_timeout_ms`` and ``fail_on_timeout`` is set."""


class UndeliverableEntriesError(DestinationError):
    """Entries that can never be delivered, and no dead-letter hook took them.

    An entry becomes undeliverable when it used up its retry budget or is larger
    than ``max_record_size_in_bytes``.

    Attributes:
        dead_letters: The `sinkv2.asyncsink.DeadLetter` records: entry, attempts, reason.
    """

    def __init__(self, message: str, *, dead_letters: Sequence[Any]) -> None:
        super().__init__(message)
        self.dead_letters = tuple(dead_letters)


class CommitError(SinkV2Error):
    """Committing did not complete, and the job must fail rather than lose data.

    Committers must be idempotent, so re-running the failed commit later (after the
    cause is fixed) is always safe.

    Attributes:
        committables: The committables this error is about.
    """

    def __init__(self, message: str, *, committables: Collection[Any] = ()) -> None:
        super().__init__(message)
        self.committables = tuple(committables)


class CommitFailedError(CommitError):
    """A committable failed with an unknown reason, or the committer raised."""


class CommitRetriesExhaustedError(CommitError):
    """Committables still asked to be retried after the retry budget was spent.

    Attributes:
        retries: The number of retries that were made.
    """

    def __init__(self, message: str, *, committables: Collection[Any], retries: int) -> None:
        super().__init__(message, committables=committables)
        self.retries = retries


class CommitStateError(SinkV2Error):
    """The commit state store refused an operation; nothing was committed by it."""


class ConcurrentCommitError(CommitStateError):
    """Another driver is running this sink id right now.

    Two drivers must never commit the same sink's epochs at once; the second one
    fails before it writes anything. If the first one is dead, its lock is gone
    with its process and a re-run proceeds.
    """


class StaleFencingTokenError(CommitStateError):
    """A newer driver took over this sink id; this one must stop without committing."""


class IllegalLifecycleError(SinkV2Error, RuntimeError):
    """A lifecycle method was called in a state that does not allow it."""
