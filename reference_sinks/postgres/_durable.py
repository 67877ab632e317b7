"""A plain transaction's commit flushed to the server's disk before it returns.

``COMMIT PREPARED`` is always flushed; a plain transaction is not when the server's
(or role's) ``synchronous_commit`` is ``off``, and a server crash right after its
commit may then take it back. The sink's plain commits (the move of staged rows, and
every commit of the at-least-once sink) are reported committed to the engine, which
records the epoch as done and never sends them again, so they must outlive a crash.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FLUSH_THIS_COMMIT"]

FLUSH_THIS_COMMIT: Final = (
    "SELECT set_config('synchronous_commit', 'local', true) "
    "WHERE current_setting('synchronous_commit') = 'off'"
)
"""Run inside a transaction: its commit waits for the local flush when the setting is
``off``; a stronger setting a user chose (``on``, ``remote_write``, ``remote_apply``)
is kept."""
