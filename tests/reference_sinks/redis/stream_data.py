"""What the RedisStreamSource tests share: the declared fields, appending, expected rows."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa

FIELDS = pa.schema(
    [
        pa.field("user", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("n", pa.int64(), nullable=False),
    ]
)
"""The fields the tests declare; an entry also has an undeclared ``extra`` field."""

_counter = itertools.count()


def append(client: Any, key: str, count: int) -> list[str]:
    """XADD ``count`` entries to ``key`` (one pipeline); their ids."""
    pipe = client.pipeline(transaction=False)
    for _ in range(count):
        n = next(_counter)
        user = None if n % 7 == 3 else f"user-{n % 5}"
        fields = {"n": str(n), "amount": f"{n / 4}", "extra": "ignored"}
        if user is not None:
            fields["user"] = user
        pipe.xadd(key, fields)
    return [entry_id.decode() for entry_id in pipe.execute()]


def rows_of(client: Any, key: str) -> list[dict[str, Any]]:
    """Every entry of ``key`` now, as the source emits it (parsed here in Python)."""
    rows = []
    for entry_id, fields in client.xrange(key, "-", "+"):
        user = fields.get(b"user")
        rows.append(
            {
                "stream": key,
                "id": entry_id.decode(),
                "user": None if user is None else user.decode(),
                "amount": float(fields[b"amount"]),
                "n": int(fields[b"n"]),
            }
        )
    return rows
