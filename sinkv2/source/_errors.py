"""The errors a source raises on purpose; all derive from `sinkv2.errors.SinkV2Error`.

```text
SinkV2Error
├── SourceDefinitionError (TypeError)    a source, enumerator, reader or serializer lacks a method
├── SourceContractError (RuntimeError)   a source broke FLIP-27's contract while running
└── SourceReaderError                    a reader's fetcher (or generator) failed; it cannot go on
```
"""

from __future__ import annotations

import traceback
from typing import Final

from sinkv2.errors import SinkV2Error

__all__ = ["SourceContractError", "SourceDefinitionError", "SourceReaderError", "raised_at"]

_NOTE_FRAMES: Final = 4
"""How many innermost frames of the original error `raised_at` shows."""


class SourceDefinitionError(SinkV2Error, TypeError):
    """A source, enumerator, reader or serializer does not implement what FLIP-27 requires.

    Raised before any record moves: by `inspect_source`, and by an engine when the
    enumerator or reader a source created lacks a required method.
    """


class SourceContractError(SinkV2Error, RuntimeError):
    """A source broke the FLIP-27 contract while running.

    Examples: an enumerator assigned one split to two readers, or lost a split across
    a checkpoint; a reader snapshotted a split it was never given, or emitted records
    after it reported the end of its input. Raised instead of delivering wrong data.

    Attributes:
        split_id: The split the violation is about, if it is about one.
        method: The method whose result broke the contract (Flink's name, snake_case).
    """

    def __init__(self, message: str, *, method: str, split_id: str | None = None) -> None:
        super().__init__(message)
        self.method = method
        self.split_id = split_id


class SourceReaderError(SinkV2Error):
    """A reader's split fetcher failed; the reader cannot produce more records.

    Also what `DataGeneratorSource`'s reader raises when ``generator_function``
    raises (Flink's "threw an exception on this input: <index>"). The cause (the
    split reader's or the function's exception) is chained as ``__cause__``, and a note
    (`raised_at`) shows where it was raised: Spark's Python workers drop ``__cause__``
    from a task's error (their simplified traceback), and keep the notes. Records the
    reader emitted before are not lost: the engine restores the reader's splits from
    its last checkpoint.
    """


def raised_at(cause: BaseException) -> str:
    """A note for an error that wraps ``cause``: where the original error was raised.

    Follows ``cause``'s own causes to the first error raised (the connector's), and
    shows its innermost frames and its message. Added with ``add_note`` to the
    wrapping error, it survives engines that print an error without its chain:
    Spark's Python workers set a task error's ``__cause__`` to ``None`` before they
    format it, so a split reader's own traceback would otherwise be lost.
    """
    root = cause
    seen = {id(root)}
    while root.__cause__ is not None and id(root.__cause__) not in seen:
        root = root.__cause__
        seen.add(id(root))
    frames = traceback.format_tb(root.__traceback__)[-_NOTE_FRAMES:]
    where = "".join(frames).rstrip() or "  (no traceback)"
    message = "".join(traceback.format_exception_only(type(root), root)).rstrip()
    heading = f"raised at (innermost {len(frames)} frame(s) of the original error):"
    return f"{heading}\n{where}\n{message}"
