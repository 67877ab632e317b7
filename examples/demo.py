"""The demo: files in, a FLIP-27 source, a Sink V2 sink, a driver killed, every record once.

Run it with ``bash scripts/demo`` (or ``.venv/bin/python examples/demo.py [WORK_DIR]
[--files N] [--rows-per-file N]``). It needs local Spark and nothing else: the state
lives in a SQLite file (the embedded default store), no server is involved.

1. Parquet files arrive in ``WORK_DIR/in``, each written under a hidden name and then
   renamed, as a careful producer does.
2. A driver process streams them with ``spark.readStream.format("sinkv2")`` and the
   ``files`` source (`reference_sinks.files.FileSource`, monitoring the directory
   continuously; one file per micro-batch) into ``writeStream.format("sinkv2")`` and
   the ``files`` sink (`reference_sinks.files.FileSink`, Parquet in ``WORK_DIR/out``).
3. Mid-stream, with micro-batches committed and one in flight, the demo SIGKILLs that
   driver: its Python process, its JVM and its workers, so nothing gets to clean up.
   More files arrive while it is down.
4. The same query restarts from its checkpoint location, here under ``availableNow``
   (read what is there, then stop), and the demo counts the output: every input
   record exactly once, nothing left staged.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402  # after the repository is on the path
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402  # after PYSPARK_PYTHON is set
from pyspark.sql import functions as F  # noqa: E402

from sinkv2_spark import register  # noqa: E402

SOURCE_ID: Final = "demo-in"
SINK_ID: Final = "demo-out"
INTERVAL_S: Final = 0.5
"""How often the source lists the input directory."""

TIMEOUT_S: Final = 300.0


@dataclass(frozen=True)
class Layout:
    """Where the demo keeps everything: input, output, checkpoint, store, driver log."""

    work: Path

    @property
    def inputs(self) -> Path:
        """Where the input files arrive."""
        return self.work / "in"

    @property
    def output(self) -> Path:
        """Where the sink writes."""
        return self.work / "out"

    @property
    def checkpoint(self) -> Path:
        """The query's checkpoint location."""
        return self.work / "checkpoint"

    @property
    def store(self) -> Path:
        """The commit state store of the source and the sink (SQLite)."""
        return self.work / "state" / "commit_state.sqlite"

    @property
    def driver_log(self) -> Path:
        """The driver process's output."""
        return self.work / "driver.log"

    def batches(self, log: str) -> list[int]:
        """The micro-batch ids in the checkpoint's ``offsets`` or ``commits`` log."""
        folder = self.checkpoint / log
        if not folder.is_dir():
            return []
        return sorted(int(path.name) for path in folder.iterdir() if path.name.isdigit())

    def staged(self) -> int:
        """Files staged by the sink and not committed."""
        staging = self.output / "_staging"
        return sum(1 for path in staging.rglob("*") if path.is_file())


@dataclass(frozen=True)
class Summary:
    """What the demo found at the end."""

    records_in: int
    records_out: int
    distinct_out: int
    staged_left: int

    @property
    def exactly_once(self) -> bool:
        """Every input record once in the output, nothing staged."""
        return self.records_out == self.distinct_out == self.records_in and not self.staged_left


def write_input(layout: Layout, index: int, rows: int) -> None:
    """Input file ``index``: ids ``[index * rows, (index + 1) * rows)``, renamed into place."""
    first = index * rows
    ids = list(range(first, first + rows))
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": pa.array([f"customer-{i % 97}" for i in ids], pa.string()),
            "amount": pa.array([round(i * 0.37 % 500, 2) for i in ids], pa.float64()),
        }
    )
    hidden = layout.inputs / f".part-{index:03d}.parquet.tmp"  # hidden names are never read
    pq.write_table(table, hidden)
    os.replace(hidden, layout.inputs / f"part-{index:03d}.parquet")


