"""The source kit on a connector author's own source, and the bugs Flink authors make.

`numbered_files_source.NumberedFilesSource` is written against the bare FLIP-27
interfaces as a Flink author writes one (a push enumerator like Kafka's, hand-written
versioned serializers). It passes, bounded and unbounded, and so do variants Flink
allows. Then each planted bug, one per subclass, must fail with a message that names
what is wrong, not only that records differ.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from pathlib import Path
from typing import Any

import attrs
import numbered_files_source as nf
import pytest
from hypothesis import Phase, settings

from sinkv2.errors import CorruptDataError
from sinkv2.source import InputStatus
from sinkv2.testing import check_source

LINES = [7, 0, 12, 5, 9, 3]  # part-1 is empty


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    directory = tmp_path_factory.mktemp("numbered")
    return str(directory), nf.write_files(directory, LINES)


def source_with(
    reader: type[nf.LinesReader] = nf.LinesReader,
    enumerator: type[nf.PushEnumerator] = nf.PushEnumerator,
    serializer: type[nf.FileSplitSerializer] = nf.FileSplitSerializer,
    split: type[nf.FileSplit] = nf.FileSplit,
) -> type[nf.NumberedFilesSource]:
    class Source(nf.NumberedFilesSource):
        reader_class = reader
        enumerator_class = enumerator

        def get_split_serializer(self) -> Any:
            return serializer()

        def list_splits(self) -> list[nf.FileSplit]:
            return [split(s.number, s.path) for s in super().list_splits()]

    Source.__qualname__ = f"Source[{reader.__name__}, {enumerator.__name__}]"
    return Source


def check(files: Any, source: type[nf.NumberedFilesSource], **options: Any) -> None:
    directory, expected = files
    options.setdefault("max_examples", 10)
    check_source(lambda: source(directory), expected=expected, **options)


def fails(files: Any, source: type[nf.NumberedFilesSource], *wanted: str, **options: Any) -> str:
    with pytest.raises(AssertionError) as info:
        check(files, source, **options)
    message = str(info.value)
    for text in wanted:
        assert text in message, message
    assert "To run this case alone" in message, message
    return message


# --- the author's source, and what Flink allows ----------------------------------


def test_the_authors_source_passes_bounded_and_unbounded(files: Any, tmp_path: Path) -> None:
    directory, expected = files
    check_source(lambda: nf.NumberedFilesSource(directory), expected=expected, max_examples=20)
    # Unbounded: each wait for data that never comes costs the kit idle_timeout; this
    # reader has no thread of its own, so its data is never late and 0.3 s will do.
    longer = nf.write_files(tmp_path, [40, 0, 40, 40])

    def split_records(split_id: str) -> list[dict[str, Any]]:
        number = int(split_id.split("-")[1])
        return [row for row in longer if row["file"] == number]

    check_source(
        lambda: nf.NumberedFilesSource(str(tmp_path), bounded=False),
        split_records=split_records,
        records_to_read=60,
        max_examples=5,
        idle_timeout=0.3,
    )


class FinishesLazily(nf.LinesReader):
    """Keeps a read split (at its end) until the next poll_next: legal, a restore reads nothing."""

    def poll_next(self, output: Any) -> InputStatus:
        if self.splits:
            split = self.splits[0]
            if split.lines_read >= len(self.read_lines(split)):
                self.finish(split)
                return InputStatus.MORE_AVAILABLE
            chunk = self.read_lines(split)[split.lines_read : split.lines_read + self.batch]
            for line in chunk:
                output.create_output_for_split(split.split_id()).collect(
                    {"file": split.number, "line": line}
                )
            self.splits[0] = attrs.evolve(split, lines_read=split.lines_read + len(chunk))
            return InputStatus.MORE_AVAILABLE
        return super().poll_next(output)


class EmitsUntagged(nf.LinesReader):
    """Emits through the reader's main output, never a split's: legal for a bounded source."""

    def poll_next(self, output: Any) -> InputStatus:
        class Untagged:
            def create_output_for_split(self, split_id: str) -> Any:
                return output

            def release_output_for_split(self, split_id: str) -> None:
                output.release_output_for_split(split_id)

        return super().poll_next(Untagged())  # type: ignore[arg-type]


@pytest.mark.parametrize("reader", [FinishesLazily, EmitsUntagged])
def test_readers_flink_allows_pass(files: Any, reader: type[nf.LinesReader]) -> None:
    check(files, source_with(reader))


# --- readers ----------------------------------------------------------------------


class OneBehind(nf.LinesReader):
    """BUG: snapshots the position of the last line emitted, not the one after it."""

    def snapshot_state(self, checkpoint_id: int) -> list[nf.FileSplit]:
        return [attrs.evolve(s, lines_read=max(0, s.lines_read - 1)) for s in self.splits]


class SkipsOneOnRestore(nf.LinesReader):
    """BUG: a restored split starts one line past its position."""

    def add_splits(self, splits: list[nf.FileSplit]) -> None:
        super().add_splits(
            [attrs.evolve(s, lines_read=s.lines_read + 1) if s.lines_read else s for s in splits]
        )


def test_a_position_off_by_one_after_a_restore(files: Any) -> None:
    fails(files, source_with(OneBehind), "extra or repeated: ", "snapshot held a split behind")
    fails(
        files,
        source_with(SkipsOneOnRestore),
        "missing: ",
        "starts past the position its split carries",
    )


class LeavesOutTheCurrentSplit(nf.LinesReader):
    """BUG: snapshots only the splits queued behind the one it is reading."""

    def snapshot_state(self, checkpoint_id: int) -> list[nf.FileSplit]:
        return list(self.splits[1:])


class DropsTheSplitBeforeItsLastLines(nf.LinesReader):
    """BUG: drops a split when its last lines are fetched, and emits them on the next poll."""

    fetched: tuple[str, list[dict[str, Any]]] | None = None

    def poll_next(self, output: Any) -> InputStatus:
        if self.fetched is not None:
            (split_id, rows), self.fetched = self.fetched, None
            for row in rows:
                output.create_output_for_split(split_id).collect(row)
            return InputStatus.MORE_AVAILABLE
        if self.splits:
            split = self.splits[0]
            lines = self.read_lines(split)
            if split.lines_read + self.batch >= len(lines):
                self.finish(split)
                rows = [{"file": split.number, "line": x} for x in lines[split.lines_read :]]
                self.fetched = (split.split_id(), rows)
                return InputStatus.MORE_AVAILABLE
        return super().poll_next(output)


@pytest.mark.parametrize("reader", [LeavesOutTheCurrentSplit, DropsTheSplitBeforeItsLastLines])
def test_a_snapshot_without_a_split_in_progress(files: Any, reader: type[nf.LinesReader]) -> None:
    message = fails(files, source_with(reader), "left that split out, as if it were finished")
    assert re.search(
        r"emitted a record of split 'part-\d' after its snapshot_state\(\d+\)", message
    )


class RepeatsTheLastLine(nf.LinesReader):
    """BUG: after a split is finished, the next poll emits its last line again."""

    finished_split: tuple[str, dict[str, Any]] | None = None

    def poll_next(self, output: Any) -> InputStatus:
        if self.finished_split is not None:
            (split_id, row), self.finished_split = self.finished_split, None
            output.create_output_for_split(split_id).collect(row)
            return InputStatus.MORE_AVAILABLE
        return super().poll_next(output)

    def finish(self, split: nf.FileSplit) -> None:
        lines = self.read_lines(split)
        if lines:
            self.finished_split = (split.split_id(), {"file": split.number, "line": lines[-1]})
        super().finish(split)


def test_records_emitted_after_a_split_finished(files: Any) -> None:
    fails(
        files,
        source_with(RepeatsTheLastLine),
        "extra or repeated: {'file': 0, 'line': '0:6'} (2x committed, 1x expected)",
    )


class IgnoresNoMoreSplits(nf.LinesReader):
    """BUG: never returns END_OF_INPUT."""

    def notify_no_more_splits(self) -> None:
        pass


def test_a_reader_that_never_ends(files: Any) -> None:
    fails(
        files,
        source_with(IgnoresNoMoreSplits),
        "got notify_no_more_splits() but never reached END_OF_INPUT",
        idle_timeout=0.2,
    )


class BlocksForSplits(nf.LinesReader):
    """BUG: poll_next waits for splits instead of returning NOTHING_AVAILABLE."""

    def poll_next(self, output: Any) -> InputStatus:
        if not self.splits and not self.no_more:
            self.available = concurrent.futures.Future()
            self.available.result()  # add_splits() would complete it, in this very thread
        return super().poll_next(output)


def test_a_reader_blocking_in_poll_next_fails_instead_of_hanging(files: Any) -> None:
    message = fails(
        files,
        source_with(BlocksForSplits),
        "reader 0's poll_next() (BlocksForSplits.poll_next) has not returned for 3 s",
        "poll_next must return NOTHING_AVAILABLE",
        "in poll_next\n    self.available.result()",
        idle_timeout=0.1,
    )
    assert "case testSourceSingleSplit" in message


class NeverWakesUp(nf.LinesReader):
    """BUG: add_splits and notify_no_more_splits never complete the is_available() future."""

    def wake_up(self) -> None:
        pass


def test_an_is_available_future_that_never_completes_is_named(files: Any) -> None:
    # Before, the kit said only that the reader "never reached END_OF_INPUT".
    fails(
        files,
        source_with(NeverWakesUp),
        "is_available() future never completed although the reader had something to return",
        "the kit polled anyway, and reader 0 emitted 3 record(s)",
        "complete the future (set_result(None)) when the reader gets splits (add_splits)",
        idle_timeout=0.1,
    )


# --- enumerators ------------------------------------------------------------------


class WaitsForEveryReader(nf.PushEnumerator):
    """BUG: add_reader waits until every reader registered, which the same thread delivers."""

    released = False  # set by the test, so that the thread the kit left behind ends

    def add_reader(self, subtask_id: int) -> None:
        while len(self.context.registered_readers()) < self.context.current_parallelism():
            if WaitsForEveryReader.released:
                raise RuntimeError("released by the test")
            time.sleep(0.01)
        super().add_reader(subtask_id)


def test_an_enumerator_blocking_in_a_call_is_named(files: Any) -> None:
    try:
        fails(
            files,
            source_with(enumerator=WaitsForEveryReader),
            "the enumerator's add_reader() (WaitsForEveryReader.add_reader) has not returned "
            "for 3 s",
            "in add_reader\n    time.sleep(0.01)",
            idle_timeout=0.1,
        )
    finally:
        WaitsForEveryReader.released = True


class ForgetsSplitsGivenBack(nf.PushEnumerator):
    """BUG: ignores the splits of a failed reader."""

    def add_splits_back(self, splits: list[nf.FileSplit], subtask_id: int) -> None:
        pass


def test_splits_given_back_and_never_assigned_again(files: Any) -> None:
    fails(
        files,
        source_with(enumerator=ForgetsSplitsGivenBack),
        "never assigned again the splits it got back through add_splits_back()",
    )


class PlansAtStart(nf.PushEnumerator):
    """BUG: counts splits as assigned when it plans them, before their reader registered."""

    def start(self) -> None:
        self.planned, self.pending = self.pending, {}

    def add_reader(self, subtask_id: int) -> None:
        for split in self.planned.pop(subtask_id, []):
            self.context.assign_split(split, subtask_id)
        super().add_reader(subtask_id)


def test_splits_planned_for_an_unregistered_reader_missing_from_the_checkpoint(
    files: Any,
) -> None:
    fails(
        files,
        source_with(enumerator=PlansAtStart),
        "case checkpoint before every reader registered",
        "missing: ",
        "set aside for a reader whose registration has not arrived",
    )


class AssignsAgain(nf.PushEnumerator):
    """BUG: keeps assigned splits pending, and assigns them again when a reader registers."""

    def assign_pending(self, subtask_id: int) -> None:
        for split in self.pending.get(subtask_id, []):
            self.context.assign_split(split, subtask_id)
        self.context.signal_no_more_splits(subtask_id)


def test_a_split_assigned_twice(files: Any) -> None:
    fails(files, source_with(enumerator=AssignsAgain), "but it already assigned it to reader")


class NoMoreSplitsOnlyToOwners(nf.PushEnumerator):
    """BUG: signals no more splits only to readers it assigned a split."""

    def assign_pending(self, subtask_id: int) -> None:
        splits = self.pending.pop(subtask_id, [])
        for split in splits:
            self.context.assign_split(split, subtask_id)
        if splits:
            self.context.signal_no_more_splits(subtask_id)


def test_an_idle_reader_never_told_no_more_splits(files: Any) -> None:
    fails(
        files,
        source_with(enumerator=NoMoreSplitsOnlyToOwners),
        f"case testIdleReader (parallelism {len(LINES) + 1}",
        f"reader(s) [{len(LINES)}] never got notify_no_more_splits() (reader(s) [{len(LINES)}] "
        "got no split at all)",
        idle_timeout=0.2,
    )


# --- splits and serializers ---------------------------------------------------------


class ForgetsThePosition(nf.FileSplitSerializer):
    """BUG: writes every field but the position."""

    def serialize(self, obj: nf.FileSplit) -> bytes:
        return super().serialize(attrs.evolve(obj, lines_read=0))


def test_a_split_serializer_that_drops_a_field(files: Any) -> None:
    message = fails(
        files,
        source_with(serializer=ForgetsThePosition),
        "the split serializer (get_split_serializer()) does not round-trip split 'part-",
    )
    assert re.search(r"\(\.lines_read: \d+ != 0\)", message), message


class NewVersionNotRead(nf.FileSplitSerializer):
    """BUG: the version was bumped, but deserialize still reads version 1 only."""

    def get_version(self) -> int:
        return 2


def test_a_version_the_serializer_cannot_read(files: Any) -> None:
    with pytest.raises(CorruptDataError, match="unknown version 2") as info:
        check(files, source_with(serializer=NewVersionNotRead))
    assert "check_source: case testSourceSingleSplit" in "\n".join(info.value.__notes__)


@attrs.frozen
class IdentitySplit(nf.FileSplit):
    """BUG: its id depends on the object, not on its fields."""

    def split_id(self) -> str:
        return f"part-{self.number}@{id(self):x}"


class ReadsIdentitySplits(nf.FileSplitSerializer):
    def deserialize(self, version: int, serialized: bytes) -> nf.FileSplit:
        split = super().deserialize(version, serialized)
        return IdentitySplit(split.number, split.path, split.lines_read)


def test_a_split_id_that_is_not_stable(files: Any) -> None:
    fails(
        files,
        source_with(serializer=ReadsIdentitySplits, split=IdentitySplit),
        "read back through the split serializer says its split_id() is",
        "never from id()",
    )


def test_the_module_path() -> None:
    assert Path(nf.__file__).parent == Path(__file__).parent


# --- older versions of the serializers --------------------------------------------

V1_SPLIT = b'{"n": 4, "p": "/data/part-4.txt", "l": 3}'


class VersionTwo(nf.FileSplitSerializer):
    """Version 2 writes the position first; it reads version 1 too."""

    def get_version(self) -> int:
        return 2

    def serialize(self, obj: nf.FileSplit) -> bytes:
        return f"{obj.lines_read},{obj.number},{obj.path}".encode()

    def deserialize(self, version: int, serialized: bytes) -> nf.FileSplit:
        if version == 1:
            return super().deserialize(1, serialized)
        lines_read, number, path = serialized.decode().split(",", 2)
        return nf.FileSplit(int(number), path, int(lines_read))


class VersionTwoOnly(VersionTwo):
    """BUG: bumped to version 2, and reads every version as version 2."""

    def deserialize(self, version: int, serialized: bytes) -> nf.FileSplit:
        return super().deserialize(2, serialized)


class VersionTwoMisreadsOne(VersionTwo):
    """BUG: reads version 1 but drops its position."""

    def deserialize(self, version: int, serialized: bytes) -> nf.FileSplit:
        split = super().deserialize(version, serialized)
        return attrs.evolve(split, lines_read=0) if version == 1 else split


def test_golden_samples_of_older_versions_must_still_read(files: Any) -> None:
    samples = {
        "split": {
            1: (V1_SPLIT, nf.FileSplit(4, "/data/part-4.txt", 3)),
            2: (b"3,4,/data/part-4.txt", nf.FileSplit(4, "/data/part-4.txt", 3)),
        },
        "enumerator_checkpoint": {1: (b"[]", nf.EnumState(()))},
    }
    check(files, source_with(serializer=VersionTwo), golden_samples=samples, max_examples=3)
    with pytest.raises(AssertionError) as info:
        check(files, source_with(serializer=VersionTwoOnly), golden_samples=samples)
    assert "cannot read its version 1 golden sample any more" in str(info.value)
    with pytest.raises(AssertionError) as info:
        check(files, source_with(serializer=VersionTwoMisreadsOne), golden_samples=samples)
    message = str(info.value)
    assert "reads its version 1 golden sample as" in message, message
    assert "(.lines_read: 3 != 0)" in message, message
    with pytest.raises(ValueError, match="unknown serializer name 'splits'"):
        check(files, source_with(serializer=VersionTwo), golden_samples={"splits": {}})


# --- split ids that change across a restore ------------------------------------------

LISTINGS = iter(range(1_000_000))


@attrs.frozen
class ListedSplit(nf.FileSplit):
    """A split whose id carries the number of the listing that found it."""

    listing: int = 0

    def split_id(self) -> str:
        return f"part-{self.number}#{self.listing}"


class ListedSplitSerializer(nf.FileSplitSerializer):
    def serialize(self, obj: nf.FileSplit) -> bytes:
        assert isinstance(obj, ListedSplit)
        return f"{super().serialize(obj).decode()}|{obj.listing}".encode()

    def deserialize(self, version: int, serialized: bytes) -> nf.FileSplit:
        body, listing = serialized.decode().rsplit("|", 1)
        split = super().deserialize(version, body.encode())
        return ListedSplit(split.number, split.path, split.lines_read, int(listing))


class RelistsOnRestore(nf.NumberedFilesSource):
    """BUG: split ids come from the listing, and a restore lists the files again.

    The enumerator's checkpoint holds only the numbers of files not assigned yet; a
    restored enumerator lists the directory anew, so files the readers hold come back
    under new ids and are read twice.
    """

    def get_split_serializer(self) -> Any:
        return ListedSplitSerializer()

    def list_splits(self) -> list[nf.FileSplit]:
        listing = next(LISTINGS)
        return [ListedSplit(s.number, s.path, 0, listing) for s in super().list_splits()]

    def restore_enumerator(self, enum_context: Any, checkpoint: nf.EnumState) -> Any:
        return self.create_enumerator(enum_context)


def test_a_split_id_that_changes_across_a_restore_is_named(files: Any) -> None:
    message = fails(files, RelistsOnRestore, "extra or repeated: ")
    assert re.search(r"was committed through splits \['part-\d#\d+', 'part-\d#\d+'\]", message)
    assert "its split_id() is not stable across restarts" in message


# --- the hypothesis profile ---------------------------------------------------------


def test_the_loaded_profiles_phases_decide_which_schedules_run(files: Any) -> None:
    """As check_sink: a profile without Phase.generate runs the fixed cases only.

    The enumerator that drops splits given back passes Flink's fixed cases with this
    push source (it assigns every split before the first checkpoint, so no reader
    has splits to give back there); only random schedules catch it.
    """
    previous = settings.get_current_profile_name()
    settings.register_profile("sinkv2-fixed-cases-only", phases=[Phase.explicit])
    settings.load_profile("sinkv2-fixed-cases-only")
    try:
        check(files, source_with(enumerator=ForgetsSplitsGivenBack))
    finally:
        settings.load_profile(previous)
