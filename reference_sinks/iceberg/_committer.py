"""The Iceberg committer: one fast append per checkpoint, guarded on every attempt.

The idempotency key lives in the table, written atomically with the data: every
snapshot this sink commits carries the summary properties

| property | value |
|---|---|
| ``sinkv2.sink-id`` | the sink's commit history |
| ``sinkv2.commit-id`` | `IcebergCommittable.commit_id`, a digest of the file paths |
| ``sinkv2.checkpoint-id`` | the checkpoint id (absent for a batch run without one) |
| ``sinkv2.job-id`` | the run that wrote the files |

Before each attempt the committer reloads the table and walks the current
snapshot's ancestors (`committed_state`): a committable whose commit id is there,
or whose checkpoint id is at or below the highest checkpoint id of its sink id, is
already committed. pyiceberg 0.12 retries a conflicting commit by itself, re-applying
the append on the new table version without this check, so a stale committer would
commit the same files twice; the committer switches that retry off for its own
transactions and retries itself, re-checking the guard each time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Final

import attrs

from reference_sinks.iceberg._catalog import CatalogSpec
from reference_sinks.iceberg._model import IcebergCommittable
from reference_sinks.iceberg._orphans import CommitGuard, job_commit_uuid
from sinkv2 import Committer

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = [
    "CHECKPOINT_ID_PROPERTY",
    "COMMIT_ID_PROPERTY",
    "JOB_ID_PROPERTY",
    "SINK_ID_PROPERTY",
    "CommittedState",
    "IcebergCommitter",
    "append_committable",
    "committed_state",
]

SINK_ID_PROPERTY: Final = "sinkv2.sink-id"
COMMIT_ID_PROPERTY: Final = "sinkv2.commit-id"
CHECKPOINT_ID_PROPERTY: Final = "sinkv2.checkpoint-id"
JOB_ID_PROPERTY: Final = "sinkv2.job-id"
_NO_INTERNAL_RETRY: Final = {"commit.retry.num-retries": "0"}


@attrs.frozen
class CommittedState:
    """What the table's history says one sink id committed.

    Attributes:
        commit_ids: Commit ids of every ancestor snapshot of the sink id.
        max_checkpoint_id: The highest checkpoint id among them, or ``None``.
        snapshots: How many ancestor snapshots belong to the sink id.
    """

    commit_ids: frozenset[str]
    max_checkpoint_id: int | None
    snapshots: int

    def contains(self, committable: IcebergCommittable) -> bool:
        """Whether ``committable`` (or a checkpoint after it) is in the table already."""
        if committable.commit_id in self.commit_ids:
            return True
        return (
            committable.checkpoint_id is not None
            and self.max_checkpoint_id is not None
            and committable.checkpoint_id <= self.max_checkpoint_id
        )


def committed_state(table: Table, sink_id: str) -> CommittedState:
    """Walk the current snapshot's ancestors and collect what ``sink_id`` committed.

    Only metadata is read (the snapshot list of the table version ``table`` holds);
    reload the table first to see the latest version. Snapshots removed by
    expiry are not seen: keep at least the snapshots of the last checkpoint.
    """
    from pyiceberg.table.snapshots import ancestors_of  # noqa: PLC0415  # optional extra

    commit_ids: set[str] = set()
    max_checkpoint: int | None = None
    count = 0
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None or summary[SINK_ID_PROPERTY] != sink_id:
            continue
        count += 1
        commit_id = summary[COMMIT_ID_PROPERTY]
        if commit_id:
            commit_ids.add(commit_id)
        checkpoint = summary[CHECKPOINT_ID_PROPERTY]
        if checkpoint:
            value = int(checkpoint)
            max_checkpoint = value if max_checkpoint is None else max(max_checkpoint, value)
    return CommittedState(frozenset(commit_ids), max_checkpoint, count)


def append_committable(
    table: Table,
    committable: IcebergCommittable,
    *,
    extra_properties: Mapping[str, str] | None = None,
) -> None:
    """Append every file of ``committable`` in one snapshot, exactly one attempt.

    pyiceberg's own retry on conflict is switched off for this transaction (only in
    memory; the table's properties are not changed), so a conflict surfaces as
    ``CommitFailedException`` and the caller re-checks the guard.

    Raises:
        pyiceberg.exceptions.CommitFailedException: The table changed since
            ``table`` was loaded.
    """
    from pyiceberg.table import Table  # noqa: PLC0415  # optional extra

    metadata = table.metadata.model_copy(
        update={"properties": {**table.metadata.properties, **_NO_INTERNAL_RETRY}}
    )
    single_attempt = Table(
        table.name(), metadata, table.metadata_location, table.io, table.catalog, table.config
    )
    properties = dict(extra_properties or {})
    properties[SINK_ID_PROPERTY] = committable.sink_id
    properties[COMMIT_ID_PROPERTY] = committable.commit_id
    properties[JOB_ID_PROPERTY] = committable.job_id
    if committable.checkpoint_id is not None:
        properties[CHECKPOINT_ID_PROPERTY] = str(committable.checkpoint_id)
    with (
        single_attempt.transaction() as transaction,
        transaction.update_snapshot(snapshot_properties=properties).fast_append() as append,
    ):
        # Names the manifests after the job, so its clean-up finds them if the catalog
        # never takes this version (a crash or a failure in between): see ``_orphans``.
        append.commit_uuid = job_commit_uuid(committable.sink_id, committable.job_id)
        for file in committable.files:
            append.append_data_file(file.to_data_file(metadata))


@attrs.define
class IcebergCommitter(Committer[IcebergCommittable]):
    """Commits each committable in one snapshot, exactly once.

    Args:
        catalog: Builds the catalog (a fresh one per committer).
        table: The table identifier, ``"namespace.table"``.
        attempts: Commit attempts per committable within one ``commit`` call; after
            that the request is handed back with ``retry_later``.
        backoff_s: First backoff after a conflict; doubles, with jitter, per attempt.
        snapshot_properties: Extra summary properties for every snapshot.
    """

    catalog: CatalogSpec
    table: str
    attempts: int = 8
    backoff_s: float = 0.02
    snapshot_properties: Mapping[str, str] = attrs.field(factory=dict)
    guard: CommitGuard = attrs.field(factory=CommitGuard, eq=False, repr=False)
    """Held for each ``commit``: the sink's, so its clean-up never looks mid-commit."""
    _rng: random.Random = attrs.field(factory=random.Random, init=False)

    def commit(self, requests: Collection[Committer.CommitRequest[IcebergCommittable]]) -> None:
        """Append each request's files in one snapshot, or signal it already committed.

        Requests are committed in checkpoint order. A request whose files are in the
        table (same commit id), or whose checkpoint id is at or below the highest one
        its sink id committed, gets ``signal_already_committed``. Conflicts with
        other committers are retried here, re-checking that guard on a freshly
        loaded table each time; after ``attempts`` conflicts the request asks for
        ``retry_later``.
        """
        with self.guard:
            self._commit(requests)

    def _commit(self, requests: Collection[Committer.CommitRequest[IcebergCommittable]]) -> None:
        from pyiceberg.exceptions import CommitFailedException  # noqa: PLC0415  # optional extra

        ordered = sorted(
            requests,
            key=lambda r: (
                r.get_committable().checkpoint_id is None,
                r.get_committable().checkpoint_id or 0,
            ),
        )
        catalog = self.catalog.load()
        for request in ordered:
            committable = request.get_committable()
            if not committable.files:
                continue  # an empty checkpoint: nothing to make visible
            for attempt in range(self.attempts):
                table = catalog.load_table(self.table)
                if committed_state(table, committable.sink_id).contains(committable):
                    request.signal_already_committed()
                    break
                try:
                    append_committable(
                        table, committable, extra_properties=self.snapshot_properties
                    )
                    break
                except CommitFailedException:
                    if attempt + 1 < self.attempts:
                        delay = self.backoff_s * 2**attempt
                        time.sleep(delay + self._rng.uniform(0, delay))
            else:
                request.retry_later()

    def close(self) -> None:
        """Nothing to release: the catalog is closed with the committer's last reference."""
