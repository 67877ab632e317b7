"""What an HTTP answer means for a batch: landed, partly retried, retried, throttled or fatal.

The protocol, in one table (``docs/sinks/http.md`` has it too):

=====================  ==============================================================
status                 the writer
=====================  ==============================================================
2xx (200, 202, 207..)  the batch landed, except the records whose indices the JSON
                       body lists under ``"retry"`` (``{"retry": [0, 7]}``): those
                       are sent again. Any other body (empty, text, JSON without
                       ``"retry"``) means every record landed.
429, 503               throttled: the batch is retried no earlier than ``Retry-After``
                       (delta-seconds or an HTTP date) and the rate limiter backs off;
                       throttling does not spend the retry budget.
408, 500, 502, 504     retried after a backoff; each retry spends one unit of every
                       record's retry budget.
anything else          fatal: 400, 401, 403, 404, 413, 422, 501, redirects... the
                       writer fails with the status and the server's message.
=====================  ==============================================================
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from typing import Final

from sinkv2.errors import FatalDestinationError, RetryableError, ThrottledError

__all__ = [
    "RETRYABLE_STATUSES",
    "RETRY_FIELD",
    "THROTTLING_STATUSES",
    "parse_retry_after",
    "retried_indices",
]

RETRY_FIELD: Final = "retry"
"""The key of a 2xx JSON body that lists the indices of records to send again."""

THROTTLING_STATUSES: Final = frozenset({429, 503})
"""Statuses that mean "slow down": retried after ``Retry-After``, the rate limiter backs off."""

RETRYABLE_STATUSES: Final = frozenset({408, 500, 502, 504})
"""Statuses retried after a backoff, spending the retry budget."""

MESSAGE_LIMIT: Final = 500
"""How many characters of a server's error body an error message quotes."""


def parse_retry_after(  # noqa: PLR0911 - each unreadable form returns None
    value: str | None, *, now: float | None = None
) -> int | None:
    """A ``Retry-After`` header value in milliseconds, or ``None`` if absent or unreadable.

    Accepts delta-seconds (``"2"``; decimals such as ``"0.25"`` too, though RFC 9110
    allows only integers) and HTTP dates (``"Wed, 21 Oct 2026 07:28:00 GMT"``); a
    date in the past is ``0``. An unreadable value is ignored rather than failing
    the writer: the backoff still applies.

    Args:
        value: The header value.
        now: The current Unix time in seconds (for tests); defaults to ``time.time()``.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            return None
        return math.ceil(seconds * 1000)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; "-0000" parses as naive
        return None
    current = time.time() if now is None else now
    return max(0, math.ceil((when.timestamp() - current) * 1000))


def quote(body: bytes) -> str:
    """The server's message, cut to `MESSAGE_LIMIT` characters, for an error message.

    A JSON body's ``error`` or ``message`` field if it has one, else the body's text.
    """
    text = body.decode("utf-8", errors="replace").strip()
    if text.startswith("{"):
        try:
            answer = json.loads(text)
        except ValueError:
            pass
        else:
            field = next((answer[k] for k in ("error", "message") if k in answer), None)
            if isinstance(field, str):
                text = field
    if not text:
        return "(empty body)"
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + f"... ({len(text) - MESSAGE_LIMIT} more characters)"
    return text


def retried_indices(body: bytes, batch_size: int, url: str) -> list[int]:
    """The records of a 2xx answer to send again: the ``"retry"`` indices of its JSON body.

    Raises:
        FatalDestinationError: the body has a ``"retry"`` field that is not a list of
            distinct indices within the batch; the receiver breaks the protocol, and
            guessing which records landed could lose data.
    """
    if not body or RETRY_FIELD.encode() not in body:
        return []
    try:
        answer = json.loads(body)
    except ValueError:
        return []
    if not isinstance(answer, Mapping) or RETRY_FIELD not in answer:
        return []
    indices = answer[RETRY_FIELD]
    if indices is None:
        return []
    if (
        not isinstance(indices, list)
        or not all(type(i) is int and 0 <= i < batch_size for i in indices)
        or len(set(indices)) != len(indices)
    ):
        raise FatalDestinationError(
            f"POST {url} answered a batch of {batch_size} records with {RETRY_FIELD!r}: "
            f"{indices!r:.200}; expected a list of distinct record indices in "
            f"[0, {batch_size}). Fix the receiver to list the indices of the records it "
            "did not store"
        )
    return indices


def raise_for_status(
    status: int,
    reason: str | None,
    headers: Mapping[str, str],
    body: bytes,
    url: str,
    *,
    sent: tuple[int, int] = (0, 0),
) -> None:
    """Raise what a non-2xx answer means for the batch (see the module's table).

    Args:
        status: The answer's status.
        reason: Its reason phrase.
        headers: Its headers.
        body: Its body.
        url: The URL, as messages show it (password masked).
        sent: ``(records, body bytes)`` of the request, for a ``413``'s message.

    Raises:
        ThrottledError: 429 or 503, with ``retry_after_ms`` from ``Retry-After``.
        RetryableError: 408, 500, 502 or 504.
        FatalDestinationError: any other status; the message quotes the server and
            says what to change.
    """
    if 200 <= status < 300:
        return
    answer = f"POST {url} answered {status} {reason or ''}".rstrip()
    if status in THROTTLING_STATUSES:
        retry_after = parse_retry_after(headers.get("Retry-After"))
        raise ThrottledError(
            f"{answer} (Retry-After: {headers.get('Retry-After')!r}): {quote(body)}",
            retry_after_ms=retry_after,
        )
    if status in RETRYABLE_STATUSES:
        raise RetryableError(f"{answer}: {quote(body)}")
    raise FatalDestinationError(f"{answer}: {quote(body)}; {_what_to_do(status, sent)}")


def _what_to_do(status: int, sent: tuple[int, int]) -> str:
    if 300 <= status < 400:
        return "point the sink at the final URL (redirects are not followed for POST)"
    if status in (401, 403):
        return (
            "check the credentials the sink sends (an Authorization header, or the "
            "URL's user:password); retrying the same request cannot succeed"
        )
    if status in (404, 405):
        return "check the URL and that it takes POST; retrying the same request cannot succeed"
    if status == 413:
        records, size = sent
        return (
            f"the request carried {records} records in {size} bytes; lower "
            "max_batch_size_in_bytes (it bounds the records' JSON; the body adds a "
            "comma per record and its envelope) or max_batch_size below what the "
            "server takes"
        )
    return (
        "fix the records or the request (URL, headers, body builder); retrying "
        "the same request cannot succeed"
    )
