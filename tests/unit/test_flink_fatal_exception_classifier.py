"""Flink's ``FatalExceptionClassifierTest``, one test per Java test that maps.

Flink's classifier is a chain of (matcher, wrapper) pairs handed an exception
consumer; sinkv2's is the writer's ``classify_error`` override (a chain is a
sequence of checks ending in ``super().classify_error``), and a fatal error is
raised from the writer as `FatalDestinationError` with the sink's error as its
cause (the message is sinkv2's; "fatal error wrapping" in the docs). Not ported:
``circularChainedFatalExceptionClassifierThrowsException`` and
``emptyChainedFatalExceptionClassifierThrowsException`` - there is no chain
object to build wrongly.
"""

import pytest

from sinkv2.asyncsink import AsyncSinkWriter, AsyncSinkWriterConfiguration, ErrorVerdict
from sinkv2.errors import FatalDestinationError
from tests.unit.flink_async_writers import ELEMENT_CONTEXT, FLINK_RETRIES_FOREVER, FlinkTestContext


class ClassifyingWriter(AsyncSinkWriter[int, int]):
    """Fails its first request with ``error``; ``fatal`` are the classes classified fatal."""

    def __init__(self, error, fatal, fall_through=ErrorVerdict.RETRYABLE):
        self.error = error
        self.fatal = fatal
        self.fall_through = fall_through
        self.landed = []
        super().__init__(
            lambda element, context: element,
            FlinkTestContext().init_context,
            AsyncSinkWriterConfiguration(max_batch_size=1, **FLINK_RETRIES_FOREVER),
        )

    async def submit_request_entries(self, request_entries):
        error, self.error = self.error, None
        if error is not None:
            raise error
        self.landed.extend(request_entries)
        return []

    def get_size_in_bytes(self, request_entry):
        return 4

    def classify_error(self, error):
        for kind in self.fatal:  # the chain, first item first
            if isinstance(error, kind):
                return ErrorVerdict.FATAL
        return self.fall_through


def write_and_flush(writer):
    writer.write(1, ELEMENT_CONTEXT)
    try:
        writer.flush(True)
    finally:
        writer.close()


def test_exceptions_are_wrapped_in_the_containing_exception_when_a_match_is_found():
    """exceptionsAreWrappedInTheContainingExceptionWhenAMatchIsFound"""
    writer = ClassifyingWriter(ZeroDivisionError("Base arithmetic exception"), [ZeroDivisionError])
    with pytest.raises(FatalDestinationError) as raised:
        write_and_flush(writer)
    assert isinstance(raised.value.__cause__, ZeroDivisionError)
    assert str(raised.value.__cause__) == "Base arithmetic exception"
    assert "fatal error: ZeroDivisionError: Base arithmetic exception" in str(raised.value)


def test_no_exception_is_thrown_if_the_exception_does_not_match_the_one_expected():
    """noExceptionIsThrownIfTheExceptionDoesNotMatchTheOneExpected

    The unmatched error (Flink's ``NullPointerException``, here an
    ``AttributeError`` of ``None``) is not fatal: the batch is retried and lands.
    """
    try:
        None.to_string()
    except AttributeError as error:
        caught = error
    writer = ClassifyingWriter(caught, [ZeroDivisionError])
    write_and_flush(writer)
    assert writer.landed == [1]


def test_chained_fatal_exception_classifier_accept_exceptions_on_the_first_item_of_chain():
    """chainedFatalExceptionClassifierAcceptExceptionsOnTheFirstItemOfChain"""
    writer = ClassifyingWriter(
        ZeroDivisionError("Base arithmetic exception"), [ZeroDivisionError, AttributeError]
    )
    with pytest.raises(FatalDestinationError) as raised:
        write_and_flush(writer)
    assert isinstance(raised.value.__cause__, ZeroDivisionError)
    assert str(raised.value.__cause__) == "Base arithmetic exception"


def test_chained_fatal_exception_classifier_accept_exceptions_on_the_last_item_of_chain():
    """chainedFatalExceptionClassifierAcceptExceptionsOnTheLastItemOfChain"""
    writer = ClassifyingWriter(
        AttributeError("Base NullPointerException"), [ZeroDivisionError, AttributeError]
    )
    with pytest.raises(FatalDestinationError) as raised:
        write_and_flush(writer)
    assert isinstance(raised.value.__cause__, AttributeError)
    assert str(raised.value.__cause__) == "Base NullPointerException"
