"""The SQLite store's hold on an id: a ``flock`` on one file per sink id or source id.

The kernel drops the lock when its process dies, so a crashed driver never
blocks a re-run. The lock file also names its holder (job, pid, host), so a
driver that finds the id taken can say by whom. A source id's file has a name of
its own (``source-<digest>.lock``), so that a source id and a sink id of the same
name never exclude each other.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Final

from sinkv2.errors import CommitStateError, ConcurrentCommitError
from sinkv2.runtime._sql.fence import Holder, Keyspace, describe_holder
from sinkv2.runtime._sql.schema import SINKS

__all__ = ["drop_lock", "lock_path", "probe_lock", "take_lock"]

_MAX_HOLDER_BYTES: Final = 4096


def lock_path(db_path: pathlib.Path, key: str, keyspace: Keyspace = SINKS) -> pathlib.Path:
    """The lock file of ``key``, in ``<db file>.locks/`` beside the database.

    A sink id's file is ``<digest>.lock`` (as in every earlier release); another
    key space's is prefixed by its noun, e.g. ``source-<digest>.lock``.
    """
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    name = f"{digest}.lock" if keyspace == SINKS else f"{keyspace.noun}-{digest}.lock"
    return db_path.with_name(db_path.name + ".locks") / name


def take_lock(lock_path: pathlib.Path, key: str, holder: Holder, keyspace: Keyspace = SINKS) -> int:
    """Lock the id's file without blocking and write ``holder`` into it.

    A new open file description per call, so that two leases in one process conflict.
    """
    import fcntl  # noqa: PLC0415  # POSIX only; importing sinkv2 must work everywhere

    try:
        lock_path.parent.mkdir(exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise CommitStateError(
            f"cannot open the lock file {str(lock_path)!r} of {keyspace.noun} {key!r}: "
            f"{type(error).__name__}: {error}; the store's directory must be writable"
        ) from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = Holder.load(os.pread(fd, _MAX_HOLDER_BYTES, 0).decode("utf-8", "replace"))
            message = _concurrent_message(keyspace, key, other, lock_path)
            raise ConcurrentCommitError(message) from None
        data = holder.to_json().encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def probe_lock(lock_path: pathlib.Path) -> tuple[bool, Holder | None]:
    """Whether the id's lock is held now, and the holder its lock file names.

    Takes a shared lock without blocking and drops it at once: a driver whose
    ``take_lock`` falls in that instant is refused, as if the id were held,
    and proceeds when re-run. Never creates the lock file.
    """
    import fcntl  # noqa: PLC0415  # POSIX only; see take_lock

    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, None  # never acquired
    except OSError as error:
        raise CommitStateError(
            f"cannot open the lock file {str(lock_path)!r}: {type(error).__name__}: {error}; "
            "the store's directory must be readable"
        ) from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, _MAX_HOLDER_BYTES, 0).decode("utf-8", "replace")
            return True, Holder.load(text)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, None
    finally:
        os.close(fd)


def _concurrent_message(
    keyspace: Keyspace, key: str, holder: Holder | None, lock_path: pathlib.Path
) -> str:
    noun = keyspace.noun
    message = (
        f"{noun} {key!r} is already held, by {describe_holder(holder)}. Two drivers must "
        f"never hold one {noun} id at once, so this one stops before writing anything. Wait "
        "for that job to finish, then re-run; if it is dead, its lock died with its "
        f"process and a re-run proceeds (lock file: {str(lock_path)!r})"
    )
    if holder is not None and holder.is_this_process:
        message += (
            ". The holder is this process: release its lease (or use it in a `with` block) "
            f"before acquiring the {noun} id again"
        )
    return message


def drop_lock(fd: int) -> None:
    """Unlock and close a lock file `take_lock` opened."""
    import fcntl  # noqa: PLC0415  # POSIX only; see take_lock

    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
