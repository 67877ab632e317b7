"""An asyncio event loop on its own thread: where an async sink writer's requests run.

Sink writers are called synchronously (Flink's mailbox thread, Spark's task
thread); the destination's async client needs a running loop. Each writer owns
one loop thread, so its client, connections and tasks live and die with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["EventLoopThread"]

T = TypeVar("T")


class EventLoopThread:
    """A daemon thread running an event loop until `stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(_cancel_other_tasks())
            self.loop.close()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the loop; returns immediately."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result."""
        return self.submit(coroutine).result(timeout_s)

    def stop_soon(self) -> None:
        """Ask the loop to stop; the thread then cancels what still runs and closes it.

        Safe from any thread, also from a finalizer, and more than once.
        """
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self.loop.call_soon_threadsafe(self.loop.stop)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop, cancelling what still runs, and wait for the thread to end."""
        self.stop_soon()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)


async def _cancel_other_tasks() -> None:
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
