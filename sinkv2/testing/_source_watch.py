"""A source-kit case in a task thread of its own, watched for a call that never returns.

Flink calls a reader's methods in its task's one thread and expects none of them to
block: ``poll_next`` returns ``NOTHING_AVAILABLE`` and completes the future of
``is_available`` when data arrives. A reader that blocks instead (waiting on a queue
for splits that the same thread would hand it) would hang the kit for ever. So
`check_source` runs each case in a daemon thread and waits for it: when the case
shows no progress for ``limit`` seconds, the kit leaves the thread behind and fails,
showing where the source's code is stuck. An unbounded run that emits nothing new
for `STALL_S` seconds (`Stall`) has stopped too.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final, TypeVar

__all__ = ["STALL_S", "Blocked", "Stall", "last_step", "run_watched"]

T = TypeVar("T")
_KIT: Final = str(Path(__file__).resolve().parent)
_SHOWN_FRAMES: Final = 6
STALL_S: Final = 30.0
"""An unbounded run that emits no record for this long (its readers busy, or waking with
nothing) has stopped too: the run ends and reports what it read."""


class Blocked(Exception):
    """A case's thread made no progress for the limit; the message says where it is."""


class Stall:
    """Whether an unbounded run has emitted nothing new for `STALL_S` seconds."""

    def __init__(self) -> None:
        self._seen = -1
        self._since = time.monotonic()

    def stalled(self, emitted: int) -> bool:
        now = time.monotonic()
        if emitted != self._seen:
            self._seen, self._since = emitted, now
        return now - self._since > STALL_S


def last_step(engine: Any) -> object:
    """A progress token of a `LocalSourceEngine`: which one, and its last log line."""
    return (id(engine), *itertools.islice(reversed(engine.log), 1))


def run_watched(case: Callable[[], T], progress: Callable[[], object], limit: float) -> T:
    """Run ``case`` in a daemon thread; its result, its exception, or `Blocked`.

    Args:
        case: The case; it runs in a new thread, so every call into the source does.
        progress: A token that changes whenever the case moves on (read from this thread).
        limit: Seconds without a change of ``progress`` before the case counts as blocked.
    """
    outcome: list[tuple[bool, object]] = []
    done = threading.Event()

    def task() -> None:
        try:
            outcome.append((True, case()))
        except BaseException as error:  # noqa: BLE001  # re-raised in the caller's thread
            outcome.append((False, error))
        finally:
            done.set()

    thread = threading.Thread(target=task, name="sinkv2-source-kit-case", daemon=True)
    thread.start()
    last, since = progress(), time.monotonic()
    while not done.wait(min(0.5, limit / 4)):
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > limit:
            raise Blocked(_where(thread, limit))
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]  # what case() returned


def _where(thread: threading.Thread, limit: float) -> str:
    """Which call into the source ``thread`` is stuck in, and the source's frames."""
    frame = sys._current_frames().get(thread.ident or -1)
    frames: list[FrameType] = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()  # outermost first
    kit = [i for i, f in enumerate(frames) if f.f_code.co_filename.startswith(_KIT)]
    inner = frames[kit[-1] + 1 :] if kit else frames
    caller = frames[kit[-1]] if kit else None
    if not inner:
        return f"the case made no progress for {limit:g} s, in the kit's own code"
    callee = inner[0]
    owner = callee.f_locals.get("self")
    name = callee.f_code.co_name
    qualified = f"{type(owner).__qualname__}.{name}" if owner is not None else name
    engine = caller.f_locals.get("self") if caller is not None else None
    subtask = caller.f_locals.get("subtask") if caller is not None else None
    if owner is not None and owner is getattr(engine, "enumerator", None):
        who = "the enumerator's "
    elif isinstance(subtask, int) and "reader" not in name:
        who = f"reader {subtask}'s "
    else:
        who = ""
    stack = traceback.format_list(traceback.extract_stack(inner[-1])[-_SHOWN_FRAMES:])
    return (
        f"{who}{name}() ({qualified}) has not returned for {limit:g} s: it blocks. The "
        "engine calls the enumerator and every reader in one thread, as Flink's task "
        "does, so a call that waits for something only a later call brings (splits, "
        "notify_no_more_splits(), a checkpoint) waits for ever; poll_next must return "
        "NOTHING_AVAILABLE and complete the future is_available() returns when data "
        "arrives, and no method may wait on another one. A call that only takes long (a "
        "slow query) needs check_source(..., idle_timeout=<seconds>): the kit waits 30 "
        "times idle_timeout. The kit left the thread behind, blocked at:\n"
        + "".join(stack).rstrip()
    )
