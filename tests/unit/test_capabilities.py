"""inspect_sink: which mixins a sink implements, and clear errors for half-implemented ones."""

import attrs
import pytest

from sinkv2 import (
    AttrsMsgpackSerializer,
    CommittingSinkWriter,
    DeliveryGuarantee,
    Sink,
    SinkWriter,
    StatefulSinkWriter,
    SupportsCommittedCheckpoints,
    SupportsCommitter,
    SupportsPostCommitTopology,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    SupportsWriterState,
    inspect_sink,
)
from sinkv2.errors import SinkDefinitionError


@attrs.frozen
class Note:
    text: str


SERIALIZER = AttrsMsgpackSerializer(Note)


class Writer(CommittingSinkWriter[str, Note], StatefulSinkWriter[str, Note]):
    def write(self, element, context):
        pass

    def flush(self, end_of_input):
        pass

    def prepare_commit(self):
        return []

    def snapshot_state(self, checkpoint_id):
        return []

    def close(self):
        pass


class Committer:
    def commit(self, requests):
        pass

    def close(self):
        pass


class PlainSink(Sink[str]):
    def create_writer(self, context):
        return Writer()


class CommittingSink(PlainSink, SupportsCommitter[Note]):
    def create_committer(self, context):
        return Committer()

    def get_committable_serializer(self):
        return SERIALIZER


class FullSink(
    CommittingSink,
    SupportsWriterState[str, Note],
    SupportsWriterState.WithCompatibleState,
    SupportsPreWriteTopology[str],
    SupportsPreCommitTopology[Note, Note],
    SupportsPostCommitTopology[Note],
):
    def restore_writer(self, context, recovered_state):
        return Writer()

    def get_writer_state_serializer(self):
        return SERIALIZER

    def get_compatible_writer_state_names(self):
        return ["legacy-file-sink"]

    def add_pre_write_topology(self, input):
        return input

    def add_pre_commit_topology(self, committables):
        return committables

    def get_write_result_serializer(self):
        return SERIALIZER

    def add_post_commit_topology(self, committables):
        pass


def test_plain_sink_is_at_least_once_with_no_mixins():
    capabilities = inspect_sink(PlainSink())
    assert capabilities.mixins == ()
    assert capabilities.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE
    assert str(capabilities) == "PlainSink: Sink"
    assert capabilities.guarantee_text == (
        "at-least-once at best (no committer) - verify with sinkv2.testing"
    )


def test_committing_sink_can_be_exactly_once():
    capabilities = inspect_sink(CommittingSink())
    assert capabilities.committer
    assert capabilities.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
    # The mixins only allow it: inspect_sink cannot see an idempotent committer.
    assert capabilities.guarantee_text == "exactly-once capable - verify with sinkv2.testing"


def test_full_sink_reports_every_mixin_in_pipeline_order():
    capabilities = inspect_sink(FullSink())
    assert capabilities.mixins == (
        "SupportsPreWriteTopology",
        "SupportsWriterState",
        "WithCompatibleState",
        "SupportsPreCommitTopology",
        "SupportsCommitter",
        "SupportsPostCommitTopology",
    )


def test_structural_sink_without_subclassing_is_recognised():
    class DuckSink:
        def create_writer(self, context):
            return Writer()

        def create_committer(self, context):
            return Committer()

        def get_committable_serializer(self):
            return SERIALIZER

    assert inspect_sink(DuckSink()).committer


# --- half-implemented sinks, one per mixin -------------------------------------------------


def _error(sink) -> str:
    with pytest.raises(SinkDefinitionError) as caught:
        inspect_sink(sink)
    assert isinstance(caught.value, TypeError)
    return str(caught.value)


def test_sink_without_create_writer():
    class NoWriter(Sink[str]):
        pass

    message = _error(NoWriter())
    assert "NoWriter is a sink that does not implement what it claims" in message
    assert (
        "Sink: create_writer() is only inherited from the interface's empty declaration" in message
    )
    assert (
        "define create_writer(self, context: WriterInitContext) -> SinkWriter[InputT_contra]"
        in message
    )


def test_committer_mixin_without_serializer_getter():
    class NoSerializer(PlainSink, SupportsCommitter[Note]):
        def create_committer(self, context):
            return Committer()

    message = _error(NoSerializer())
    assert "SupportsCommitter: get_committable_serializer()" in message
    assert "define get_committable_serializer(self)" in message


def test_committer_whose_serializer_is_missing():
    class ReturnsNone(CommittingSink):
        def get_committable_serializer(self):
            return None

    message = _error(ReturnsNone())
    assert "get_committable_serializer() returned None of type NoneType" in message
    assert "AttrsMsgpackSerializer(MyCommittable)" in message


