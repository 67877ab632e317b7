"""`check_sink`: the whole contract, and its three stages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from sinkv2._delivery import DeliveryGuarantee
from sinkv2.testing._machine import lifecycle_machine
from sinkv2.testing._serializers import check_serializers
from sinkv2.testing._settings import resolve_examples
from sinkv2.testing._stream_machine import streaming_machine
from sinkv2.testing._sut import SinkUnderTest

__all__ = ["check_lifecycle", "check_serializer_properties", "check_sink", "check_streaming"]

_STEPS: Final = 30
_STREAM_STEPS: Final = 8
_SLOW_IS_FINE: Final = [
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.filter_too_much,
    HealthCheck.large_base_example,
]


def _settings(max_examples: int, *, steps: int = _STEPS) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        stateful_step_count=steps,
        suppress_health_check=_SLOW_IS_FINE,
        report_multiple_bugs=False,  # one clean AssertionError, the simplest failure
        phases=_phases(),
    )


def _phases() -> list[Phase]:
    """The loaded hypothesis profile's phases (all, by default), never the explain phase.

    The explain phase re-runs many lifecycles to annotate lines; the lifecycle log in
    the message already says what happened. A profile without ``Phase.shrink`` gets
    the first failing example as found: a longer history, found much sooner.
    """
    loaded = settings.default
    chosen = loaded.phases if loaded is not None else tuple(Phase)
    return [phase for phase in chosen if phase is not Phase.explain]


def _validate(
    guarantee: object, elements: object, max_examples: object, max_parallelism: object
) -> None:
    if not isinstance(guarantee, DeliveryGuarantee):
        raise TypeError(
            f"guarantee must be a sinkv2.DeliveryGuarantee (got {guarantee!r} of type "
            f"{type(guarantee).__name__}); pass e.g. DeliveryGuarantee.EXACTLY_ONCE"
        )
    if not isinstance(elements, st.SearchStrategy):
        raise TypeError(
            f"elements must be a hypothesis strategy (got {type(elements).__name__}); pass "
            "e.g. st.fixed_dictionaries({'id': st.integers()})"
        )
    for name, value in (("max_examples", max_examples), ("max_parallelism", max_parallelism)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"{name} must be a positive int (got {value!r} of type {type(value).__name__})"
            )


def check_serializer_properties(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_examples: int = 200,
    max_parallelism: int = 4,
    golden_samples: Mapping[str, Mapping[int, tuple[bytes, object]]] | None = None,
) -> None:
    """Stage 1 of `check_sink`: serializers, golden samples, cloudpickle.

    Runs a tenth of the examples (at least 5): each is a short lifecycle whose
    produced objects are checked.
    """
    _validate(guarantee, elements, max_examples, max_parallelism)
    examples = max(5, resolve_examples(max_examples) // 10)
    check_serializers(
        make,
        guarantee=guarantee,
        elements=elements,
        max_examples=examples,
        max_parallelism=max_parallelism,
        golden_samples=golden_samples,
        settings_for=_settings,
    )


def check_lifecycle(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_examples: int = 200,
    max_parallelism: int = 4,
) -> None:
    """Stage 2 of `check_sink`: the lifecycle state machine."""
    _validate(guarantee, elements, max_examples, max_parallelism)
    machine = lifecycle_machine(
        make, guarantee=guarantee, elements=elements, max_parallelism=max_parallelism
    )
    run_state_machine_as_test(machine, settings=_settings(resolve_examples(max_examples)))


def check_streaming(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_examples: int = 200,
    max_parallelism: int = 4,
) -> None:
    """Stage 3 of `check_sink`: streams of checkpoints, through the real streaming runtime.

    Drives the sink the way ``sinkv2_spark`` runs a Structured Streaming query:
    each micro-batch is a checkpoint run by `sinkv2.runtime.CheckpointRunner` on a
    `sinkv2.runtime.CommitCoordinator` (inline, or with commits on the commit
    thread while the next checkpoint writes), with a local writer stage in
    process: writers created from a cloudpickled copy of the sink per task,
    restored from the previous checkpoint's writer states (redistributed when
    the parallelism changed), then ``flush(False)`` -> ``prepare_commit()`` ->
    ``snapshot_state(N)`` -> ``close()``. Hypothesis chooses each stream:
    micro-batches at a parallelism of 1 to ``max_parallelism`` (rescales between
    checkpoints, and on replays), drivers dying at any stage event of a
    checkpoint or while opening, task attempts dying partway (retried, or failing
    the micro-batch), drivers dying between checkpoints, clean stops, and
    restarts: a new coordinator and runner on the same commit state store, which
    commit what the dead one left pending and replay the interrupted checkpoint
    with the same input, as Spark replays a micro-batch whose ``foreachBatch``
    did not return. The stream ends on one writer: a last checkpoint whose
    writers end their input (``flush(True)``), or, for a sink without a
    committer, a draining stop (``stop(drain=True)``).

    Checked after every step, and at the end:

    - ``EXACTLY_ONCE``: nothing visible that no recorded checkpoint covers, no
      duplicates however often a micro-batch is replayed; committed checkpoints'
      elements visible (for sinks with writer state, which may hold elements
      across checkpoints, at the end); at the end exactly the stream's elements.
    - ``AT_LEAST_ONCE``: nothing committed missing; at the end all of the stream.
    - ``NONE``: nothing is checked, but no step may raise.
    - Writer states: every state recorded with checkpoint N - 1 reaches checkpoint
      N's writers exactly once, by Flink's rule (at the same parallelism each
      subtask gets its own back; otherwise all of them in subtask order, cut into
      contiguous runs); whether the writers keep what they are handed shows in
      the destination.

    Runs a tenth of the examples (at least 5): each is a whole stream of up to a
    few dozen checkpoints. `crash_point` does nothing here (stage 2 crashes there).

    Args:
        make: Returns a `SinkUnderTest` on a fresh destination; called once per example.
        guarantee: The guarantee the sink declares.
        elements: Generates the elements streamed.
        max_examples: As for `check_sink`; this stage runs a tenth of them.
        max_parallelism: The most partitions (writers) of a micro-batch.

    Raises:
        AssertionError: The sink broke its guarantee, or failed where nothing outside
            it interfered. The message names the property, the elements involved and
            the stream so far (hypothesis also prints the shrunk sequence of rules).
        TypeError: ``make`` does not return a `SinkUnderTest`, or an argument has the
            wrong type.
        ValueError: ``max_examples`` or ``max_parallelism`` is invalid.
    """
    _validate(guarantee, elements, max_examples, max_parallelism)
    machine = streaming_machine(
        make, guarantee=guarantee, elements=elements, max_parallelism=max_parallelism
    )
    examples = max(5, resolve_examples(max_examples) // 10)
    run_state_machine_as_test(machine, settings=_settings(examples, steps=_STREAM_STEPS))


def check_sink(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_examples: int = 200,
    max_parallelism: int = 4,
    golden_samples: Mapping[str, Mapping[int, tuple[bytes, object]]] | None = None,
) -> None:
    """Check that a sink keeps the Sink V2 contract and its delivery guarantee.

    Runs, in this order, in process (no Spark):

    1. Serializer properties: every committable, write result and writer state the
       sink's writers produce on generated elements reads back equal through the
       sink's serializers and through cloudpickle; every ``golden_samples`` entry
       still reads; the sink survives cloudpickle (Spark ships it).
    2. A hypothesis state machine over the lifecycle: writes to chosen subtasks,
       checkpoints (``flush(False)`` -> ``prepare_commit()`` -> ``snapshot_state(N)``,
       then commit N, at once or, as Flink notifies a checkpoint's completion late,
       after the writers have written on), end of input, commits repeated, crashes
       at any step (writers dropped with or without ``close()``, checkpoints that
       never complete or are never committed), restores at the same, a higher or a lower parallelism
       (states redistributed by Flink's rule, as the Spark engine does) with replay
       of what came after the checkpoint, losing task attempts, committer signals
       injected around the real committer (``retry_later`` once, failures before,
       halfway and after the commit), pre- and post-commit topologies on a
       `LocalCommittableStream`, and the ``clean_up_attempts`` / ``abort`` hooks
       called as the Spark translator calls them. After every step the destination
       is compared with the model:

       - ``EXACTLY_ONCE``: nothing visible that no completed checkpoint covers, no
         duplicates, nothing committed missing (for stateful writers, which may keep
         elements in their state, at the end); at the end exactly the input.
       - ``AT_LEAST_ONCE``: nothing committed missing; at the end all of the input.
       - ``NONE``: nothing is checked, but no step may raise.

       If the destination shows elements that were never written while written
       ones are missing, the sink changes values (a Decimal read back as a float,
       NaN stored as NULL, a string cut short): the failure is a side-by-side diff
       of the missing and the unexpected elements, with the fields that differ.
    3. Streams (`check_streaming`): micro-batches run as checkpoints by the real
       streaming runtime (`sinkv2.runtime.CheckpointRunner`), as Spark runs them,
       with rescales, drivers dying at any stage event, tasks dying partway,
       restarts that replay the interrupted checkpoint, decoupled commits, and a
       check that every writer state recorded at one checkpoint reaches the next
       one's writers exactly once. The same guarantees are checked.

    What it cannot see: the kit crashes a job between the calls it makes into the
    sink, never inside one. A ``Committer.commit`` that renames three files one by
    one, or a ``prepare_commit`` that uploads two parts, is seen only as a whole,
    so a recovery that mishandles the half-done state goes unnoticed. Mark the
    places in between with `crash_point`: the state machine then also crashes
    there in stage 2 (the call does not finish, the job fails, and the next job
    must commit the pending checkpoint again). Nor does the kit see other processes or
    threads: concurrent jobs, a destination that fails by itself, or a
    `crash_point` reached in a thread the sink started (there it does nothing).

    The kit sets hypothesis's number of examples, steps per example, deadline
    (none) and health checks; the rest comes from the loaded hypothesis settings
    profile: the seed, the example database, and which phases run (never the
    explain phase). Under a profile without ``Phase.shrink`` a failure is reported
    as first found: much sooner, with a longer history.

    Args:
        make: Returns a `SinkUnderTest` on a fresh destination; called once per example.
        guarantee: The guarantee the sink declares.
        elements: Generates the elements written (e.g. rows as dicts); ``read_back``
            must return them in the same shape.
        max_examples: Examples of stage 2 (stages 1 and 3 run a tenth of them).
            ``$SINKV2_KIT_EXAMPLES`` or pytest's ``--sinkv2-examples`` override it;
            CI runs at least 200.
        max_parallelism: The most writers at once (rescales go up to it).
        golden_samples: Serializer name (``"committable"``, ``"write_result"``,
            ``"writer_state"``) -> {version: (the payload bytes that version's
            ``serialize`` wrote, the object they must read as)}.

    Raises:
        AssertionError: The sink broke its contract. The message names the broken
            property, the elements involved, and the lifecycle steps that led there
            (hypothesis also prints the shrunk sequence of rules). A sink that
            catches the crash raised at a `crash_point` fails too.
        TypeError: ``make`` does not return a `SinkUnderTest`, or an argument has the
            wrong type.
        ValueError: ``max_examples``, ``max_parallelism`` or ``golden_samples`` is invalid.
    """
    check_serializer_properties(
        make,
        guarantee=guarantee,
        elements=elements,
        max_examples=max_examples,
        max_parallelism=max_parallelism,
        golden_samples=golden_samples,
    )
    check_lifecycle(
        make,
        guarantee=guarantee,
        elements=elements,
        max_examples=max_examples,
        max_parallelism=max_parallelism,
    )
    check_streaming(
        make,
        guarantee=guarantee,
        elements=elements,
        max_examples=max_examples,
        max_parallelism=max_parallelism,
    )
