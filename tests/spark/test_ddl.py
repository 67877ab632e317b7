"""`ddl_of`: Spark DDL derived from sinkv2's Arrow table schemas (one spelling each)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import _parse_datatype_string

from sinkv2.runtime.committables import COMMITTABLE_SCHEMA
from sinkv2_spark._engine.ddl import ddl_of
from sinkv2_spark._engine.writer_task import WRITER_OUTPUT_SCHEMA


@pytest.mark.parametrize("schema", [COMMITTABLE_SCHEMA, WRITER_OUTPUT_SCHEMA])
def test_the_ddl_names_every_column_with_its_spark_type(schema: pa.Schema, spark):
    from pyspark.sql.pandas.types import from_arrow_schema

    parsed = _parse_datatype_string(ddl_of(schema))
    assert [(f.name, f.dataType) for f in parsed.fields] == [
        (f.name, f.dataType) for f in from_arrow_schema(schema).fields
    ]


def test_a_type_without_a_ddl_name_is_refused_by_name():
    with pytest.raises(TypeError, match="no Spark DDL name for Arrow type double"):
        ddl_of(pa.schema([("x", pa.float64())]))