def test_serializer_getter_that_raises_is_reported():
    class Raises(CommittingSink):
        def get_committable_serializer(self):
            raise ImportError("no module named fastavro")

    assert "get_committable_serializer() raised ImportError: no module named fastavro" in _error(
        Raises()
    )


def test_serializer_with_a_bad_version_is_reported():
    class BadVersion:
        def get_version(self):
            return -1

        def serialize(self, obj):
            return b""

        def deserialize(self, version, data):
            return None

    class Sink_(CommittingSink):
        def get_committable_serializer(self):
            return BadVersion()

    assert "get_committable_serializer().get_version() must return an int" in _error(Sink_())


def test_writer_state_mixin_without_restore_writer():
    class NoRestore(PlainSink, SupportsWriterState[str, Note]):
        def get_writer_state_serializer(self):
            return SERIALIZER

    assert "SupportsWriterState: restore_writer() is only inherited" in _error(NoRestore())


def test_compatible_state_without_writer_state():
    class OnlyCompatible(PlainSink, SupportsWriterState.WithCompatibleState):
        def get_compatible_writer_state_names(self):
            return ["old"]

    assert "only makes sense with SupportsWriterState" in _error(OnlyCompatible())


def test_pre_write_topology_without_its_method():
    class NoPreWrite(PlainSink, SupportsPreWriteTopology[str]):
        pass

    assert "SupportsPreWriteTopology: add_pre_write_topology()" in _error(NoPreWrite())


def test_pre_commit_topology_without_write_result_serializer():
    class NoWriteResultSerializer(CommittingSink, SupportsPreCommitTopology[Note, Note]):
        def add_pre_commit_topology(self, committables):
            return committables

    message = _error(NoWriteResultSerializer())
    assert "SupportsPreCommitTopology: get_write_result_serializer()" in message


def test_pre_commit_topology_without_a_committer_is_refused():
    class TopologyOnly:
        def create_writer(self, context):
            return Writer()

        def add_pre_commit_topology(self, committables):
            return committables

        def get_write_result_serializer(self):
            return SERIALIZER

    message = _error(TopologyOnly())
    assert "SupportsPreCommitTopology: create_committer() is missing" in message
    assert "SupportsPreCommitTopology: get_committable_serializer() is missing" in message


def test_post_commit_topology_without_its_method():
    class NoPostCommit(CommittingSink, SupportsPostCommitTopology[Note]):
        pass

    assert "SupportsPostCommitTopology: add_post_commit_topology()" in _error(NoPostCommit())


def test_flink_camel_case_names_get_the_snake_case_name_to_use():
    class JavaStyle(PlainSink):
        def createCommitter(self, context):  # Java name: the mistake under test
            return Committer()

        def getCommittableSerializer(self):  # Java name: the mistake under test
            return SERIALIZER

    message = _error(JavaStyle())
    assert "create_committer() is missing, but createCommitter() is defined" in message
    assert "rename createCommitter to create_committer" in message
    assert "rename getCommittableSerializer to get_committable_serializer" in message


def test_every_problem_is_listed_at_once():
    class Many(Sink[str], SupportsCommitter[Note], SupportsWriterState[str, Note]):
        pass

    message = _error(Many())
    for method in (
        "create_writer",
        "create_committer",
        "get_committable_serializer",
        "restore_writer",
        "get_writer_state_serializer",
    ):
        assert f"{method}()" in message


def test_non_callable_attribute_is_not_a_method():
    class Attribute(PlainSink, SupportsCommitter[Note]):
        create_committer = "committer"

        def get_committable_serializer(self):
            return SERIALIZER

    assert "create_committer is 'committer' of type str, not a method" in _error(Attribute())


def test_passing_the_class_instead_of_an_instance():
    with pytest.raises(
        SinkDefinitionError, match=r"got the class PlainSink; pass PlainSink\(\.\.\.\)"
    ):
        inspect_sink(PlainSink)


# --- writers and committers the sink hands out ----------------------------------------------


def test_committing_sink_needs_a_committing_writer():
    class PlainWriter(SinkWriter[str]):
        def write(self, element, context):
            pass

        def flush(self, end_of_input):
            pass

        def close(self):
            pass

    capabilities = inspect_sink(CommittingSink())
    with pytest.raises(SinkDefinitionError) as caught:
        capabilities.check_writer(PlainWriter())
    message = str(caught.value)
    assert "writer of CommittingSink" in message
    assert (
        "CommittingSinkWriter (the sink implements SupportsCommitter): prepare_commit()" in message
    )


