"""What a record limit costs the driver: counting a split before it is cut (issue 24).

A record limit (``maxRecordsPerTrigger``) cuts a split only when its record count is
known on the driver. Measured here, interleaved (A, B, A, B...), on the same files:

- ``footer``: `FileSource.cut_split` of a whole Parquet file with a limit (its footer
  read on the driver: the cost per file that a limit adds, once per file);
- ``parquet read``: the same file read by the source's reader (what a task pays);
- ``count lines``: counting the newlines of a JSON lines file of the same rows on
  the driver (the cheapest count one could do for JSON lines; a CSV record may span
  lines, so even this is not a CSV count);
- ``jsonl read``: the same file read by the source's reader.

Run by hand: ``python benchmarks/record_limit_bench.py [--rows N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from reference_sinks._row_cut import COUNT_WHEN_CUT
from reference_sinks.files import FileSource
from reference_sinks.files._source_listing import make_splits


def _table(rows: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"name-{i % 1000}" for i in range(rows)]),
            "score": pa.array([i / 7 for i in range(rows)], pa.float64()),
        }
    )


def _count_lines(path: Path) -> int:
    count = 0
    with path.open("rb") as handle:
        while block := handle.read(8 << 20):
            count += block.count(b"\n")
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp())
    table = _table(args.rows)
    (base / "p").mkdir()
    (base / "j").mkdir()
    pq.write_table(table, base / "p" / "a.parquet")
    jsonl = base / "j" / "a.jsonl"
    with jsonl.open("w") as out:
        for row in table.to_pylist():
            out.write(f'{{"id": {row["id"]}, "name": "{row["name"]}", "score": {row["score"]}}}\n')
    parquet_source = FileSource(base / "p")
    json_source = FileSource(base / "j", "jsonl", schema=table.schema)
    fs, root = parquet_source.resolve()
    (status,) = parquet_source._list(fs, root)
    (split,) = make_splits(fs, status, "parquet", 1 << 40)
    (jsplit,) = make_splits(fs, json_source._list(fs, str(base / "j"))[0], "jsonl", 1 << 40)

    def footer() -> None:
        assert parquet_source.cut_split(split, COUNT_WHEN_CUT, 1000).records == 1000

    def parquet_read() -> None:
        assert sum(b.num_rows for b in parquet_source._read(split)) == args.rows

    def count_lines() -> None:
        assert _count_lines(jsonl) == args.rows

    def jsonl_read() -> None:
        assert sum(b.num_rows for b in json_source._read(jsplit)) == args.rows

    cases: dict[str, Callable[[], None]] = {
        "footer (cut with a limit)": footer,
        "parquet read (task)": parquet_read,
        "count lines (driver)": count_lines,
        "jsonl read (task)": jsonl_read,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            began = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - began)
    print(f"rows={args.rows:,} parquet={status.size:,} B jsonl={jsonl.stat().st_size:,} B")
    for name, runs in times.items():
        shown = ", ".join(f"{t * 1000:.1f}" for t in runs)
        print(f"| {name} | {statistics.median(runs) * 1000:.2f} | {shown} |")


if __name__ == "__main__":
    main()
