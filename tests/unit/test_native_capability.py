"""SupportsNativeFileWrite: recognised, refused when half-implemented, its plan checked."""

import pickle

import pytest

from sinkv2 import (
    END_OF_INPUT,
    NativeFilesWritten,
    NativeFileWrite,
    NativeWriteUnavailable,
    SupportsAttemptCleanup,
    SupportsNativeFileWrite,
    inspect_sink,
)
from sinkv2.errors import SinkConfigurationError, SinkDefinitionError
from sinkv2.runtime import native_attempt_token
from tests.unit.test_capabilities import CommittingSink, Note, PlainSink


class NativeSink(CommittingSink, SupportsAttemptCleanup, SupportsNativeFileWrite[Note]):
    def plan_native_file_write(self, input):
        return NativeFileWrite(format="parquet", location="file:///tmp/x/_staging")

    def native_file_committables(self, written):
        return [Note(written.directory)]

    def clean_up_attempts(self, job_id, kept_attempt_tokens):
        pass


def test_the_mixin_is_recognised_and_listed_last():
    capabilities = inspect_sink(NativeSink())
    assert capabilities.native_file_write
    assert capabilities.mixins[-1] == "SupportsNativeFileWrite"
    assert not inspect_sink(CommittingSink()).native_file_write


def test_a_half_implemented_mixin_names_the_missing_method():
    class Half(CommittingSink, SupportsAttemptCleanup, SupportsNativeFileWrite[Note]):
        def plan_native_file_write(self, input):
            return NativeWriteUnavailable("never")

        def clean_up_attempts(self, job_id, kept_attempt_tokens):
            pass

    with pytest.raises(
        SinkDefinitionError, match=r"native_file_committables\(\) is only inherited"
    ):
        inspect_sink(Half())


def test_it_needs_a_committer_and_attempt_cleanup():
    class Bare(PlainSink, SupportsNativeFileWrite[Note]):
        def plan_native_file_write(self, input):
            return NativeWriteUnavailable("never")

        def native_file_committables(self, written):
            return []

    with pytest.raises(SinkDefinitionError) as caught:
        inspect_sink(Bare())
    message = str(caught.value)
    assert "so it needs SupportsCommitter" in message
    assert "implement clean_up_attempts() too" in message


def test_the_native_attempt_token_starts_with_the_job_id():
    assert native_attempt_token("abc", 7) == "abc-native-7"
    assert native_attempt_token("abc", END_OF_INPUT) == "abc-native-eoi"


def test_a_plan_checks_its_fields_and_names_each_epochs_directory():
    plan = NativeFileWrite(
        format="json", location="file:///data/_staging/", partition_by=["day"], options={"a": "b"}
    )
    assert plan.partition_by == ("day",)
    assert plan.epoch_directory("job-native-3") == "file:///data/_staging/job-native-3"
    with pytest.raises(SinkConfigurationError, match="format must be a non-empty str"):
        NativeFileWrite(format="", location="file:///x")
    with pytest.raises(SinkConfigurationError, match="partition_by must hold non-empty"):
        NativeFileWrite(format="parquet", location="file:///x", partition_by=["", "a"])
    with pytest.raises(SinkConfigurationError, match="spell every option value as a string"):
        NativeFileWrite(format="parquet", location="file:///x", options={"maxRecordsPerFile": 5})


def test_what_was_written_pickles():
    plan = NativeFileWrite(format="parquet", location="file:///x")
    written = NativeFilesWritten(
        job_id="j",
        checkpoint_id=END_OF_INPUT,
        attempt_token="j-native-eoi",
        directory=plan.epoch_directory("j-native-eoi"),
        write=plan,
        records=3,
    )
    assert pickle.loads(pickle.dumps(written)) == written
    assert NativeWriteUnavailable("why").reason == "why"
