"""rebuild_type: every leaf of a nested Arrow type changed, the nesting kept."""

import pyarrow as pa

from reference_sinks._arrow_types import rebuild_type


def _utc(kind: pa.DataType) -> pa.DataType:
    return pa.timestamp("us", "UTC") if pa.types.is_timestamp(kind) else kind


def test_leaves_at_every_depth_change_and_the_nesting_stays():
    zoned = pa.timestamp("us", "Asia/Tokyo")
    kind = pa.struct(
        [
            pa.field("at", zoned, nullable=False),
            pa.field("ats", pa.large_list(pa.list_(zoned))),
            pa.field("by", pa.map_(zoned, pa.struct([("n", pa.int64())]), keys_sorted=True)),
        ]
    )
    assert rebuild_type(kind, _utc) == pa.struct(
        [
            pa.field("at", pa.timestamp("us", "UTC"), nullable=False),
            pa.field("ats", pa.large_list(pa.list_(pa.timestamp("us", "UTC")))),
            pa.field(
                "by",
                pa.map_(
                    pa.timestamp("us", "UTC"), pa.struct([("n", pa.int64())]), keys_sorted=True
                ),
            ),
        ]
    )
    assert rebuild_type(zoned, _utc) == pa.timestamp("us", "UTC")
    assert rebuild_type(kind) == kind


def test_struct_fields_pass_through_their_hook_at_every_depth():
    kind = pa.list_(pa.struct([pa.field("s", pa.struct([pa.field("x", pa.int8(), False)]), False)]))
    relaxed = rebuild_type(kind, struct_field=lambda field: field.with_nullable(True))
    assert relaxed == pa.list_(pa.struct([pa.field("s", pa.struct([pa.field("x", pa.int8())]))]))