def start_query(spark: SparkSession, layout: Layout, **trigger: Any) -> Any:
    """The demo's streaming query: the files source into the files sink, both through ``sinkv2``."""
    register(spark)
    df = (
        spark.readStream.format("sinkv2")
        .option("source", "files")  # reference_sinks.files.FileSource
        .option("path", str(layout.inputs))
        .option("monitor_interval", str(INTERVAL_S))
        .option("source_id", SOURCE_ID)
        .option("state_store", str(layout.store))
        .option("maxSplitsPerTrigger", "1")
        .load()
    )
    writer = (
        df.writeStream.format("sinkv2")
        .option("sink", "files")  # reference_sinks.files.FileSink
        .option("path", str(layout.output))
        .option("sink_id", SINK_ID)
        .option("state_store", str(layout.store))
        .option("checkpointLocation", str(layout.checkpoint))
    )
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def local_spark() -> SparkSession:
    """Spark on this machine, two cores, quiet."""
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sinkv2-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def drive(work: Path) -> None:
    """The driver process: run the query until it is killed."""
    query = start_query(local_spark(), Layout(work))
    print(f"driver {os.getpid()}: query {query.id} running", flush=True)
    query.awaitTermination()


# --- the driver process, and killing it ---------------------------------------------------------


def _session_groups(session: int) -> set[int]:
    """The process groups with a live process in ``session`` (from ``/proc``)."""
    if not Path("/proc").is_dir():  # not Linux: the session's first group, while it lives
        try:
            os.killpg(session, 0)
        except ProcessLookupError:
            return set()
        return {session}
    groups = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session and fields[0] != "Z":
                groups.add(int(fields[2]))
    return groups