def test_stateful_sink_needs_a_stateful_writer():
    class NoSnapshot(CommittingSinkWriter[str, Note]):
        def write(self, element, context):
            pass

        def flush(self, end_of_input):
            pass

        def prepare_commit(self):
            return []

        def close(self):
            pass

    capabilities = inspect_sink(FullSink())
    with pytest.raises(SinkDefinitionError, match=r"StatefulSinkWriter .*snapshot_state\(\)"):
        capabilities.check_writer(NoSnapshot())


def test_writer_with_java_names_is_told_the_python_ones():
    class JavaWriter:
        def write(self, element, context):
            pass

        def flush(self, end_of_input):
            pass

        def prepareCommit(self):  # Java name: the mistake under test
            return []

        def close(self):
            pass

    with pytest.raises(SinkDefinitionError, match="rename prepareCommit to prepare_commit"):
        inspect_sink(CommittingSink()).check_writer(JavaWriter())


def test_complete_writer_and_committer_pass():
    capabilities = inspect_sink(FullSink())
    capabilities.check_writer(Writer())
    capabilities.check_committer(Committer())


def test_committer_without_close():
    class NoClose:
        def commit(self, requests):
            pass

    with pytest.raises(
        SinkDefinitionError, match=r"(?s)committer of CommittingSink.*close\(\) is missing"
    ):
        inspect_sink(CommittingSink()).check_committer(NoClose())


# --- sinkv2 extensions ------------------------------------------------------------------------


def test_cleanup_and_abort_extensions_are_recognised():
    from sinkv2 import SupportsAbort, SupportsAttemptCleanup

    class Tidy(CommittingSink, SupportsAttemptCleanup, SupportsAbort[Note]):
        def clean_up_attempts(self, job_id, kept_attempt_tokens):
            pass

        def abort(self, committables):
            pass

    capabilities = inspect_sink(Tidy())
    assert capabilities.attempt_cleanup
    assert capabilities.abort
    assert capabilities.mixins[-2:] == ("SupportsAttemptCleanup", "SupportsAbort")


def test_half_implemented_cleanup_extension_names_the_method():
    from sinkv2 import SupportsAttemptCleanup

    class Untidy(CommittingSink, SupportsAttemptCleanup):
        def cleanUpAttempts(self, job_id, kept):  # Java name: the mistake under test
            pass

    message = _error(Untidy())
    assert (
        "SupportsAttemptCleanup: clean_up_attempts() is missing, but cleanUpAttempts()" in message
    )


def test_abort_mixin_without_abort():
    from sinkv2 import SupportsAbort

    class NoAbort(CommittingSink, SupportsAbort[Note]):
        pass

    assert "SupportsAbort: abort() is only inherited" in _error(NoAbort())


def test_arrow_writer_extension_is_detected_on_writers():
    from sinkv2 import ArrowSinkWriter, SinkCapabilities

    class Columnar(Writer, ArrowSinkWriter):
        def write_arrow_batch(self, batch, context):
            pass

    class Declared(Writer, ArrowSinkWriter):
        pass

    assert SinkCapabilities.is_arrow_writer(Columnar())
    assert not SinkCapabilities.is_arrow_writer(Writer())
    assert not SinkCapabilities.is_arrow_writer(Declared())  # only the empty declaration


class MarkingSink(CommittingSink, SupportsCommittedCheckpoints):
    def is_checkpoint_committed(self, sink_id, checkpoint_id):
        return False

    def mark_checkpoint_committed(self, sink_id, checkpoint_id):
        pass


class MarkingWithoutCommitter(PlainSink):
    def is_checkpoint_committed(self, sink_id, checkpoint_id):
        return False

    def mark_checkpoint_committed(self, sink_id, checkpoint_id):
        pass


def test_committed_checkpoints_is_reported_and_needs_a_committer():
    capabilities = inspect_sink(MarkingSink())
    assert capabilities.committed_checkpoints
    assert "SupportsCommittedCheckpoints" in capabilities.mixins
    assert not inspect_sink(CommittingSink()).committed_checkpoints
    with pytest.raises(SinkDefinitionError, match="marks checkpoints its committer committed"):
        inspect_sink(MarkingWithoutCommitter())


def test_committed_checkpoints_needs_both_methods():
    class HalfMarking(CommittingSink, SupportsCommittedCheckpoints):
        def is_checkpoint_committed(self, sink_id, checkpoint_id):
            return False

    with pytest.raises(SinkDefinitionError, match="mark_checkpoint_committed"):
        inspect_sink(HalfMarking())
