"""The arguments every door takes, checked one way: checkpoint id, sink id, guarantee.

``apply()`` takes them as Python values; the data-source doors parse their string
options into the same values and check them here too, so each rule and its message
is written once.
"""

from __future__ import annotations

from typing import Final

from sinkv2 import END_OF_INPUT, DeliveryGuarantee, SinkCapabilities
from sinkv2.errors import SinkConfigurationError

__all__ = ["check_checkpoint_id", "check_guarantee", "check_sink_id"]

_MAX_CHECKPOINT_ID: Final = END_OF_INPUT - 1


def check_checkpoint_id(checkpoint_id: object) -> int | None:
    if checkpoint_id is None:
        return None
    if (
        not isinstance(checkpoint_id, int)
        or isinstance(checkpoint_id, bool)
        or not 1 <= checkpoint_id <= _MAX_CHECKPOINT_ID
    ):
        raise SinkConfigurationError(
            f"checkpoint_id must be a positive int below END_OF_INPUT (got {checkpoint_id!r} "
            f"of type {type(checkpoint_id).__name__}); use a number that identifies this "
            "run's data, such as a batch number, or leave it out"
        )
    return checkpoint_id


def check_sink_id(sink_id: object, sink: object) -> str:
    if sink_id is None:
        cls = type(sink)
        return f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(sink_id, str) or not sink_id.strip():
        raise SinkConfigurationError(
            f"sink_id must be a non-empty str (got {sink_id!r} of type "
            f"{type(sink_id).__name__}); name the destination, e.g. 'orders-parquet'"
        )
    return sink_id


def check_guarantee(guarantee: object, capabilities: SinkCapabilities) -> None:
    if guarantee is None:
        return
    if not isinstance(guarantee, DeliveryGuarantee):
        raise SinkConfigurationError(
            f"guarantee must be a DeliveryGuarantee (got {guarantee!r}); e.g. "
            "guarantee=DeliveryGuarantee.EXACTLY_ONCE"
        )
    order = [
        DeliveryGuarantee.NONE,
        DeliveryGuarantee.AT_LEAST_ONCE,
        DeliveryGuarantee.EXACTLY_ONCE,
    ]
    offered = capabilities.delivery_guarantee
    if order.index(guarantee) > order.index(offered):
        raise SinkConfigurationError(
            f"{capabilities.sink_type} cannot give {guarantee.name}: without a committer "
            "(SupportsCommitter) its writers make data visible as they write, so a replayed "
            f"micro-batch is written twice; it gives {offered.name} at best. Use a sink "
            "with a committer, or ask for a weaker guarantee"
        )