def kill_driver(driver: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the driver's session (Python, JVM, workers), as a crash would."""
    deadline = time.monotonic() + 30
    while True:
        groups = _session_groups(driver.pid)
        if driver.returncode is None:
            groups.add(driver.pid)
        if not groups:
            return
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        driver.poll()
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of groups {sorted(groups)} outlived SIGKILL")
        time.sleep(0.05)


def start_driver(layout: Layout) -> subprocess.Popen[bytes]:
    """The driver, a process of its own session: `kill_driver` kills exactly its processes."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    with layout.driver_log.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--driver", str(layout.work)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


# --- the demo -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Crash:
    """Where run 1 was when its driver was killed."""

    files_written: int
    committed: list[int]
    in_flight: bool
    staged: int


def run_and_kill(layout: Layout, files: int, rows_per_file: int) -> Crash:
    """Run 1: a driver process streams the input while files arrive; SIGKILL it mid-stream."""
    written = 4
    for index in range(written):
        write_input(layout, index, rows_per_file)
    driver = start_driver(layout)
    try:
        deadline, next_file = time.monotonic() + TIMEOUT_S, time.monotonic() + 1
        seen: list[int] = []
        changed = time.monotonic()
        while True:
            if driver.poll() is not None:
                tail = layout.driver_log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the driver ended by itself ({driver.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no two micro-batches committed in {TIMEOUT_S:.0f} s")
            if time.monotonic() > next_file and written < files - 2:
                write_input(layout, written, rows_per_file)
                written, next_file = written + 1, time.monotonic() + 1
            commits, offsets = layout.batches("commits"), layout.batches("offsets")
            in_flight = bool(offsets) and (not commits or offsets[-1] > commits[-1])
            if offsets != seen:
                seen, changed = offsets, time.monotonic()
            idle = time.monotonic() > changed + 10  # everything read: kill it anyway
            if len(commits) >= 2 and (in_flight or idle):
                return Crash(written, commits, in_flight, layout.staged())
            time.sleep(0.02)
    finally:
        kill_driver(driver)


def count_output(session: SparkSession, layout: Layout, records_in: int) -> Summary:
    """What the output holds: rows, distinct ids, ids outside the input's, files staged."""
    counts = (
        session.read.parquet(str(layout.output))
        .agg(
            F.count("*").alias("rows"),
            F.count_distinct("id").alias("distinct"),
            F.count(F.when((F.col("id") < 0) | (F.col("id") >= records_in), 1)).alias("foreign"),
        )
        .first()
    )
    assert counts is not None
    return Summary(
        records_in=records_in,
        records_out=int(counts["rows"]),
        distinct_out=int(counts["distinct"]) - int(counts["foreign"]),
        staged_left=layout.staged(),
    )


def run(
    work: Path,
    *,
    files: int = 10,
    rows_per_file: int = 20_000,
    spark: Callable[[], SparkSession] = local_spark,
    say: Callable[[str], None] = print,
) -> Summary:
    """Run the demo in ``work``; ``spark`` gives the session the restart runs in."""
    if files < 6 or rows_per_file < 1:
        raise ValueError(
            f"the demo needs files >= 6 and rows_per_file >= 1 (got {files}, {rows_per_file})"
        )
    layout = Layout(work)
    layout.inputs.mkdir(parents=True)
    say("sinkv2 demo: files -> FileSource (FLIP-27) -> FileSink (Sink V2), streaming, local Spark")
    say(f"  work directory {work}; commit state store (SQLite) {layout.store}")
    say(f"\n== run 1: a driver process streams {layout.inputs} into {layout.output}")
    arriving = f"; {files - 6} more arrive, one a second" if files > 6 else ""
    say(f"  4 files of {rows_per_file:,} rows are there{arriving}")
    crash = run_and_kill(layout, files, rows_per_file)
    last = crash.committed[-1]
    where = f"micro-batch {last + 1} in flight" if crash.in_flight else "between micro-batches"
    say(
        f"\n== SIGKILL the driver with its JVM: micro-batches 0-{last} committed, {where}, "
        f"{crash.staged} files staged by the sink"
    )
    for index in range(crash.files_written, files):
        write_input(layout, index, rows_per_file)
    say(f"  while it is down, {files - crash.files_written} more files arrive ({files} in all)")

    time.sleep(2 * INTERVAL_S)  # the last file is older than one listing interval: complete
    say("\n== run 2: the same query restarts from its checkpoint location (availableNow)")
    session = spark()
    query = start_query(session, layout, availableNow=True)
    if not query.awaitTermination(TIMEOUT_S):
        query.stop()
        raise RuntimeError(f"the restarted query did not end in {TIMEOUT_S:.0f} s")
    if query.exception() is not None:
        raise RuntimeError(f"the restarted query failed: {query.exception()}")
    again = ", the first one again (the killed one)" if crash.in_flight else ""
    say(f"  micro-batches {last + 1}-{layout.batches('commits')[-1]} ran{again}")

    summary = count_output(session, layout, files * rows_per_file)
    say("\n== counts")
    say(f"  records in   {summary.records_in:>9,}  ({files} files)")
    say(f"  records out  {summary.records_out:>9,}  ({summary.distinct_out:,} distinct input ids)")
    say(f"  staged left  {summary.staged_left:>9,}")
    say("  => every record exactly once" if summary.exactly_once else "  => NOT exactly once")
    return summary


def main(argv: list[str] | None = None) -> None:
    """``demo.py [WORK_DIR] [--files N] [--rows-per-file N]``; ``--driver WORK_DIR`` inside."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "work", nargs="?", help="an empty or new directory (default: a temporary one)"
    )
    parser.add_argument("--files", type=int, default=10, help="input files (at least 6)")
    parser.add_argument("--rows-per-file", type=int, default=20_000)
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.driver:
        drive(Path(args.work))
        return
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="sinkv2-demo-"))
    if work.exists() and any(work.iterdir()):
        sys.exit(f"demo: {work} is not empty; pass a new or empty directory")
    summary = run(work, files=args.files, rows_per_file=args.rows_per_file)
    local_spark().stop()
    if not summary.exactly_once:
        sys.exit(f"demo: expected {summary.records_in:,} records once, found {summary}")


if __name__ == "__main__":
    main()
