"""The `FileSource` reader: Flink's ``FileSourceReader`` on the reader framework.

Splits are pulled one at a time and read as Arrow batches after their positions
(`reference_sinks._split_reader`, shared with the Iceberg and PostgreSQL sources).
With a clean-up, the reader also tells the enumerator which splits it read to their
end, once the checkpoint that holds their records has completed.
"""

from __future__ import annotations

from typing import final

from reference_sinks._split_reader import (
    BatchSplitReader,
    PullingBatchReader,
    ReadSplit,
    SplitPosition,
)
from reference_sinks.files._source_split import FileSourceSplit, SplitsFinished
from sinkv2.source import SourceReaderContext

__all__ = ["FileSourceReader"]


@final
class FileSourceReader(PullingBatchReader[FileSourceSplit]):
    """Flink's ``FileSourceReader``: asks for a split at start and after each finished one.

    Args:
        context: The reader's context.
        read_split: Reads one split after its position.
        report_finished: Tell the enumerator which splits were read to the end (a
            `SplitsFinished` event), for the clean-up of processed files.
    """

    def __init__(
        self,
        context: SourceReaderContext,
        read_split: ReadSplit[FileSourceSplit],
        *,
        report_finished: bool,
    ) -> None:
        super().__init__(context, lambda: BatchSplitReader(read_split))
        self._report_finished = report_finished
        self._finished: list[str] = []  # since the last snapshot
        self._uncommitted: list[tuple[int, list[str]]] = []  # finished before snapshot cp

    def on_split_finished(
        self, finished_split_ids: dict[str, SplitPosition[FileSourceSplit]]
    ) -> None:
        """Ask for the next split (and, with a clean-up, remember which ended)."""
        if self._report_finished:  # a cut's read that stops before the split's end is not
            self._finished.extend(
                split_id
                for split_id, state in finished_split_ids.items()
                if state.split.stop is None or state.split.stop == state.split.records
            )
        super().on_split_finished(finished_split_ids)

    def snapshot_state(self, checkpoint_id: int) -> list[FileSourceSplit]:
        """The unfinished splits at their positions; splits finished until now await this one."""
        if self._finished:
            self._uncommitted.append((checkpoint_id, self._finished))
            self._finished = []
        return super().snapshot_state(checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Report the splits whose records this checkpoint committed (for the clean-up).

        Only now: a split reported before its records are committed could have its file
        removed and then be needed again by a restore.
        """
        done = [ids for cp, ids in self._uncommitted if cp <= checkpoint_id]
        self._uncommitted = [(cp, ids) for cp, ids in self._uncommitted if cp > checkpoint_id]
        if done:
            split_ids = tuple(split_id for ids in done for split_id in ids)
            self.context.send_source_event_to_coordinator(SplitsFinished(split_ids))
