"""A bad option of ``format("sinkv2")`` is refused with a message that says what to do.

Spark shows a planner worker's exception as a formatted traceback inside its
``AnalysisException``; what a user reads first should be the option that is wrong,
not sinkv2's frames. These call the data source's methods in this process, as
Spark's planner worker does, without a Spark session.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import PostgresCommitStateStore, SqliteCommitStateStore
from sinkv2_spark import SinkTopologyTranslator
from sinkv2_spark._doors.datasource import SinkV2DataSource
from sinkv2_spark._rules.options import make_sink, parse_options

SCHEMA = StructType([StructField("id", LongType())])


def refusal(call) -> SinkConfigurationError:  # type: ignore[no-untyped-def]
    with pytest.raises(SinkConfigurationError) as caught:
        call()
    return caught.value


def test_a_misspelled_option_is_named_alone_with_the_one_it_means(tmp_path: Path) -> None:
    message = str(
        refusal(lambda: make_sink("files", {"path": "p", "fromat": "jsonl"}, sink_id="x"))
    )

    head = message.split("; its options are", maxsplit=1)[0]
    assert head == "sink 'files' does not take the option 'fromat' (did you mean 'format'?)"
    # A data source option spelled another way is pointed at too.
    message = str(refusal(lambda: make_sink("files", {"path": "p", "sinkid": "x"}, sink_id="x")))
    assert "'sinkid' (did you mean 'sink_id'?)" in message
    # Spark's streaming option on a batch write says which option a batch write has.
    message = str(
        refusal(lambda: make_sink("files", {"path": "p", "checkpointlocation": "c"}, sink_id="x"))
    )
    assert "'checkpointlocation' (Spark's option of df.writeStream" in message
    assert "'checkpoint_id'" in message
    # So do the streaming door's own options.
    for option in ("guarantee", "on_stage"):
        given = {"path": "p", option: "x"}
        message = str(refusal(lambda: make_sink("files", given, sink_id="x")))  # noqa: B023
        assert f"{option!r} (an option of df.writeStream.format('sinkv2');" in message


@pytest.mark.parametrize(
    ("options", "start"),
    [
        ({"sink": "files", "sinkid": "x"}, "needs the 'sink_id' option (got none; 'sinkid' was"),
        ({"sinks": "files", "sink_id": "x"}, "needs the 'sink' option (got none; 'sinks' was"),
    ],
)
def test_a_missing_door_option_names_the_one_spelled_like_it(
    options: dict[str, str], start: str, tmp_path: Path
) -> None:
    options = {**options, "path": str(tmp_path / "out")}
    message = str(refusal(lambda: parse_options(options)))

    assert message.startswith(f"the sinkv2 data source {start} given, a misspelling?)")


def make_orders(*, base: str, rows: str = "1") -> object:
    raise AssertionError("not called: its options do not bind")


def make_camel(*, rowsPerFile: str = "1") -> object:  # the mistake shown
    raise AssertionError("not called: its options do not bind")


def test_a_factory_parameter_spark_cannot_pass_says_why() -> None:
    spec = f"{__name__}:make_camel"
    # .option("rowsPerFile", "5") reaches the data source lower-cased.
    message = str(refusal(lambda: make_sink(spec, {"rowsperfile": "5"}, sink_id="x")))

    assert (
        "'rowsperfile' (Spark lower-cases option names, so the factory's 'rowsPerFile'" in message
    )


def test_a_factory_s_missing_option_is_named() -> None:
    spec = f"{__name__}:make_orders"
    message = str(refusal(lambda: make_sink(spec, {"row": "2"}, sink_id="x")))

    assert message.startswith(
        f"sink {spec!r} does not take the option 'row' (did you mean 'rows'?) and needs the "
        "option 'base'; its options are ['base', 'rows']"
    )


@pytest.mark.parametrize("value", ["0", "-1", "1.0", "²", "9223372036854775807"])
def test_a_checkpoint_id_option_that_is_not_a_positive_integer_names_the_option(
    value: str, tmp_path: Path
) -> None:
    options = {
        "sink": "files",
        "path": str(tmp_path / "out"),
        "sink_id": "x",
        "checkpoint_id": value,
        "state_store": str(tmp_path / "state.sqlite"),
    }
    message = str(refusal(lambda: parse_options(options)))

    assert message.startswith("the 'checkpoint_id' option must be a positive integer below ")
    assert f"(got {value!r})" in message


@pytest.mark.parametrize("method", ["writer", "streamWriter"])
def test_a_refusal_reaches_spark_without_sinkv2_s_frames(method: str, tmp_path: Path) -> None:
    options = {"sink": "files", "path": str(tmp_path / "out"), "sink_id": "x", "fromat": "jsonl"}
    source = SinkV2DataSource(options)

    refused = refusal(lambda: getattr(source, method)(SCHEMA, False))

    frames = traceback.extract_tb(refused.__traceback__)
    # This test's own frames, then the one the data source re-raised it from.
    assert [Path(frame.filename).name for frame in frames][-1] == "datasource_shared.py"
    assert not [f for f in frames if "_rules" in f.filename or "datasource.py" in f.filename]
    assert not (tmp_path / "out").exists()


def test_an_error_that_is_not_a_refusal_keeps_its_frames(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    options = {
        "sink": "files",
        "path": str(tmp_path / "out"),
        "sink_id": "x",
        "state_store": str(blocker / "state.sqlite"),  # cannot be created
    }
    with pytest.raises(Exception) as caught:  # noqa: PT011  # whatever the store raises
        SinkV2DataSource(options).writer(SCHEMA, False)

    assert not isinstance(caught.value, SinkConfigurationError)
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert len(frames) > 2


# --- apply() takes the store as the data source's state_store option does ---------------


def test_the_translator_takes_a_store_s_path_or_url_as_the_option_does(tmp_path: Path) -> None:
    by_text = SinkTopologyTranslator(state_store=str(tmp_path / "a.sqlite")).state_store
    by_path = SinkTopologyTranslator(state_store=tmp_path / "b.sqlite").state_store
    by_url = SinkTopologyTranslator(state_store="postgresql://app@127.0.0.1:1/shop").state_store

    assert isinstance(by_text, SqliteCommitStateStore)
    assert by_text.path == tmp_path / "a.sqlite"
    assert isinstance(by_path, SqliteCommitStateStore)
    assert by_path.path == tmp_path / "b.sqlite"
    assert isinstance(by_url, PostgresCommitStateStore)
    # Anything else is named before any Spark job, not an AttributeError in the runtime.
    message = str(refusal(lambda: SinkTopologyTranslator(state_store=42)))
    assert message.startswith("state_store must be a commit state store, a SQLite file or")
