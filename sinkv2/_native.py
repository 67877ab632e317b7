"""Native file writes: the engine's own writer produces the data files (sinkv2 extension).

Not in Flink. Every Python writer on Spark pays for moving rows from the JVM into
Python workers (0.4-0.6 x Spark's own Parquet writer). For destinations that are
files in a format the engine writes itself, the rows never need to enter Python:
the engine's writer can produce an epoch's data files - with its own commit
protocol for failed and speculative task attempts - and only the small,
exactly-once part stays with the sink: which files belong to which epoch, and how
they are committed.

A sink opts in with `SupportsNativeFileWrite`. Per job, before anything is written,
the runtime asks it for a `NativeFileWrite` (format, layout, options, where to
stage) or a `NativeWriteUnavailable` (why not: the sink's own writers run
instead). Per epoch, the engine writes the files into
``<location>/<attempt token>/`` and hands the directory to
`SupportsNativeFileWrite.native_file_committables`; the committables then take the
usual way: recorded Pending, committed, recorded Committed. The staging directory
is named by an attempt token that starts with the job id, so the sink's
``clean_up_attempts`` removes it like any writer's staging - also what a driver
that died mid-write left behind (the engine's temporary files included).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar, final

import attrs

from sinkv2._messages import END_OF_INPUT
from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError

__all__ = [
    "NativeFileWrite",
    "NativeFilesWritten",
    "NativeWriteUnavailable",
    "SupportsNativeFileWrite",
    "native_attempt_token",
]

CommT_co = TypeVar("CommT_co", covariant=True)

_NATIVE_TAG: Final = "native"


def native_attempt_token(job_id: str, checkpoint_id: int) -> str:
    """The attempt token of one native write: job ``job_id``'s write of ``checkpoint_id``.

    ``<job id>-native-<checkpoint id>``, or ``<job id>-native-eoi`` for
    ``END_OF_INPUT`` (a batch run without a checkpoint id). It starts with
    ``<job id>-``, as every writer attempt token does, so a sink's
    ``clean_up_attempts(job_id, kept)`` finds it among the job's attempts.
    """
    checkpoint = "eoi" if checkpoint_id == END_OF_INPUT else str(checkpoint_id)
    return f"{job_id}-{_NATIVE_TAG}-{checkpoint}"


def _check_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise SinkConfigurationError(
            f"NativeFileWrite.{attribute.name} must be a non-empty str (got {describe(value)})"
        )


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _check_names(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        raise SinkConfigurationError(
            f"NativeFileWrite.{attribute.name} must hold non-empty column names (got "
            f"{describe(value)})"
        )


def _check_options(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SinkConfigurationError(
            f"NativeFileWrite.{attribute.name} must map str to str (got {describe(value)}); "
            "spell every option value as a string, e.g. {'compression': 'zstd'}"
        )


@final
@attrs.frozen(kw_only=True)
class NativeFileWrite:
    """What a sink asks the engine's own file writer to write, for each epoch of a job.

    On Spark this is ``input.write.format(format).partitionBy(*partition_by)
    .options(**options).save("<location>/<attempt token>")``, under Spark's file
    commit protocol: a failed, killed or speculative task attempt's files are
    removed by Spark, and only the committed attempts' files are in the directory
    when the write returns.

    Attributes:
        format: The engine writer's format: on Spark ``"parquet"``, ``"json"``,
            ``"orc"``, ``"csv"`` or another registered file source.
        location: A directory URI the engine writes under and the sink can list,
            such as ``"file:///data/out/_staging"``; readers must not see it. Each
            epoch's files go to ``<location>/<attempt token>/`` (see
            `native_attempt_token`).
        partition_by: Columns whose values become Hive-style directories
            (``col=value/``, escaped as Spark escapes them), outermost first. The
            engine leaves these columns out of the files.
        options: Writer options (Spark's ``DataFrameWriter.option``), values as
            strings.
        input: The DataFrame to write, derived from the one the sink was handed
            (say, with derived partition columns, or cast to the destination's
            types); ``None`` writes the input as it was handed in. Used on the
            driver only; never shipped.

    Raises:
        SinkConfigurationError: A field has a bad value or type.
    """

    format: str = attrs.field(validator=_check_name)
    location: str = attrs.field(validator=_check_name)
    partition_by: tuple[str, ...] = attrs.field(
        default=(), converter=_as_tuple, validator=_check_names
    )
    options: Mapping[str, str] = attrs.field(factory=dict, validator=_check_options)
    input: Any = attrs.field(default=None, eq=False, repr=False)  # a DataFrame: no == on it

    def epoch_directory(self, attempt_token: str) -> str:
        """Where the engine writes the files of the write named ``attempt_token``."""
        return f"{self.location.rstrip('/')}/{attempt_token}"


@final
@attrs.frozen
class NativeWriteUnavailable:
    """A sink's answer that the engine cannot write its files: its own writers run instead.

    Attributes:
        reason: Why, in words a user can act on (it is logged and reported as
            ``SinkResult.native_write_unavailable``), e.g. ``"rolling_policy.max_bytes
            is set: Spark's writer cannot roll files by size; set max_bytes=None"``.
    """

    reason: str


@final
@attrs.frozen(kw_only=True)
class NativeFilesWritten:
    """What the engine's writer produced for one epoch.

    Attributes:
        job_id: The job that wrote it.
        checkpoint_id: The checkpoint the files belong to (``END_OF_INPUT`` for a
            batch run without a checkpoint id).
        attempt_token: The write's attempt token: it names the directory, and is the
            one attempt kept when the job's other attempts are cleaned up.
        directory: ``<location>/<attempt token>``, as the sink's `NativeFileWrite`
            named it. It holds the data files, Hive-style partition directories, and
            the engine's bookkeeping (on Spark: names starting with ``_`` or ``.``,
            such as ``_SUCCESS``, ``_temporary/`` and ``.crc`` checksums), which are
            not data.
        write: The `NativeFileWrite` the files were written by.
        records: Rows written, as the engine counted them.
    """

    job_id: str
    checkpoint_id: int
    attempt_token: str
    directory: str
    write: NativeFileWrite
    records: int


class SupportsNativeFileWrite(Protocol[CommT_co]):
    """Mixin: the engine writes the data files natively; the sink commits them (sinkv2 extension).

    Required: `plan_native_file_write` and `native_file_committables`; only
    meaningful with `SupportsCommitter` (the committables are the sink's). Not in
    Flink.

    Call order, per job (a batch ``apply()``): the pre-write topology, then
    `plan_native_file_write` once on the driver, before any Spark job. If it
    returns a `NativeFileWrite`, each epoch is written by the engine into
    ``<location>/<attempt token>/`` and `native_file_committables` turns what it
    wrote into committables; the sink's writers are not created, and its
    pre-commit topology does not run (the committables are final). Then, as on
    every path: clean_up_attempts(job, kept=[the token]), Pending, commit,
    Committed, clean_up_attempts(job, ()).

    If it returns `NativeWriteUnavailable`, the job runs the sink's own writers,
    and the reason is reported. Engines without a native file writer (the
    contract kit's local engine, Spark's ``format("sinkv2")`` data source) always
    run the sink's writers, so a sink with this mixin must still be a complete
    Sink V2 sink.

    What a failure leaves: a write that fails, or a driver that dies during it,
    leaves ``<location>/<attempt token>/`` (and in it, the engine's temporary
    files); nothing of it is committed, and ``clean_up_attempts`` of the job - now,
    or by the next run of the sink id for a dead job - must remove it whole.
    """

    def plan_native_file_write(self, input: Any) -> NativeFileWrite | NativeWriteUnavailable:
        """The native write of this job's epochs, or why the sink's own writers must run.

        Called on the driver with the input after the pre-write topology (on
        Spark, a ``DataFrame``). No data may be written here; it may read metadata
        (a table's schema) and check the input's schema.

        Raises:
            SinkConfigurationError: The input cannot be written by either path.
        """
        ...

    def native_file_committables(self, written: NativeFilesWritten) -> Sequence[CommT_co]:
        """The committables that make the files of ``written`` visible when committed.

        Called on the driver after the engine's write returned, before anything is
        recorded. It may read the files' metadata (Parquet footers); it must not
        make anything visible. An epoch with no data file may have no committable.

        Raises:
            SinkWriterError: The files cannot be committed as written (they do not
                fit the destination); nothing is committed, and the job's clean-up
                removes them.
        """
        ...
