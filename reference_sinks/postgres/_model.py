"""The PostgreSQL sink's committable, and the names it gives prepared transactions.

A prepared transaction's global id (gid) is the sink's only handle on it once the
writer's session is gone, so the gid says whose it is:

```text
sinkv2:<sink key>:<job key>:<attempt key>:<n>
```

Each key is the first 16 hex digits of a SHA-256 (of the sink id, the job id, the
attempt token): gids stay far below PostgreSQL's 200-byte limit whatever the ids
look like, the sink's prefix finds every transaction of one sink id, the job's
prefix every transaction of one run, and the attempt key tells a winning attempt's
transactions from a losing one's. ``n`` counts the transactions one writer prepared
(one per checkpoint).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, final

import attrs

from sinkv2 import AttrsMsgpackSerializer

__all__ = [
    "COMMITTABLE_VERSION",
    "GID_PREFIX",
    "ParsedGid",
    "PostgresTransaction",
    "committable_serializer",
    "gid_of",
    "job_prefix",
    "key_of",
    "parse_gid",
    "sink_prefix",
]

COMMITTABLE_VERSION: Final = 1
GID_PREFIX: Final = "sinkv2"
_KEY_DIGITS: Final = 16
_GID: Final = re.compile(
    r"^sinkv2:(?P<sink>[0-9a-f]{16}):(?P<job>[0-9a-f]{16}):(?P<attempt>[0-9a-f]{16}):(?P<n>\d+)$"
)


def key_of(value: str) -> str:
    """The 16-hex-digit key of an id (a prefix of its SHA-256)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:_KEY_DIGITS]


def sink_prefix(sink_id: str) -> str:
    """The gid prefix of every transaction of ``sink_id``."""
    return f"{GID_PREFIX}:{key_of(sink_id)}:"


def job_prefix(sink_id: str, job_id: str) -> str:
    """The gid prefix of every transaction one run (``job_id``) of ``sink_id`` prepared."""
    return f"{sink_prefix(sink_id)}{key_of(job_id)}:"


def gid_of(sink_id: str, job_id: str, attempt_token: str, sequence: int) -> str:
    """The gid of the ``sequence``-th transaction a writer attempt prepares."""
    return f"{job_prefix(sink_id, job_id)}{key_of(attempt_token)}:{sequence}"


@final
@attrs.frozen
class ParsedGid:
    """The parts of a gid this sink named (keys, not the ids themselves)."""

    sink_key: str
    job_key: str
    attempt_key: str
    sequence: int


def parse_gid(gid: str) -> ParsedGid | None:
    """The parts of ``gid``, or ``None`` if this sink did not name it."""
    match = _GID.match(gid)
    if match is None:
        return None
    return ParsedGid(match["sink"], match["job"], match["attempt"], int(match["n"]))


@final
@attrs.frozen(kw_only=True)
class PostgresTransaction:
    """A prepared transaction holding one writer attempt's rows (the committable).

    Attributes:
        gid: The prepared transaction's global id (see the module docstring).
        table: The target table, as configured (for messages).
        rows: Rows the transaction inserts or upserts.
        staging: For a staged commit (see ``_merge``), the staging table the
            transaction loaded, and the columns and upsert key the committer moves
            its rows with; ``None`` when the transaction loaded the target itself.
        columns: The loaded columns (staged commits only).
        upsert_key: The upsert key (staged upserts only).
    """

    gid: str
    table: str
    rows: int
    staging: str | None = None
    columns: tuple[str, ...] = ()
    upsert_key: tuple[str, ...] | None = None


def committable_serializer() -> AttrsMsgpackSerializer[PostgresTransaction]:
    """The committable serializer, version `COMMITTABLE_VERSION`."""
    return AttrsMsgpackSerializer(PostgresTransaction, version=COMMITTABLE_VERSION)
