"""One claim cycle of a run: plan (intents recorded), fence, read+write, checkpoint.

The run's loop (:mod:`.processor`) claims; a :class:`ClaimCycle` then takes the partitions just
claimed through the rest of one cycle:

1. Plan each partition's next step (:func:`.plan.next_step`), never a range the sink already
   holds (:mod:`.last_resort`), and record its intent ``[start, end]`` (write-ahead, CAS), or
   take over the pending intent a crashed owner left, unchanged.
2. Fence: drop every partition whose lease was lost meanwhile, right before the write.
3. Read every range as one Spark DataFrame and write it to the idempotent sink (the
   :class:`~dagster_eventhub_ingest.ops.run.ingestor.Ingestor`); the events returned must fill
   each range.
4. Checkpoint each written partition to its range end, fenced by the ownership ETag.

What the loop and its cycles both keep up to date lives in a :class:`RunState`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dagster_eventhub_ingest.ops.run.ahead import CheckpointsAhead
from dagster_eventhub_ingest.ops.run.cancel import Cancellation
from dagster_eventhub_ingest.ops.run.fault import fault_point, fault_timer
from dagster_eventhub_ingest.ops.run.hub import HubClient, PartitionInfo
from dagster_eventhub_ingest.ops.run.ingestor import Ingestor
from dagster_eventhub_ingest.ops.run.last_resort import LastResort
from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
from dagster_eventhub_ingest.ops.run.log import TeeLog
from dagster_eventhub_ingest.ops.run.plan import (
    PartitionTarget,
    Step,
    check_intent_layout,
    effective_checkpoint,
    next_step,
)
from dagster_eventhub_ingest.ops.run.progress import PhaseClock, ProgressFeed, progress_targets
from dagster_eventhub_ingest.ops.run.report import PartitionReport
from dagster_eventhub_ingest.ops.run.settings import IngestSettings
from dagster_eventhub_ingest.ops.sinks.batch import PartitionWriteStats
from dagster_eventhub_ingest.resources.errors import (
    CheckpointRegressionError,
    DataLossError,
    OwnershipLostError,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Ownership, generation_of

__all__ = ["ClaimCycle", "RunState"]


@dataclass
class RunState:
    """What one run learnt so far, kept up to date by its loop and its cycles alike.

    Attributes:
        last_cp: the last checkpoint seen per target partition (None: none yet).
        hub_created: the hub's creation time (ms) at the snapshot; None when it has none.
        cap: events per partition the current cycle reads
            (:func:`dagster_eventhub_ingest.ops.run.plan.cycle_size`; None: no cap).
    """

    last_cp: dict[str, int | None] = field(default_factory=dict)
    hub_created: int | None = None
    cap: int | None = None


class ClaimCycle:
    """Takes the partitions a claim just won through one cycle (see the module docstring).

    Args:
        config: the run's settings. store / hub / ingestor: as the run's
            :class:`~dagster_eventhub_ingest.ops.run.processor.Processor` got them.
        owner_id / hub_desc: named in every line. log / clock / cancel / feed: the run's.
        state: shared with the run's loop. ahead: checkpoints the hub cannot have produced.
        last_resort: what the sink already holds. layout: the sink's layout, as intents
            record it.
    """

    def __init__(
        self,
        config: IngestSettings,
        store: PartitionStore,
        hub: HubClient,
        ingestor: Ingestor,
        *,
        owner_id: str,
        hub_desc: str,
        log: TeeLog,
        clock: PhaseClock,
        cancel: Cancellation,
        feed: ProgressFeed,
        state: RunState,
        ahead: CheckpointsAhead,
        last_resort: LastResort,
        layout: str,
    ) -> None:
        self.config = config
        self.store = store
        self.hub = hub
        self.ingestor = ingestor
        self.owner_id = owner_id
        self.hub_desc = hub_desc
        self.log = log
        self.clock = clock
        self.cancel = cancel
        self.feed = feed
        self.progress = feed.progress
        self.state = state
        self.ahead = ahead
        self.last_resort = last_resort
        self.layout = layout

    def run(
        self,
        keeper: LeaseKeeper,
        claimed: Mapping[str, Ownership],
        bounds: dict[str, PartitionTarget],
        infos: dict[str, PartitionInfo],
        reports: dict[str, PartitionReport],
    ) -> None:
        """One cycle over ``claimed``; ``bounds``, ``infos`` and ``reports`` follow what it did."""
        for pid in claimed:
            part = self.progress.partitions.get(pid)
            if part is not None:
                # Part of this run's share: what is left to its bound, plus what it landed.
                cp = self.state.last_cp.get(pid)
                left = progress_targets({pid: bounds[pid].target}, {pid: cp})[pid].target_events
                part.mine = True
                part.target_events = part.landed_events + left
        # The session (started early, or now) is up before the intents: while it starts
        # (seconds), a run that joined meanwhile can still take its share of leases not
        # yet started (dagster_eventhub_ingest.ops.balancing: unstarted surplus is stealable),
        # so runs a few seconds apart split even a small backlog. What is left of the start is
        # timed as spark_start.
        self._await_session()
        self.cancel.check("before recording intents")
        with self.clock.phase("planning"):
            steps, replayed, gens = self._plan(keeper, claimed, bounds, infos, reports)
        fault_point("after_intent")
        self._fence(keeper, steps)
        ranges = {p: s.range for p, s in steps.items() if s.kind in ("read", "replay")}
        # Replays of intents whose head expired: read what is left, under the intent's key.
        expired = {
            p: s.skipped.end + 1
            for p, s in steps.items()
            if s.kind == "replay" and s.skipped is not None
        }
        results: dict[str, PartitionWriteStats] = {}
        if ranges:
            self.cancel.check("before reading")
            try:
                with self.clock.phase("read_write"):
                    results = self.ingest(ranges, expired, gens, infos)
            except Exception as exc:
                if self.cancel.cancelled:
                    # The write was interrupted, not committed (or committed, then its
                    # verification was): either way the intents stay and are replayed.
                    raise self.cancel.error("while reading and writing") from exc
                if not isinstance(exc, DataLossError) or self.config.on_data_loss != "skip":
                    raise
                # Retention moved since the snapshot: look again; the intents stay and the next
                # cycle plans them against the new earliest event.
                infos.update(self.hub.partition_info(list(ranges)))
                self.log.warning(
                    f"data loss while reading hub={self.hub_desc} owner={self.owner_id} "
                    f"partitions={sorted(ranges)}; re-planning with on_data_loss=skip"
                )
                return
            fault_point("after_write")
        with self.clock.phase("checkpoint"):
            self._checkpoint(keeper, steps, results, replayed, reports)
        fault_point("after_checkpoint")
        # One line per claim cycle: the landed counts move in the event log while the step runs.
        self.feed.emit("checkpointed", log=True)

    def _fence(self, keeper: LeaseKeeper, steps: dict[str, Step]) -> None:
        """Drop from ``steps`` every partition to be written whose lease this run no longer
        holds, right before the write.

        A lease is lost when renewals failed for its whole expiry (a storage outage, a stalled
        process): a peer then takes the partition and replays the same intent into the same
        batch key. Planning may have taken that long (its store calls retry), and a replayed
        intent needs no store write of its own, so nothing else would notice: each lease is
        proven by a store write less than a renewal interval old, or renewed now
        (:meth:`LeaseKeeper.confirm`).
        """
        writes = [p for p, s in steps.items() if s.kind in ("read", "replay")]
        if not writes:
            return
        held = keeper.confirm(writes, within=max(self.config.lease_expiry_seconds / 3, 0.05))
        for pid in writes:
            if pid not in held:
                step = steps.pop(pid)
                self.log.warning(
                    f"not writing partition {pid} hub={self.hub_desc} owner={self.owner_id}: its "
                    f"lease was lost before the write of [{step.start}, {step.end}]; the owner "
                    "that took it writes that batch"
                )

    def _plan(
        self,
        keeper: LeaseKeeper,
        claimed: Mapping[str, Ownership],
        bounds: dict[str, PartitionTarget],
        infos: dict[str, PartitionInfo],
        reports: dict[str, PartitionReport],
    ) -> tuple[dict[str, Step], dict[str, tuple[int, int, str]], dict[str, int]]:
        """The next step of every claimed partition (intents recorded); released when done.

        Also the hub generation of each step's batch key, for partitions that have one.
        """
        sdk = self.store.list_sdk_checkpoints()
        steps: dict[str, Step] = {}
        replayed: dict[str, tuple[int, int, str]] = {}
        gens: dict[str, int] = {}
        self.last_resort.new_cycle(self.ingestor)
        for pid, own in claimed.items():
            try:
                sdk_cp = sdk.get(pid)
                if pid in self.ahead.pending:
                    reset = self.ahead.reset(
                        keeper, pid, own, sdk_cp, infos, self.state.hub_created
                    )
                    if reset is not None:
                        own, sdk_cp = reset.ownership, reset.checkpoint
                        reports[pid].checkpoint_reset = reset.note
                        self.state.last_cp[pid] = reset.checkpoint.sequence_number
                gen = generation_of(sdk_cp, own.progress)
                step, gen = self._plan_partition(
                    keeper, pid, own, sdk_cp, bounds, infos, gen, reports[pid]
                )
            except OwnershipLostError:
                continue
            if step.kind == "done":
                keeper.release(pid)
                continue
            steps[pid] = step
            if step.kind == "replay" and own.intent is not None:
                replayed[pid] = (step.start, step.end, own.intent.owner_id or "")
                # Exactly the key the first attempt wrote: the intent's generation.
                gen = own.intent.generation
            if gen is not None:
                gens[pid] = gen
        return steps, replayed, gens

    def _checkpoint(
        self,
        keeper: LeaseKeeper,
        steps: Mapping[str, Step],
        results: Mapping[str, PartitionWriteStats],
        replayed: Mapping[str, tuple[int, int, str]],
        reports: dict[str, PartitionReport],
    ) -> None:
        """Move each written (or skipped) partition's checkpoint to its range end."""
        for pid, step in steps.items():
            if step.kind == "skip":
                end, offset = step.end, None
            elif pid in results:
                end, offset = step.end, results[pid].last_offset
            else:
                continue
            fault_point("during_checkpoint")
            landed = results[pid].events if pid in results else 0
            try:
                keeper.apply(pid, self._checkpointer(end, offset, landed))
            except (OwnershipLostError, CheckpointRegressionError) as exc:
                # The new owner replays the same intent into the same output; nothing to undo.
                self.log.warning(
                    f"checkpoint refused hub={self.hub_desc} partition={pid} "
                    f"owner={self.owner_id}: {exc}"
                )
                continue
            self.state.last_cp[pid] = end
            report = reports[pid]
            if step.skipped is not None:
                report.skipped_ranges.append(step.skipped)
                self.log.warning(
                    f"skipped expired events hub={self.hub_desc} partition={pid} "
                    f"owner={self.owner_id} range={list(step.skipped)} (on_data_loss=skip)"
                )
            if pid in results:
                report.add(results[pid], self.owner_id)
            progress = self.progress.partitions.get(pid)
            if progress is not None:
                progress.landed_events += results[pid].events if pid in results else 0
                progress.reading = None
            if pid in replayed:
                report.replayed_intents.append(replayed[pid])
            self.log.info(
                f"ingested hub={self.hub_desc} partition={pid} owner={self.owner_id} "
                f"{step.kind}=[{step.start}, {step.end}] events="
                f"{results[pid].events if pid in results else 0} checkpoint={end}"
            )

    def _checkpointer(
        self, end: int, offset: str | None, landed: int
    ) -> Callable[[Ownership], Ownership]:
        return lambda own: self.store.checkpoint(
            own, end, offset, hub_created_ms=self.state.hub_created, landed_events=landed
        )

    def _plan_partition(
        self,
        keeper: LeaseKeeper,
        pid: str,
        own: Ownership,
        sdk_cp: Checkpoint | None,
        bounds: dict[str, PartitionTarget],
        infos: Mapping[str, PartitionInfo],
        generation: int | None,
        report: PartitionReport,
    ) -> tuple[Step, int | None]:
        """The partition's step this cycle (its intent recorded), and the hub generation its
        batch key names. ``bounds[pid]`` moves with a checkpoint moved past the sink."""
        bound = bounds[pid]
        begin = infos[pid].begin_sequence_number
        cp = effective_checkpoint(sdk_cp, own.progress)
        cap = self.state.cap
        hub_created = self.state.hub_created
        step = next_step(bound, cp, own.intent, begin, self.config.on_data_loss, self.hub_desc, cap)
        if step.kind == "clear" and cp is not None:
            # A checkpoint written elsewhere (an SDK processor) already covers the intent.
            keeper.apply(
                pid,
                lambda o: self.store.checkpoint(
                    o, cp.sequence_number, cp.offset, hub_created_ms=hub_created
                ),
            )
            step = next_step(bound, cp, None, begin, self.config.on_data_loss, self.hub_desc, cap)
        if step.kind == "read":
            # Never a range the sink already holds: the checkpoint of last resort.
            adjusted = self.last_resort.adjust(
                keeper,
                pid,
                cp,
                step,
                bound,
                infos[pid],
                generation,
                hub_created=hub_created,
                cap=cap,
            )
            step, generation = adjusted.step, adjusted.generation
            if adjusted.moved is not None:
                self._moved(pid, adjusted.moved, adjusted.bound, adjusted.note, bounds, report)
        if step.kind == "read":
            keeper.apply(
                pid,
                lambda o: self.store.record_intent(
                    o, step.start, step.end, layout=self.layout, generation=generation
                ),
            )
            self.log.info(
                f"intent hub={self.hub_desc} partition={pid} owner={self.owner_id} "
                f"range=[{step.start}, {step.end}]"
            )
        elif step.kind == "replay":
            assert own.intent is not None
            check_intent_layout(self.hub_desc, pid, own.intent, self.layout)
            gen = own.intent.generation
            if step.skipped is not None and self.ingestor.batch_written(
                pid, step.start, step.end, gen
            ):
                # The crashed attempt committed the whole batch before the head expired:
                # keep it (a replay would drop its expired rows) and move past it.
                self.log.info(
                    f"pending intent already in the sink hub={self.hub_desc} partition={pid} "
                    f"owner={self.owner_id} range=[{step.start}, {step.end}]; kept"
                )
                return Step("skip", step.start, step.end), generation
            self.log.info(
                f"replaying pending intent hub={self.hub_desc} partition={pid} "
                f"owner={self.owner_id} range=[{step.start}, {step.end}] "
                f"left by {own.intent.owner_id or 'unknown'}"
            )
        return step, generation

    def _moved(
        self,
        pid: str,
        cp: Checkpoint,
        bound: PartitionTarget,
        note: str | None,
        bounds: dict[str, PartitionTarget],
        report: PartitionReport,
    ) -> None:
        """The checkpoint was moved past what the sink holds (``note`` says so): the bound,
        report and progress follow it."""
        bounds[pid] = bound
        report.checkpoint_reset = note
        report.snapshot_end_sequence_number = bound.target
        self.state.last_cp[pid] = cp.sequence_number
        progress = self.progress.partitions.get(pid)
        if progress is not None:  # what is left to land from the moved checkpoint
            left = progress_targets({pid: bound.target}, {pid: cp.sequence_number})
            progress.target_events = progress.landed_events + left[pid].target_events

    def ingest(
        self,
        ranges: Mapping[str, SeqRange],
        expired: Mapping[str, int] | None = None,
        generations: Mapping[str, int] | None = None,
        infos: Mapping[str, PartitionInfo] | None = None,
    ) -> dict[str, PartitionWriteStats]:
        """Read and write ``ranges`` (the read step of a cycle, and of a replay); the events
        returned must fill each range, or :class:`DataLossError` (nothing moved)."""
        for pid, rng in ranges.items():
            if pid in self.progress.partitions:
                self.progress.partitions[pid].reading = rng
                self.progress.partitions[pid].read_events = 0
        self.feed.emit("reading")
        timer = fault_timer("mid_read")
        try:
            with self.feed.ticker(lambda: self.feed.emit("reading", log=True)):
                # Only what applies is passed: an ingestor of a hub never re-created (or a
                # test fake) need not know generations.
                extra: dict[str, Any] = {}
                if expired:
                    extra["expired_before"] = expired
                gens = {p: g for p, g in (generations or {}).items() if p in ranges}
                if gens:
                    extra["generations"] = gens
                known = {p: i for p, i in (infos or {}).items() if p in ranges}
                if len(known) == len(ranges):
                    # The source checks the ranges against this look, not a new one.
                    extra["partition_infos"] = known
                results = self.ingestor.ingest(ranges, **extra)
        finally:
            if timer is not None:
                timer.cancel()
        for pid, (start, end) in ranges.items():
            result = results.get(pid)
            expected = end - max(start, (expired or {}).get(pid, start)) + 1
            if result is None or result.events != expected or result.last_sequence_number != end:
                got = "nothing" if result is None else f"{result.events} events"
                raise DataLossError(
                    f"hub={self.hub_desc} partition={pid}: range [{start}, {end}] should hold "
                    f"{expected} events but the reader returned {got}; the checkpoint was not "
                    "moved. The events may have expired meanwhile; run again (on_data_loss: "
                    "skip passes over expired ones)."
                )
        return results

    def _await_session(self) -> None:
        """Have the Spark session up, saying so while it starts (a cold JVM on a loaded host
        takes minutes) and how long it took: a line at once, one every progress interval, and
        one when it is up."""
        if self.ingestor.session_up:
            with self.clock.active():
                self.ingestor.prepare()
            return
        began = time.monotonic()

        def seconds() -> float:
            # The ingestor's own clock counts from when it began the start (early, on a thread).
            so_far = self.ingestor.spark_start_seconds()
            return so_far if so_far is not None else time.monotonic() - began

        def starting() -> None:
            self.progress.spark_start_seconds = seconds()
            self.feed.emit("spark starting", log=True)

        starting()
        with self.feed.ticker(starting), self.clock.active():
            self.ingestor.prepare()
        self.progress.spark_start_seconds = seconds()
        self.feed.emit("spark started", log=True)
