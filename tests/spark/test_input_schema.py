"""Writers and committers see the input's schema as Arrow (sinkv2 extension)."""

import json
from pathlib import Path

import attrs
import pyarrow as pa
import pytest

from sinkv2 import AttrsMsgpackSerializer, Committer
from sinkv2.runtime import CommitStatus

pytestmark = pytest.mark.spark


@attrs.frozen
class Subtask:
    subtask_id: int


class SchemaWriter:
    """Records the schema its context gives and the schema of the batches it gets."""

    def __init__(self, base: Path, context) -> None:
        self.base = base
        self.context = context
        self.batches: list[str] = []

    def write_arrow_batch(self, batch, context) -> None:
        self.batches.append(str(batch.schema))

    def write(self, element, context) -> None:
        raise AssertionError("an Arrow writer gets batches")

    def flush(self, end_of_input: bool) -> None:
        pass

    def prepare_commit(self):
        return [Subtask(self.context.get_subtask_id())]

    def write_watermark(self, watermark) -> None:
        pass

    def close(self) -> None:
        path = self.base / f"writer-{self.context.get_attempt_token()}.json"
        schema = self.context.get_input_schema()
        path.write_text(
            json.dumps({"context": schema.serialize().to_pybytes().hex(), "batches": self.batches})
        )


class SchemaCommitter(Committer[Subtask]):
    def __init__(self, base: Path, context) -> None:
        (base / "committer.bin").write_bytes(context.get_input_schema().serialize().to_pybytes())

    def commit(self, requests) -> None:
        pass

    def close(self) -> None:
        pass


class SchemaSink:
    def __init__(self, base: Path) -> None:
        self.base = base

    def create_writer(self, context):
        return SchemaWriter(self.base, context)

    def create_committer(self, context):
        return SchemaCommitter(self.base, context)

    def get_committable_serializer(self):
        return AttrsMsgpackSerializer(Subtask)


def read_schema(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def test_writers_and_the_committer_get_the_schema_the_batches_have(spark, translator, tmp_path):
    df = spark.sql(
        "SELECT id, cast(id AS string) AS name, cast(id AS decimal(12, 2)) AS amount, "
        "timestamp'2024-03-30 12:00:00' AS at, array(id, id) AS pair, "
        "named_struct('x', id, 'y', 'why') AS nested FROM range(50)"
    ).repartition(2)
    result = translator.apply(df, SchemaSink(tmp_path), sink_id="schema")
    assert result.status is CommitStatus.COMMITTED
    writers = [json.loads(p.read_text()) for p in tmp_path.glob("writer-*.json")]
    assert len(writers) == 2
    for seen in writers:
        schema = read_schema(bytes.fromhex(seen["context"]))
        assert schema.names == ["id", "name", "amount", "at", "pair", "nested"]
        assert schema.field("amount").type == pa.decimal128(12, 2)
        assert {str(schema)} >= set(seen["batches"])  # exactly what the batches carry
    committer = read_schema((tmp_path / "committer.bin").read_bytes())
    assert committer.equals(read_schema(bytes.fromhex(writers[0]["context"])))
