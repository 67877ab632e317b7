"""CSV quotes that open and never close: found, never read as a value holding the file's rest.

A quoted field may span lines, so a quote opened by mistake and never closed makes
every line after it part of one value: pyarrow's reader (and Python's, unless strict)
accept that, and rows would vanish silently into the last field. `QuoteCounter` counts
the quote characters a reader reads, at no extra read of the file: an even count is a
file whose quotes all close (escaped quotes are doubled); an odd one sends the file to
the record-by-record read, where `unclosed_quote` says whether its last record really
ends inside a quote (or the count was odd for a stray quote inside an unquoted field,
which is a literal character).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

_NEWLINES: Final = ("\r", "\n")


class QuoteCounter:
    """A readable stream that counts the quote characters read through it."""

    def __init__(self, stream: pa.NativeFile, quote_char: str) -> None:
        self._stream = stream
        self._quote = quote_char.encode("utf-8")
        self.quotes = 0

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = bytes(self._stream.read(size if size is not None and size >= 0 else None))
        self.quotes += data.count(self._quote)
        return data

    def close(self) -> None:
        """Closing belongs to whoever opened the stream."""

    @property
    def balanced(self) -> bool:
        """Every quote read so far has its pair."""
        return self.quotes % 2 == 0


def unclosed_quote(record: str, *, delimiter: str, quote_char: str) -> bool:
    """Whether CSV ``record`` ends inside a quoted field (as RFC 4180 and Spark quote).

    A quote opens a field only at the field's start; inside a quoted field a doubled
    quote is one literal quote, and a single one closes the field.
    """
    quoted = False
    at_start = True
    index = 0
    while index < len(record):
        char = record[index]
        if quoted:
            if char == quote_char:
                if record.startswith(quote_char, index + 1):
                    index += 1  # an escaped (doubled) quote
                else:
                    quoted = False
        elif char == delimiter or char in _NEWLINES:
            at_start = True
            index += 1
            continue
        elif at_start and char == quote_char:
            quoted = True
        at_start = False
        index += 1
    return quoted


__all__ = ["QuoteCounter", "unclosed_quote"]
