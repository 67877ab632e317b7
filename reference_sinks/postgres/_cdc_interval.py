"""An ``interval``'s output text as microseconds, as `PostgresSource` reads the interval.

`PostgresSource` reads an interval as ``extract(epoch FROM value) * 1000000``: a year
is 365.25 days, a month 30 days, a day 86400 seconds. The change stream and the
snapshot copy carry only the value's output text, so `PostgresCdcSource` computes the
same number from it; psycopg's own loader counts a year as 365 days and would make
the same row read differently by the two sources.
"""

from __future__ import annotations

import re
from typing import Any, Final

_FIELD: Final = re.compile(r"([+-]?\d+) (year|mon|day)s?")
_TIME: Final = re.compile(r"([+-]?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_QUARTER_DAY_US: Final = 21_600_000_000
_INT64: Final = range(-(2**63), 2**63)


def interval_micros(text: str) -> int:
    """Microseconds of an interval's text in ``IntervalStyle=postgres`` (``1 year 04:05:06.5``).

    Raises:
        ValueError: ``text`` is not such an interval, or its microseconds overflow int64
            (`PostgresSource`'s ``::int8`` fails on the same values).
    """
    months = days = time = 0
    rest = text.strip()
    position = 0
    while position < len(rest):
        if rest[position] == " ":
            position += 1
            continue
        field = _FIELD.match(rest, position)
        if field is not None:
            amount = int(field.group(1))
            unit = field.group(2)
            if unit == "year":
                months += 12 * amount
            elif unit == "mon":
                months += amount
            else:
                days += amount
            position = field.end()
            continue
        clock = _TIME.match(rest, position)
        if clock is None or clock.end() != len(rest):
            raise ValueError(f"{text!r} is not an interval in IntervalStyle postgres")
        sign, hours, minutes, seconds, fraction = clock.groups()
        magnitude = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000
        magnitude += int((fraction or "").ljust(6, "0"))
        time = -magnitude if sign == "-" else magnitude
        position = clock.end()
    years, rest_months = int(months / 12), months - 12 * int(months / 12)  # C's / and %
    quarter_days = 1461 * years + 120 * rest_months + 4 * days  # exact at 365.25 days a year
    micros = quarter_days * _QUARTER_DAY_US + time
    if micros not in _INT64:
        raise ValueError(f"{text!r} is too long an interval for int64 microseconds")
    return micros


class IntervalLoader:
    """Loads an interval's text as `interval_micros` (psycopg's loader interface)."""

    def load(self, data: bytes | bytearray | memoryview) -> int:
        return interval_micros(bytes(data).decode())


class IntervalArrayLoader:
    """Loads an ``interval[]``'s text, each element as `interval_micros`.

    ``texts`` is psycopg's ``text[]`` loader; a null element stays null.
    """

    def __init__(self, texts: Any) -> None:
        self._texts = texts

    def load(self, data: bytes | bytearray | memoryview) -> list[int | None]:
        elements = self._texts.load(data)
        return [None if e is None else interval_micros(e) for e in elements]


__all__ = ["IntervalArrayLoader", "IntervalLoader", "interval_micros"]
