"""`crash_point`: a place inside a sink's own code where the kit may crash the job.

The kit crashes a job between the calls it makes into a sink (between ``write``
and ``flush``, between a completed checkpoint and its commit...), never inside one.
What a single call does in several steps - a ``Committer.commit`` that renames three
files one by one, a ``prepare_commit`` that uploads two parts - it sees only as a
whole. A sink marks the places in between with ``crash_point("after the first
rename")``; while the kit runs, its state machine may then make the process die
there, and checks that the next job recovers from the half-done state.

Outside the kit `crash_point` does nothing: it reads one context variable and
returns. It imports nothing beyond the standard library, so production code can
call it. Only the kit's own thread sees the kit: a call from a thread the sink
started itself is a no-op.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, final

__all__ = ["CrashPoints", "KitCrash", "crash_point"]

_ACTIVE: Final[contextvars.ContextVar[CrashPoints | None]] = contextvars.ContextVar(
    "sinkv2_kit_crash_points", default=None
)


def crash_point(name: str) -> None:
    """Mark a place where the process may die: the kit may crash the job here.

    Call it inside your own multi-step work, between steps whose half-done state a
    crash would leave behind: between two renames in ``Committer.commit``, between
    two uploads in ``prepare_commit``. Outside the contract-test kit it does nothing
    (one context-variable lookup), so it can stay in production code. Inside
    `check_sink`'s lifecycle stage the state machine may choose to make the process
    die at this call: the call raises an exception that is not an `Exception` (so
    ``except Exception`` in your code lets it through, as it would let a dying
    process go), the call that reached it does not finish, and the job fails. The
    next job then recovers as it would after a real crash: it commits the pending
    checkpoint again, so your committer must recognise what the dead one did.

    Example::

        from sinkv2.testing import crash_point

        def commit(self, requests):
            for request in requests:
                for staged, final in request.get_committable().files:
                    if os.path.exists(staged):
                        os.replace(staged, final)
                    crash_point("between two renames")

    Args:
        name: Names the place in the kit's failure reports (e.g. ``"after the first
            rename"``).

    Raises:
        TypeError: Only inside the kit: ``name`` is not a str.
    """
    points = _ACTIVE.get()
    if points is not None:
        points.reached(name)


class KitCrash(BaseException):
    """The process dies at a crash point: raised by `crash_point` when the kit says so.

    A `BaseException`, not an `Exception`: a sink's ``except Exception`` and Flink's
    commit loop let it through, as they would let a dying process go. A sink must
    not catch it; the kit reports it if one does.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"the kit crashed the process at crash point {name!r}")
        self.name = name


@final
class CrashPoints:
    """The kit's side of `crash_point`: which points the sink reached, where to crash.

    The runtime makes it the active one only while a lifecycle step runs
    (`active`). Armed with ``skip``, the ``skip + 1``-th crash point reached from
    then on raises `KitCrash`, once.
    """

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.fired: KitCrash | None = None
        self._skip: int | None = None

    @property
    def armed(self) -> bool:
        """Whether a crash is due at a coming crash point."""
        return self._skip is not None

    def arm(self, skip: int) -> None:
        """Crash at the crash point reached after ``skip`` others, from now on."""
        self._skip = skip

    def disarm(self) -> None:
        """Crash nowhere."""
        self._skip = None

    @contextmanager
    def active(self) -> Iterator[None]:
        """Make `crash_point` calls in this thread (and context) reach these points."""
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)

    def reached(self, name: str) -> None:
        """A crash point was reached; raise `KitCrash` if the crash is due here."""
        if not isinstance(name, str):
            raise TypeError(
                f"crash_point() takes the name of the place as a str (got {name!r} of type "
                f"{type(name).__name__}); pass e.g. crash_point('after the first rename')"
            )
        self.seen[name] = self.seen.get(name, 0) + 1
        if self._skip is None:
            return
        if self._skip > 0:
            self._skip -= 1
            return
        self._skip = None
        self.fired = KitCrash(name)
        raise self.fired
