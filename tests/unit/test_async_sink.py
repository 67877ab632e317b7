"""`AsyncSinkBase`: a Sink with writer state, and what the runtime and kit see of it."""

import pytest

from sinkv2 import inspect_sink
from sinkv2.asyncsink import (
    AsyncSinkBase,
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    MsgpackRequestStateSerializer,
    RequestEntryWrapper,
)
from sinkv2.errors import SinkConfigurationError, SinkDefinitionError
from tests.unit.async_writers import ScriptedWriter, config


class ScriptedSink(AsyncSinkBase[int, int]):
    def restore_writer(self, context, recovered_state):
        return ScriptedWriter(
            self.configuration,
            states=list(recovered_state),
            converter=self.element_converter,
            context=context,
        )


def test_an_async_sink_is_a_sink_with_writer_state():
    capabilities = inspect_sink(ScriptedSink(lambda element, context: element, config()))
    assert capabilities.writer_state
    assert not capabilities.committer


def test_create_writer_is_restore_writer_without_state():
    sink = ScriptedSink(lambda element, context: element, config())
    writer = sink.create_writer(None)
    try:
        assert writer.buffered() == []
    finally:
        writer.close()


def test_restore_writer_gets_the_buffered_entries():
    sink = ScriptedSink(lambda element, context: element, config())
    state = BufferedRequestState([RequestEntryWrapper(1, 1), RequestEntryWrapper(2, 1)])
    writer = sink.restore_writer(None, [state])
    try:
        writer.flush(True)
        assert writer.landed == [1, 2]
    finally:
        writer.close()


def test_the_default_state_serializer_is_msgpack():
    sink = ScriptedSink(lambda element, context: element)
    assert isinstance(sink.get_writer_state_serializer(), MsgpackRequestStateSerializer)
    assert sink.configuration == AsyncSinkWriterConfiguration()


def test_a_sink_without_a_converter_is_refused():
    with pytest.raises(SinkDefinitionError, match="element_converter must have apply"):
        ScriptedSink("not a converter")


def test_a_configuration_of_the_wrong_type_is_refused():
    with pytest.raises(SinkConfigurationError, match="must be an AsyncSinkWriterConfiguration"):
        ScriptedSink(lambda element, context: element, {"max_batch_size": 5})
