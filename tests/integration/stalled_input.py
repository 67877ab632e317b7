"""A task attempt that stalls mid-write, on either writer path, for tests that kill around it.

`StalledInput` is a pass-through ``mapInArrow`` function: the attempts it names hand
the write ``after`` rows, record ``<markers>/stalled-<partition>-<attempt>`` (holding
the Python worker's pid; the first such attempt only), and then sleep - with part of
their partition written, by the sink's writer or by Spark's (a half-written attempt
file under ``_temporary``). Other attempts pass everything through at once. Every
attempt records ``seen-<partition>-<attempt>``.

`with_stalled_input` puts it where the writes happen:

- the sink's own writers: around the input DataFrame (same stage as the writers when
  the sink's pre-write topology adds no shuffle);
- the native path: into the plan's input, after the pre-write topology, in the stage
  that Spark's writer runs in (a subclass of the sink's class overrides
  ``plan_native_file_write``, as ``sinkv2_spark.testing.with_task_failures`` does).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs


@attrs.frozen
class StalledInput:
    """``mapInArrow`` pass-through; the named (partition, attempt)s stall after ``after`` rows."""

    markers: str
    attempts: frozenset[tuple[int, int]]
    after: int = 50
    seconds: float = 3600.0

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None
        key = (task.partitionId(), task.attemptNumber())
        (Path(self.markers) / f"seen-{key[0]}-{key[1]}").touch()
        stall = key in self.attempts
        seen = 0
        for batch in batches:
            if stall and seen + batch.num_rows >= self.after:
                head = self.after - seen
                if head:
                    yield batch.slice(0, head)
                if self._claim(key):
                    time.sleep(self.seconds)  # killed (or outrun by a speculative copy) meanwhile
                yield batch.slice(head)
                stall = False
            else:
                yield batch
            seen += batch.num_rows

    def _claim(self, key: tuple[int, int]) -> bool:
        """Whether this is the first attempt to stall as ``key`` (atomic across processes).

        A stage that runs again (say, after a lost executor's shuffle output) numbers
        its task attempts from 0 again; only the first stalls.
        """
        marker = Path(self.markers) / f"stalled-{key[0]}-{key[1]}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True


def stalled(df: Any, stall: StalledInput) -> Any:
    """``df`` through ``stall``, columns renamed by position around it."""
    names = list(df.columns)
    positional = df.toDF(*(f"_c{i}" for i in range(len(names))))
    return positional.mapInArrow(stall, positional.schema).toDF(*names)


def with_stalled_input(sink: Any, stall: StalledInput) -> Any:
    """A copy of ``sink`` whose native write's input stalls as ``stall`` says.

    On the sink's own writers (no native write planned), the input is unchanged: stall
    the DataFrame handed to ``apply`` with `stalled` instead.
    """
    import attrs as attrs_module

    from sinkv2 import NativeFileWrite

    base = type(sink)

    def plan_native_file_write(self: Any, input: Any) -> Any:
        plan = base.plan_native_file_write(self, input)
        if not isinstance(plan, NativeFileWrite):
            return plan
        source = plan.input if plan.input is not None else input
        return attrs_module.evolve(plan, input=stalled(source, stall))

    namespace = {"plan_native_file_write": plan_native_file_write}
    stalling = type(f"{base.__name__}Stalled", (base,), namespace)
    copied = copy.copy(sink)
    object.__setattr__(copied, "__class__", stalling)
    return copied
