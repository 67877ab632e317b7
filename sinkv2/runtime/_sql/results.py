"""A job's outcome as the store keeps it: a `SinkResult`, or the error the job failed with.

`JobOutcome` and `JobError` are public (``sinkv2.runtime``): what an engine whose
jobs run away from the driver records. Spark's data-source doors run a job's commit
(and its writers) in Spark's Python workers, not in the user's driver. They record
what the job ended with in the commit state store (``sink_result``, layout 5;
`SqlCommitStateStore.record_outcome`), which driver and workers share, and the
driver reads it back
(``sinkv2_spark.last_result``). This module turns both ways between a
`JobOutcome` and the JSON text in the table; it knows no engine.

A `SinkResult` is stored field by field (enums by value, tuples as lists); a
field a newer release added is dropped when read, one an older release lacked
takes its default.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from sinkv2.errors import CommitStateError
from sinkv2.runtime._result import CommitStatus, SinkResult

__all__ = ["FAILED_IN", "JobError", "JobOutcome", "decode_outcome", "encode_outcome"]

FAILED_IN: Final = ("writer", "commit")
"""Where a recorded error happened: a writer task, or the job's commit."""

_TUPLES: Final = frozenset(
    field.name
    for field in attrs.fields(SinkResult)
    if str(field.type).startswith("tuple[")  # annotations are strings here
)


@final
@attrs.frozen(kw_only=True)
class JobError:
    """The error a door's job failed with, as recorded where it happened.

    Attributes:
        failed_in: ``"writer"`` (a writer task) or ``"commit"`` (the job's commit).
        type_name: The exception's class name, e.g. ``"ValueError"``.
        message: ``str()`` of the exception: the user's message.
        where: What sinkv2 was doing: the writer, its call, element and subtask;
            or the checkpoint being committed.
        traceback: The last lines of the exception's traceback, in the worker.
    """

    failed_in: str
    type_name: str
    message: str
    where: str
    traceback: str = ""

    def headline(self) -> str:
        """``"ValueError: cannot write value 5.0"``: the exception as Python prints it."""
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


@final
@attrs.frozen(kw_only=True)
class JobOutcome:
    """What one job of a sink id ended with: a result, or an error (exactly one).

    Attributes:
        job_id: The job.
        batch_id: Spark's micro-batch id for a stream's job, else ``None``.
        result: The job's `SinkResult`, if it ended well.
        error: The error it failed with, if it did not.
    """

    job_id: str
    batch_id: int | None = None
    result: SinkResult | None = None
    error: JobError | None = None


def encode_outcome(outcome: JobOutcome) -> str:
    """The JSON text `SqlCommitStateStore.record_outcome` keeps."""
    data: dict[str, Any] = {"job_id": outcome.job_id, "batch_id": outcome.batch_id}
    if outcome.result is not None:
        data["result"] = {
            name: _plain(value)
            for name, value in attrs.asdict(outcome.result, recurse=False).items()
        }
    if outcome.error is not None:
        data["error"] = attrs.asdict(outcome.error)
    return json.dumps(data, ensure_ascii=True, sort_keys=True)


def decode_outcome(text: str, *, where: str) -> JobOutcome:
    """The `JobOutcome` ``text`` holds.

    Raises:
        CommitStateError: ``text`` is not what `encode_outcome` writes (``where``
            names the store for the message).
    """
    try:
        data = json.loads(text)
        result = data.get("result")
        error = data.get("error")
        return JobOutcome(
            job_id=str(data["job_id"]),
            batch_id=None if data.get("batch_id") is None else int(data["batch_id"]),
            result=None if result is None else _result(result),
            error=None if error is None else JobError(**error),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise CommitStateError(
            f"{where} holds an unreadable job outcome ({type(error).__name__}: {error}); "
            "the table sink_result was changed by something other than this sinkv2 release"
        ) from error


def _plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _result(data: Mapping[str, Any]) -> SinkResult:
    known = {field.name for field in attrs.fields(SinkResult)}
    values = {name: value for name, value in data.items() if name in known}
    values["status"] = CommitStatus(values["status"])
    for name in _TUPLES & values.keys():
        values[name] = tuple(values[name])
    return SinkResult(**values)
