"""The errors a source raises on purpose; all derive from `sinkv2.errors.SinkV2Error`.

```text
SinkV2Error
├── SourceDefinitionError (TypeError)    a source, enumerator, reader or serializer lacks a method
├── SourceContractError (RuntimeError)   a source broke FLIP-27's contract while running
└── SourceReaderError                    a reader's fetcher (or generator) failed; it cannot go on
```
"""

from __future__ import annotations

from sinkv2.errors import SinkV2Error

__all__ = ["SourceContractError", "SourceDefinitionError", "SourceReaderError"]


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
    split reader's or the function's exception) is chained as ``__cause__``. Records the
    reader emitted before are not lost: the engine restores the reader's splits from
    its last checkpoint.
    """
