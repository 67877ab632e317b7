"""`SinkContractTests`: the kit as a test class for pytest or unittest-style runners."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from hypothesis import strategies as st

from sinkv2._delivery import DeliveryGuarantee
from sinkv2.testing._check import check_lifecycle, check_serializer_properties, check_streaming
from sinkv2.testing._sut import SinkUnderTest

__all__ = ["SinkContractTests"]


class SinkContractTests:
    """Subclass it to get the contract tests of `check_sink` as ``test_*`` methods.

    Required: `make_sink`, `elements`, and the class attribute `guarantee`.
    Optional class attributes: `max_examples`, `max_parallelism`, `golden_samples`.

    Name the subclass ``Test...`` so pytest collects it::

        class TestMySink(SinkContractTests):
            guarantee = DeliveryGuarantee.EXACTLY_ONCE

            def make_sink(self) -> SinkUnderTest:
                directory = tempfile.mkdtemp()
                return SinkUnderTest(MySink(directory), read_back=..., close=...)

            def elements(self) -> st.SearchStrategy[object]:
                return st.fixed_dictionaries({"id": st.integers()})

    `make_sink` is called once per generated example, outside pytest's fixtures:
    create (and, in ``close``, remove) the destination there.
    """

    guarantee: ClassVar[DeliveryGuarantee]
    """The guarantee the sink declares."""
    max_examples: ClassVar[int] = 200
    """Examples per test; ``--sinkv2-examples`` or ``$SINKV2_KIT_EXAMPLES`` override it."""
    max_parallelism: ClassVar[int] = 4
    """The most writers at once."""
    golden_samples: ClassVar[Mapping[str, Mapping[int, tuple[bytes, object]]] | None] = None
    """Bytes older serializer versions wrote, see `check_sink`."""

    def make_sink(self) -> SinkUnderTest:
        """A `SinkUnderTest` on a fresh destination."""
        raise NotImplementedError(
            f"{type(self).__qualname__} must define make_sink() returning a SinkUnderTest"
        )

    def elements(self) -> st.SearchStrategy[object]:
        """The elements to write."""
        raise NotImplementedError(
            f"{type(self).__qualname__} must define elements() returning a hypothesis strategy"
        )

    def _guarantee(self) -> DeliveryGuarantee:
        guarantee = getattr(self, "guarantee", None)
        if not isinstance(guarantee, DeliveryGuarantee):
            raise TypeError(
                f"{type(self).__qualname__}.guarantee must be a DeliveryGuarantee (got "
                f"{guarantee!r}); set e.g. guarantee = DeliveryGuarantee.EXACTLY_ONCE"
            )
        return guarantee

    def test_serializers_golden_samples_and_pickling(self) -> None:
        """Stage 1: serializers round-trip, golden samples read, everything pickles."""
        check_serializer_properties(
            self.make_sink,
            guarantee=self._guarantee(),
            elements=self.elements(),
            max_examples=self.max_examples,
            max_parallelism=self.max_parallelism,
            golden_samples=self.golden_samples,
        )

    def test_lifecycle_keeps_the_delivery_guarantee(self) -> None:
        """Stage 2: the lifecycle state machine with crashes, restores and rescales."""
        check_lifecycle(
            self.make_sink,
            guarantee=self._guarantee(),
            elements=self.elements(),
            max_examples=self.max_examples,
            max_parallelism=self.max_parallelism,
        )

    def test_streaming_checkpoints_keep_the_delivery_guarantee(self) -> None:
        """Stage 3: streams of checkpoints through the real runtime, with restarts."""
        check_streaming(
            self.make_sink,
            guarantee=self._guarantee(),
            elements=self.elements(),
            max_examples=self.max_examples,
            max_parallelism=self.max_parallelism,
        )
