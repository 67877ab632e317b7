"""`AsyncSinkWriter`: FLIP-171's buffering, batching, retrying writer, with an asyncio core.

Over 450 lines because `AsyncSinkWriter` is FLIP-171's one class: buffering,
batching, rate limiting, retries and the mailbox are state of that one object, as in
Flink's ``AsyncSinkWriter``.

The writer's methods are synchronous and run on one thread (Flink's mailbox
thread, a Spark task's thread). Requests run as coroutines on the writer's own
event loop thread; when one finishes it posts its outcome to a queue (the
"mailbox"), and the writer thread applies outcomes between elements and while it
waits. So buffers, counters, the rate limiter and every hook a sink author
overrides run on the writer thread only, as in Flink; only
``submit_request_entries``, ``open_client`` and ``close_client`` run on the loop.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import copy
import heapq
import itertools
import logging
import queue
import random
import time
import weakref
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any, Generic, NamedTuple, NoReturn, Protocol, TypeVar

import attrs

from sinkv2._context import WriterInitContext
from sinkv2._text import describe
from sinkv2._time import ScheduledTimer
from sinkv2._watermark import Watermark
from sinkv2._writer import SinkWriter
from sinkv2.asyncsink._config import AsyncSinkWriterConfiguration, ExponentialBackoff
from sinkv2.asyncsink._loop import EventLoopThread
from sinkv2.asyncsink._rate_limiting import (
    BasicRequestInfo,
    BasicResultInfo,
    CongestionControlRateLimitingStrategy,
    RateLimitingStrategy,
)
from sinkv2.asyncsink._retry import DeadLetter, ErrorVerdict, default_error_verdict
from sinkv2.asyncsink._state import BufferedRequestState, RequestEntryWrapper
from sinkv2.errors import (
    FatalDestinationError,
    RequestTimeoutError,
    SinkConfigurationError,
    SinkDefinitionError,
    ThrottledError,
    UndeliverableEntriesError,
)

__all__ = ["AsyncSinkWriter", "ElementConverter"]

InputT = TypeVar("InputT")
InputT_contra = TypeVar("InputT_contra", contravariant=True)
RequestEntryT = TypeVar("RequestEntryT")
RequestEntryT_co = TypeVar("RequestEntryT_co", covariant=True)

_log = logging.getLogger("sinkv2.asyncsink")


class ElementConverter(Protocol[InputT_contra, RequestEntryT_co]):
    """Turns a stream element into a request entry (Flink's ``ElementConverter``).

    Optional: ``open(context: WriterInitContext) -> None``, called once when the
    writer is created. A plain function ``(element, context) -> entry`` works too.
    """

    def apply(self, element: InputT_contra, context: SinkWriter.Context) -> RequestEntryT_co:
        """The request entry for ``element``."""
        ...


class _Entry(NamedTuple):
    entry: Any
    size: int
    attempts: int
    key: Hashable


@attrs.define(eq=False)
class _Request:
    batch: list[_Entry]
    sent_at: float


class _Outcome(NamedTuple):
    request_id: int
    retry: Sequence[Any] | None
    error: BaseException | None
    timed_out: bool
    finished_at: float


_THROTTLED_BACKOFF = ExponentialBackoff()
"""The wait after throttling when ``retry_backoff`` would retry at once."""


class _SendTimeGauge:
    def __init__(self) -> None:
        self.value = 0

    def get_value(self) -> int:
        return self.value


class AsyncSinkWriter(abc.ABC, Generic[InputT, RequestEntryT]):
    """A writer that buffers request entries and sends them in batches, asynchronously.

    Implement (required):

    - ``async def submit_request_entries(self, request_entries) -> Sequence[entry]``:
      send one batch; return the entries that must be retried (empty when all
      landed). Raise to fail the whole batch: `RetryableError` (or a connection
      error, a timeout) retries it, `ThrottledError` retries it and slows down,
      `FatalDestinationError` (or any error `classify_error` calls fatal) fails
      the writer.
    - ``get_size_in_bytes(request_entry) -> int``.

    Optional: ``async def open_client()`` / ``close_client()`` to create and close
    the destination's client on the writer's event loop; ``classify_error``;
    ``handle_dead_letters``.

    Flink's lifecycle holds: ``write`` blocks while ``max_buffered_requests`` are
    buffered; batches go out when ``max_batch_size`` entries or
    ``max_batch_size_in_bytes`` are buffered, or ``max_time_in_buffer_ms`` after the
    first entry entered an empty buffer; ``flush(False)`` waits for requests in
    flight (sending full batches as they complete, as Flink does) and leaves the
    rest of the buffer to `snapshot_state`; ``flush(True)`` delivers all.
    A restored entry larger than ``max_record_size_in_bytes`` is refused at
    construction, as in Flink. Unlike Flink: retried entries go back in the order
    they had in the batch (and keep per-key order with ``ordering_key``), wait an
    exponential backoff with jitter, and spend a retry budget; ``numRecordsSend``
    counts entries that landed, not attempts (the docs list every difference).
    """

    _retry_timer: tuple[int, ScheduledTimer] | None = None
    """When the first waiting retry falls due, and the timer that puts it back then."""

    def __init__(
        self,
        element_converter: ElementConverter[InputT, RequestEntryT]
        | Callable[[InputT, SinkWriter.Context], RequestEntryT],
        context: WriterInitContext,
        configuration: AsyncSinkWriterConfiguration,
        states: Collection[BufferedRequestState[RequestEntryT]] = (),
    ) -> None:
        """Build the writer; its buffer starts with every entry of ``states``, in order.

        Raises:
            SinkConfigurationError: ``configuration`` is not an
                `AsyncSinkWriterConfiguration`, or ``states`` holds an entry larger
                than ``max_record_size_in_bytes``.
            SinkDefinitionError: ``element_converter`` is neither an
                `ElementConverter` nor a function.
        """
        if not isinstance(configuration, AsyncSinkWriterConfiguration):
            raise SinkConfigurationError(
                "configuration must be an AsyncSinkWriterConfiguration (got "
                f"{type(configuration).__name__}); build one with the buffering hints"
            )
        apply = getattr(element_converter, "apply", None)
        if callable(apply):
            self._convert: Callable[[InputT, SinkWriter.Context], RequestEntryT] = apply
            open_converter = getattr(element_converter, "open", None)
            if callable(open_converter):
                open_converter(context)
        elif callable(element_converter):
            self._convert = element_converter
        else:
            raise SinkDefinitionError(
                "element_converter must have apply(element, context) or be a function "
                f"(element, context) -> entry (got {type(element_converter).__name__})"
            )
        self.configuration = configuration
        self.context = context
        self._timers = context.get_processing_time_service()
        self._max_batch_size = configuration.max_batch_size
        self._max_batch_bytes = configuration.max_batch_size_in_bytes
        self._max_buffered = configuration.max_buffered_requests
        self._max_record_bytes = configuration.max_record_size_in_bytes
        self._ordering_key = configuration.ordering_key
        self._rate_limiter: RateLimitingStrategy = (
            copy.deepcopy(configuration.rate_limiting_strategy)
            if configuration.rate_limiting_strategy is not None
            else CongestionControlRateLimitingStrategy.flink_default(
                max_batch_size=configuration.max_batch_size,
                max_in_flight_requests=configuration.max_in_flight_requests,
            )
        )
        self._batch_limit = min(self._max_batch_size, self._rate_limiter.get_max_batch_size())
        self._buffer: collections.deque[_Entry] = collections.deque()
        self._buffered_bytes = 0
        self._in_flight: dict[int, _Request] = {}
        self._request_ids = itertools.count()
        self._mailbox: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
        self._delayed: list[tuple[int, int, list[_Entry]]] = []
        self._delayed_sequence = itertools.count()
        self._blocked_keys: collections.Counter[Hashable] = collections.Counter()
        self._timer: ScheduledTimer | None = None
        self._waiting_for_a_slot = False
        self._throttled_in_a_row = 0
        self._failure: BaseException | None = None
        self._rng = random.Random()
        self._loop: EventLoopThread | None = None
        self._client_open = False
        self._client_opening = False
        self._client_lock: asyncio.Lock | None = None
        self._closing = False
        metrics = context.metric_group()
        self._records_send = metrics.get_num_records_send_counter()
        self._bytes_send = metrics.get_num_bytes_send_counter()
        self._send_errors = metrics.get_num_records_send_errors_counter()
        self._send_time = _SendTimeGauge()
        metrics.set_current_send_time_gauge(self._send_time)
        restored = [wrapper for state in states for wrapper in state.buffered_request_entries]
        for wrapper in restored:
            self._check_restored_size(wrapper.request_entry, wrapper.size)
        for wrapper in restored:
            self._add_to_buffer(self._wrap(wrapper.request_entry, wrapper.size, wrapper.attempts))

    # -- what sink authors implement -------------------------------------------------

    @abc.abstractmethod
    async def submit_request_entries(
        self, request_entries: list[RequestEntryT]
    ) -> Sequence[RequestEntryT]:
        """Send one batch to the destination; return the entries to retry.

        Runs on the writer's event loop. Return the very entry objects you were
        given (in any order), or an empty sequence when all landed. Raise to fail
        the whole batch; `classify_error` decides whether it is retried.
        """

    @abc.abstractmethod
    def get_size_in_bytes(self, request_entry: RequestEntryT) -> int:
        """The entry's size, for the byte limits and ``numBytesSend``."""

    async def open_client(self) -> None:
        """Create the destination's client; runs on the writer's loop before the first request."""

    async def close_client(self) -> None:
        """Close the client made by `open_client`; runs on the loop in `close`."""

    def classify_error(self, error: BaseException) -> ErrorVerdict:
        """Whether an error raised by ``submit_request_entries`` is retryable or fatal.

        Defaults to `default_error_verdict`. Override to add your client's errors,
        falling back to ``super().classify_error(error)``.
        """
        return default_error_verdict(error)

    def handle_dead_letters(self, dead_letters: Sequence[DeadLetter[RequestEntryT]]) -> None:
        """Take entries the writer gives up on. Default: fail with each entry described.

        Override to route them elsewhere (a dead-letter table, a log); if it
        returns, the entries are dropped and the writer goes on.

        Raises:
            UndeliverableEntriesError: by default.
        """
        shown = "; ".join(
            f"{describe(letter.request_entry)} ({letter.reason}"
            + (f", after {letter.attempts} failed attempts)" if letter.attempts else ")")
            for letter in dead_letters[:5]
        )
        more = f" and {len(dead_letters) - 5} more" if len(dead_letters) > 5 else ""
        raise UndeliverableEntriesError(
            f"{type(self).__name__} gave up on {len(dead_letters)} request entries: {shown}{more}. "
            "Fix the cause, raise max_retries_per_entry / max_record_size_in_bytes, or "
            "override handle_dead_letters to route them elsewhere.",
            dead_letters=dead_letters,
        )

    # -- SinkWriter ------------------------------------------------------------------

    def write(self, element: InputT, context: SinkWriter.Context) -> None:
        """Buffer the element's entry; send batches that are full; block while the buffer is."""
        if self._failure is not None:
            raise self._failure
        while len(self._buffer) >= self._max_buffered:
            self._send_or_wait()
        entry = self._convert(element, context)
        size = self.get_size_in_bytes(entry)
        if size.__class__ is not int or size < 0:
            raise SinkDefinitionError(
                f"{type(self).__name__}.get_size_in_bytes must return an int >= 0 (got "
                f"{size!r} of type {type(size).__name__} for {describe(entry)})"
            )
        if size > self._max_record_bytes:
            self._dead_letters(
                [
                    DeadLetter(
                        entry,
                        0,
                        f"{size} bytes, larger than max_record_size_in_bytes="
                        f"{self._max_record_bytes}",
                    )
                ]
            )
            return
        self._add_to_buffer(self._wrap(entry, size, 0))
        if self._in_flight and not self._mailbox.empty():
            self._apply_outcomes()
        elif not self._waiting_for_a_slot and (
            len(self._buffer) >= self._batch_limit or self._buffered_bytes >= self._max_batch_bytes
        ):
            self._non_blocking_flush()

    def flush(self, end_of_input: bool) -> None:
        """``False``: wait for requests in flight, keep the buffer; ``True``: deliver everything."""
        if self._failure is not None:
            raise self._failure
        if end_of_input:
            while self._buffer or self._in_flight or self._delayed:
                self._send_or_wait()
        else:
            while self._in_flight:
                # Retries that fall due wait for the next send; this only waits for replies.
                self._wait_for_progress(until_a_retry_is_due=False)

    def write_watermark(self, watermark: Watermark) -> None:
        """Watermarks do not affect an async sink."""

    def snapshot_state(self, checkpoint_id: int) -> list[BufferedRequestState[RequestEntryT]]:
        """The entries not delivered yet: waiting retries first, then the buffer."""
        waiting = [entry for _, _, entries in sorted(self._delayed) for entry in entries]
        wrappers = [
            RequestEntryWrapper(item.entry, item.size, item.attempts)
            for item in itertools.chain(waiting, self._buffer)
        ]
        return [BufferedRequestState(wrappers)]

    def close(self) -> None:
        """Cancel requests still in flight, close the client, stop the event loop."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._retry_timer is not None:
            self._retry_timer[1].cancel()
            self._retry_timer = None
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.run(self._close_client_after_cancelling(), timeout_s=30)
        finally:
            loop.stop()

    # -- buffer ----------------------------------------------------------------------

    def _check_restored_size(self, entry: Any, size: int) -> None:
        """Refuse restored state that today's limits cannot send (as Flink does).

        A batch never exceeds ``max_batch_size_in_bytes``, and that is at least
        ``max_record_size_in_bytes``; a restored entry above the record limit could
        only go out as an oversized batch.
        """
        if size > self._max_record_bytes:
            raise SinkConfigurationError(
                f"{type(self).__name__} cannot restore its state: it holds a request entry "
                f"({describe(entry)}) of size [{size}], when the max_record_size_in_bytes was "
                f"set to [{self._max_record_bytes}]. Restore with max_record_size_in_bytes >= "
                f"{size} (and max_batch_size_in_bytes as large), let that run drain the state, "
                "then lower the limit"
            )

    def _wrap(self, entry: Any, size: int, attempts: int) -> _Entry:
        key = self._ordering_key(entry) if self._ordering_key is not None else None
        return _Entry(entry, size, attempts, key)

    def _add_to_buffer(self, item: _Entry) -> None:
        if not self._buffer and self._timer is None:
            self._register_timer()
        self._buffer.append(item)
        self._buffered_bytes += item.size

    def _register_timer(self) -> None:
        now = self._timers.get_current_processing_time()
        self._timer = self._timers.register_timer(
            now + self.configuration.max_time_in_buffer_ms, self._on_buffer_timer
        )

    def _on_buffer_timer(self, timestamp: int) -> None:
        self._timer = None
        if self._failure is not None:
            return
        while self._buffer:
            if self._try_send():
                continue
            if not self._in_flight:
                # Only entries whose key waits for a retry's backoff are left (with
                # ordering_key): they go after it, by the next timer, rather than
                # this callback holding the writer until the backoff (a Retry-After) ends.
                self._register_timer()
                return
            self._wait_for_progress()

    def _take_batch(self, limit: int) -> list[_Entry]:
        buffer = self._buffer
        batch: list[_Entry] = []
        batch_bytes = 0
        if self._ordering_key is None:
            while buffer and len(batch) < limit:
                size = buffer[0].size
                if batch and batch_bytes + size > self._max_batch_bytes:
                    break
                batch.append(buffer.popleft())
                batch_bytes += size
        else:
            blocked = self._blocked_keys
            skipped: list[_Entry] = []
            in_batch: set[Hashable] = set()
            for _ in range(len(buffer)):
                if len(batch) >= limit:
                    break
                item = buffer.popleft()
                if item.key in blocked or item.key in in_batch:
                    skipped.append(item)
                    continue
                if batch and batch_bytes + item.size > self._max_batch_bytes:
                    buffer.appendleft(item)
                    break
                batch.append(item)
                in_batch.add(item.key)
                batch_bytes += item.size
            buffer.extendleft(reversed(skipped))
            blocked.update(in_batch)
        self._buffered_bytes -= batch_bytes
        return batch

    # -- sending ---------------------------------------------------------------------

    def _non_blocking_flush(self) -> None:
        while (
            not self._waiting_for_a_slot
            and self._buffer
            and (
                len(self._buffer) >= self._batch_limit
                or self._buffered_bytes >= self._max_batch_bytes
            )
            and self._try_send()
        ):
            pass

    def _send_or_wait(self) -> None:
        if not self._try_send():
            self._wait_for_progress()

    def _try_send(self) -> bool:
        """Send the next batch if there is one and the rate limiter admits it."""
        self._release_due_retries()
        if not self._buffer:
            return False
        limit = max(1, min(self._batch_limit, len(self._buffer)))
        if self._rate_limiter.should_block(BasicRequestInfo(limit)):
            # Strategies change their mind when a request completes: until then,
            # writes skip asking again (a cost per element otherwise).
            self._waiting_for_a_slot = True
            if not self._in_flight:
                raise SinkConfigurationError(
                    f"rate limiting strategy {self._rate_limiter!r} blocks a batch of {limit} "
                    "entries while no request is in flight, so the writer could never send "
                    "again; its should_block must admit a request when nothing is in flight"
                )
            return False
        batch = self._take_batch(limit)
        if not batch:
            return False
        self._rate_limiter.register_in_flight_request(BasicRequestInfo(len(batch)))
        request_id = next(self._request_ids)
        self._in_flight[request_id] = _Request(batch, time.monotonic())
        if self._loop is None:
            self._loop = EventLoopThread(f"sinkv2-async-{type(self).__name__}")
            # A writer dropped without close() (a crashed task) must not leave an
            # idle loop thread behind.
            weakref.finalize(self, self._loop.stop_soon)
        self._loop.submit(self._send(request_id, [item.entry for item in batch]))
        return True

    async def _send(self, request_id: int, entries: list[RequestEntryT]) -> None:
        timeout_s = self.configuration.request_timeout_ms / 1000
        retry: Sequence[Any] | None = None
        error: BaseException | None = None
        timed_out = False
        try:
            retry, error = await asyncio.wait_for(self._open_and_submit(entries), timeout_s)
        except asyncio.CancelledError as cancelled:
            if self._closing:
                raise
            error = cancelled
        except TimeoutError as deadline:
            # Only the deadline's: errors of the submit itself come back as values.
            timed_out = True
            error = deadline
        except BaseException as raised:
            # Not an Exception (KeyboardInterrupt, a BaseException subclass): the writer
            # must still hear of it, or it would wait for this request forever.
            self._mailbox.put(_Outcome(request_id, None, raised, False, time.monotonic()))
            raise
        self._mailbox.put(_Outcome(request_id, retry, error, timed_out, time.monotonic()))

    async def _open_and_submit(
        self, entries: list[RequestEntryT]
    ) -> tuple[Sequence[Any] | None, Exception | None]:
        try:
            await self._ensure_client_open()
            return await self.submit_request_entries(entries), None
        except Exception as error:  # noqa: BLE001 - every failure is reported to the writer
            return None, error

    async def _ensure_client_open(self) -> None:
        if self._client_open:
            return
        if self._client_lock is None:
            self._client_lock = asyncio.Lock()
        async with self._client_lock:
            if not self._client_open:
                # A close() while open_client still runs must close what it made so
                # far (close_client must cope with a half-open client); a failed
                # open is tried again by the next request.
                self._client_opening = True
                await self.open_client()
                self._client_open = True

    async def _close_client_after_cancelling(self) -> None:
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._client_opening:
            await self.close_client()

    # -- outcomes --------------------------------------------------------------------

    def _wait_for_progress(self, *, until_a_retry_is_due: bool = True) -> None:
        """Block until a request finishes, or (if asked) a waiting retry is due."""
        due = self._delayed[0][0] if self._delayed and until_a_retry_is_due else None
        wait_s = None
        if due is not None:
            wait_s = max(0.0, (due - self._timers.get_current_processing_time()) / 1000)
        if self._in_flight:
            try:
                outcome = self._mailbox.get(timeout=wait_s)
            except queue.Empty:
                return
            self._apply(outcome)
            self._apply_outcomes()
        elif wait_s is not None:
            time.sleep(min(wait_s, 0.05))

    def _apply_outcomes(self) -> None:
        """Apply every finished request's outcome, then send what became sendable (as Flink)."""
        while not self._mailbox.empty():
            self._apply(self._mailbox.get_nowait())
        self._batch_limit = min(self._max_batch_size, self._rate_limiter.get_max_batch_size())
        self._non_blocking_flush()

    def _apply(self, outcome: _Outcome) -> None:
        self._waiting_for_a_slot = False
        request = self._in_flight.pop(outcome.request_id)
        batch = request.batch
        self._send_time.value = round((outcome.finished_at - request.sent_at) * 1000)
        if self._ordering_key is not None:
            self._blocked_keys.subtract(item.key for item in batch)
            self._blocked_keys = +self._blocked_keys
        if outcome.error is None:
            self._throttled_in_a_row = 0
            retry = self._match_retries(batch, outcome.retry)
            failed = len(retry)
            self._rate_limiter.register_completed_request(BasicResultInfo(failed, len(batch)))
            if failed:
                retried = set(map(id, retry))
                landed = [item for item in batch if id(item) not in retried]
                self._retry(retry, "the destination asked to retry it", None)
            else:
                landed = batch
            self._records_send.inc(len(landed))
            self._bytes_send.inc(sum(item.size for item in landed))
            return
        self._rate_limiter.register_completed_request(BasicResultInfo(len(batch), len(batch)))
        error = outcome.error
        timeout_ms = self.configuration.request_timeout_ms
        if outcome.timed_out:
            if self.configuration.fail_on_timeout:
                self._fail(
                    RequestTimeoutError(
                        f"a request of {len(batch)} entries got no answer within "
                        f"request_timeout_ms={timeout_ms}, and fail_on_timeout is set"
                    ),
                    error,
                )
            self._retry(batch, f"request timed out after {timeout_ms} ms", error)
            return
        if self.classify_error(error) is ErrorVerdict.FATAL:
            self._fail(
                FatalDestinationError(
                    f"{type(self).__name__}.submit_request_entries failed on a batch of "
                    f"{len(batch)} entries (first: {describe(batch[0].entry)}) with a fatal "
                    f"error: {_error_text(error)}"
                ),
                error,
            )
        if isinstance(error, ThrottledError):
            self._retry(batch, f"throttled: {error}", error, throttled=error)
        else:
            self._retry(batch, f"request failed: {_error_text(error)}", error)

    def _match_retries(self, batch: list[_Entry], retry: Sequence[Any] | None) -> list[_Entry]:
        """The batch items the destination asked to retry, in batch order."""
        if not retry:
            return []
        by_identity: dict[int, list[_Entry]] = {}
        for item in batch:
            by_identity.setdefault(id(item.entry), []).append(item)
        wanted: set[int] = set()
        for entry in retry:
            same = by_identity.get(id(entry), ())
            found = next((i for i in same if id(i) not in wanted), None)
            if found is None:
                found = next((i for i in batch if id(i) not in wanted and i.entry == entry), None)
            if found is None:
                self._fail(
                    SinkDefinitionError(
                        f"{type(self).__name__}.submit_request_entries asked to retry "
                        f"{describe(entry)}, which is not in the batch it was given (or is "
                        "listed twice); return the entry objects of request_entries that "
                        "must be sent again"
                    ),
                    None,
                )
            else:
                wanted.add(id(found))
        return [item for item in batch if id(item) in wanted]

    def _retry(
        self,
        items: list[_Entry],
        reason: str,
        error: BaseException | None,
        throttled: ThrottledError | None = None,
    ) -> None:
        self._send_errors.inc(len(items))
        budget = self.configuration.max_retries_per_entry
        again: list[_Entry] = []
        dead: list[DeadLetter[Any]] = []
        for item in items:
            attempts = item.attempts if throttled is not None else item.attempts + 1
            if budget is not None and attempts > budget:
                dead.append(DeadLetter(item.entry, attempts, reason, error))
            else:
                again.append(item._replace(attempts=attempts))
        if dead:
            self._dead_letters(dead)
        if not again:
            return
        backoff = self.configuration.retry_backoff
        if throttled is None:
            retry_number = max(item.attempts for item in again)
        else:
            # Throttling spends no budget, so the attempts cannot drive the backoff:
            # throttled replies in a row do. Unless the destination said when, a
            # throttled batch never goes out again at once.
            self._throttled_in_a_row += 1
            retry_number = self._throttled_in_a_row
            if backoff.initial_ms == 0 and throttled.retry_after_ms is None:
                backoff = _THROTTLED_BACKOFF
        delay = backoff.delay_ms(max(retry_number, 1), self._rng)
        if throttled is not None and throttled.retry_after_ms is not None:
            delay = max(delay, throttled.retry_after_ms)
        if delay <= 0:
            self._requeue_at_head(again)
            return
        due = self._timers.get_current_processing_time() + round(delay)
        heapq.heappush(self._delayed, (due, next(self._delayed_sequence), again))
        if self._ordering_key is not None:
            self._blocked_keys.update(item.key for item in again)
        self._arm_retry_timer()

    def _arm_retry_timer(self) -> None:
        """A timer for when the first waiting retry falls due.

        Flink puts failed entries back in the buffer at once, where the buffer
        timer sends them; here they wait their backoff first, and this timer puts
        them back when it ends, so they too go out within ``max_time_in_buffer_ms``
        of that, input or not.
        """
        if not self._delayed:
            return
        due = self._delayed[0][0]
        armed = self._retry_timer
        if armed is not None:
            if armed[0] <= due:
                return
            armed[1].cancel()
        self._retry_timer = (due, self._timers.register_timer(due, self._on_retry_timer))

    def _on_retry_timer(self, timestamp: int) -> None:
        self._retry_timer = None
        if self._failure is not None:
            return
        self._release_due_retries()
        self._arm_retry_timer()
        if not self._waiting_for_a_slot:
            self._non_blocking_flush()

    def _requeue_at_head(self, items: list[_Entry]) -> None:
        if not self._buffer and self._timer is None:
            self._register_timer()
        self._buffer.extendleft(reversed(items))
        self._buffered_bytes += sum(item.size for item in items)

    def _release_due_retries(self) -> None:
        if not self._delayed:
            return
        now = self._timers.get_current_processing_time()
        due: list[list[_Entry]] = []
        while self._delayed and self._delayed[0][0] <= now:
            due.append(heapq.heappop(self._delayed)[2])
        if not due:
            return
        items = [item for entries in due for item in entries]
        if self._ordering_key is not None:
            self._blocked_keys.subtract(item.key for item in items)
            self._blocked_keys = +self._blocked_keys
        self._requeue_at_head(items)

    def _dead_letters(self, letters: list[DeadLetter[Any]]) -> None:
        try:
            self.handle_dead_letters(letters)
        except BaseException as error:
            self._failure = error
            raise

    def _fail(self, error: BaseException, cause: BaseException | None) -> NoReturn:
        error.__cause__ = cause
        self._failure = error
        _log.error("%s", error)
        raise error


def _error_text(error: BaseException) -> str:
    """``TypeName: message``: readable even when the message has quotes (repr escapes them)."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
