"""The async sink base's own cost per record: AsyncSinkWriter with a destination that does nothing.

Whatever a real sink achieves, it cannot beat this: it is the writer's buffering,
batching, rate limiting and completion handling alone, driven engine-free
(``write`` per record, ``flush(True)``, ``close()``)::

    .venv/bin/python benchmarks/async_writer_bench.py
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: F401  # puts the repository on sys.path

from sinkv2.asyncsink import AsyncSinkWriter, AsyncSinkWriterConfiguration
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext


class NoOpWriter(AsyncSinkWriter[int, int]):
    """Accepts every batch at once: only the base's work is left to measure."""

    async def submit_request_entries(self, request_entries: list[int]) -> Sequence[int]:
        return []

    def get_size_in_bytes(self, request_entry: int) -> int:
        return 8


def run(records: int, batch: int, in_flight: int, ordered: bool) -> float:
    context = BasicWriterInitContext()
    writer = NoOpWriter(
        lambda element, _: element,
        context,
        AsyncSinkWriterConfiguration(
            max_batch_size=batch,
            max_in_flight_requests=in_flight,
            max_buffered_requests=batch * in_flight * 2,
            ordering_key=(lambda entry: entry % 1000) if ordered else None,
        ),
    )
    element_context = BasicSinkWriterContext()
    write = writer.write
    start = time.perf_counter()
    for i in range(records):
        write(i, element_context)
    writer.flush(True)
    elapsed = time.perf_counter() - start
    writer.close()
    assert context.metrics.get_num_records_send_counter().get_count() == records
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    for batch, in_flight, ordered in [(100, 4, False), (500, 8, False), (500, 8, True)]:
        rate = run(args.records, batch, in_flight, ordered)
        order = ", ordering_key (1,000 keys)" if ordered else ""
        print(f"batch {batch:>4} x {in_flight} in flight{order:28s} {rate:>12,.0f} records/s")


if __name__ == "__main__":
    main()
