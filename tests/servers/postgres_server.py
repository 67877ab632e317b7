"""A throwaway local PostgreSQL server for tests and benchmarks of PostgreSQL sinks.

It lives in the repository's tests, not in the wheel: copy it to test your own sink.

::

    with LocalPostgresServer.start() as server:
        sink = PostgresSink(server.url, table="events")
        ...

``initdb`` makes a fresh cluster in a temporary directory, ``pg_ctl`` starts it on a
free port of 127.0.0.1 with ``max_prepared_transactions`` set (two-phase commit needs
it) and ``wal_level = logical`` (change data capture needs replication slots), and
`stop` ends it by the PID in ``postmaster.pid`` and deletes the directory.
Dynamic shared memory lives in that directory too (``dynamic_shared_memory_type =
mmap``), so nothing is left in ``/dev/shm``. A cluster whose test run was killed is
stopped and removed when the next server starts (its owner's pid is in the
directory's name), its System V interlock segment with it.
PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres``
user and every server command runs as that user (``runuser``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final, final

from sinkv2.testing._owned import owned_temp_dir

__all__ = [
    "INSTALL",
    "LOG_STATEMENTS_ENV",
    "LocalPostgresServer",
    "find_server_binary",
    "fresh_database",
]

INSTALL: Final = "apt-get install postgresql (Debian/Ubuntu) or brew install postgresql (macOS)"
_USER: Final = "postgres"
LOG_STATEMENTS_ENV: Final = "SINKV2_PG_LOG_STATEMENTS"
"""Set (to anything): the server logs every statement, with its time, PID and application."""


def find_server_binary(name: str) -> str:
    """The path of a PostgreSQL server program (``initdb``, ``pg_ctl``, ``postgres``).

    Debian keeps them off PATH, under ``/usr/lib/postgresql/<major>/bin``; the newest
    major version installed wins.

    Raises:
        RuntimeError: no PostgreSQL server is installed (the message says how to).
    """
    found = shutil.which(name)
    if found is not None:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
    )
    if not candidates:
        raise RuntimeError(f"PostgreSQL's {name} was not found: {INSTALL}")
    return candidates[-1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", _USER, "--", *command]


@final
class LocalPostgresServer:
    """A PostgreSQL cluster in a temporary directory; `url` points at database ``postgres``."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.port = port
        self.user = _USER if os.geteuid() == 0 else os.environ.get("USER", _USER)
        self.url = f"postgresql://{self.user}@127.0.0.1:{port}/postgres"

    @classmethod
    def start(
        cls,
        *,
        max_prepared_transactions: int = 64,
        max_connections: int = 100,
        timeout_s: float = 60.0,
    ) -> LocalPostgresServer:
        """Create a cluster and start it; return once it accepts connections.

        Raises:
            RuntimeError: PostgreSQL is not installed, or it did not start in time (the
                message carries the server's log).
        """
        initdb = find_server_binary("initdb")
        root = owned_temp_dir("sinkv2-pg-", before_removal=_end_orphan)
        server = cls(root, _free_port())
        if os.geteuid() == 0:
            shutil.chown(root, _USER, _USER)
        command = [initdb, "-D", str(server.data_dir), "-U", server.user]
        command += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        result = subprocess.run(
            _as_server_user(command), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"initdb failed: {result.stderr.strip()}")
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(server.port),
            "unix_socket_directories": f"'{root}'",
            "max_prepared_transactions": str(max_prepared_transactions),
            "max_connections": str(max_connections),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "128MB",
            "logging_collector": "off",
            "dynamic_shared_memory_type": "mmap",
            # change data capture (PostgresCdcSource) decodes the WAL through slots
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
        }
        if os.environ.get(LOG_STATEMENTS_ENV):  # a hunt for who moved a slot, or the like
            settings["log_statement"] = "'all'"
            settings["log_line_prefix"] = "'%m [%p] %a '"
        with (server.data_dir / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        server._pg_ctl("start", "-w", "-t", str(int(timeout_s)), "-l", str(server.log_path))
        return server

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.root / "server.log"

    def pid(self) -> int | None:
        """The postmaster's PID, or None when the server is not running."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return None
        return int(first) if first.strip().isdigit() else None

    def restart(self, *, mode: str = "fast", timeout_s: float = 60.0) -> None:
        """``pg_ctl restart -m <mode>``: prepared transactions survive it."""
        self._pg_ctl(
            "restart", "-m", mode, "-w", "-t", str(int(timeout_s)), "-l", str(self.log_path)
        )

    def connect(self, **options: Any) -> Any:
        """A psycopg connection to database ``postgres`` (autocommit unless told otherwise)."""
        import psycopg

        options.setdefault("autocommit", True)
        return psycopg.connect(self.url, **options)

    def prepared_transactions(self) -> list[str]:
        """The gids in ``pg_prepared_xacts``, sorted."""
        with self.connect() as connection:
            rows = connection.execute("SELECT gid FROM pg_prepared_xacts ORDER BY gid").fetchall()
        return [row[0] for row in rows]

    def stop(self) -> None:
        """Stop the server (fast shutdown, by the PID in ``postmaster.pid``); delete its files."""
        _end_cluster(self.data_dir, signal.SIGINT)
        shutil.rmtree(self.root, ignore_errors=True)

    def _pg_ctl(self, *arguments: str) -> None:
        command = [find_server_binary("pg_ctl"), "-D", str(self.data_dir), *arguments]
        result = subprocess.run(
            _as_server_user(command),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if result.returncode != 0:
            log = self.log_path.read_text() if self.log_path.exists() else ""
            raise RuntimeError(
                f"pg_ctl {arguments[0]} failed: {result.stderr.strip()}\nserver log:\n{log[-4000:]}"
            )

    def __enter__(self) -> LocalPostgresServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _end_orphan(root: Path) -> None:
    """End the cluster a killed test run left in ``root`` (immediate shutdown)."""
    _end_cluster(root / "data", signal.SIGQUIT)


def _end_cluster(data_dir: Path, how: signal.Signals) -> None:
    """Stop the postmaster of ``data_dir`` with ``how`` (SIGKILL after 30 s).

    A postmaster that ends without its shutdown leaves its System V interlock
    segment; that is removed too, once nothing is attached to it.
    """
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return
    if _runs_from(pid, data_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, how)
        deadline = time.monotonic() + 30
        while _runs_from(pid, data_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _runs_from(pid, data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if len(lines) > 6:
        _remove_unattached_segment(lines[6].split())


def _runs_from(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a live postmaster of ``data_dir`` (not a zombie, not a reused pid)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return status.rsplit(")", 1)[-1].split()[0] != "Z" and str(data_dir).encode() in command


def _remove_unattached_segment(key_and_id: list[str]) -> None:
    """``ipcrm`` the segment of ``postmaster.pid``'s line 7 if it is the same and unused."""
    if len(key_and_id) != 2 or not all(part.isdigit() for part in key_and_id):
        return
    key, shmid = key_and_id
    try:
        table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return
    for row in table:
        fields = row.split()  # key shmid perms size cpid lpid nattch ...
        if fields[0] == key and fields[1] == shmid and fields[6] == "0":
            subprocess.run(["ipcrm", "-m", shmid], capture_output=True, check=False)


@contextlib.contextmanager
def fresh_database(server: LocalPostgresServer) -> Iterator[str]:
    """A fresh, empty database of ``server``: its URL; dropped on exit.

    The ``postgres_url`` fixture, and module-scoped fixtures that share one Spark host
    between several tests, use it. Whatever used it and left a prepared transaction or a
    replication slot behind fails on exit, after they are removed: prepared
    transactions hold locks and block vacuum, a slot holds WAL, and no sink or source
    may leave one once its run is over.
    """
    import uuid

    name = f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = server.url.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        left, slots = _drop_database(server, name, url)
    assert not left, f"prepared transactions left behind: {left}"
    assert not slots, f"replication slots left behind: {slots}"


def _drop_database(server: LocalPostgresServer, name: str, url: str) -> tuple[list[str], list[str]]:
    """Roll back ``name``'s prepared transactions, drop its slots, then the database.

    Returns the gids and slot names there were.
    """
    import psycopg
    from psycopg import sql

    with server.connect() as admin:
        left = [
            gid
            for (gid,) in admin.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = %s ORDER BY gid", (name,)
            ).fetchall()
        ]
        if left:
            with psycopg.connect(url, autocommit=True) as connection:
                for gid in left:  # a utility statement: the gid is a literal, not a parameter
                    connection.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        slots = admin.execute(
            "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s "
            "ORDER BY slot_name",
            (name,),
        ).fetchall()
        for slot, pid in slots:
            if pid is not None:  # a walsender still streams it: end it, wait for it
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    return left, [slot for slot, _ in slots]
