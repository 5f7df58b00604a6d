"""The run loop ("processor"): snapshot, claim, intent, read, write, checkpoint, release.

One concept, kept whole: the loop's steps share one run's state (bounds, leases held, the last
checkpoint seen per partition, resets pending, progress) and are read in the order they run;
cut into modules they would hand that state back and forth. Its parts live beside it: pure
planning in :mod:`.plan`, leases in :mod:`.lease`, the sink as checkpoint of last resort in
:mod:`.last_resort`, checkpoints ahead of the hub in :mod:`.ahead`, the read+write step in
:mod:`.ingestor`, the end state and report in :mod:`.report`, the log in :mod:`.log`, the entry
point in :mod:`.entry`.

The loop (docs/run.md has the exactly-once argument step by step):

1. Snapshot: per target partition ``end_p = min(last_enqueued, checkpoint_p + max_events)``.
2. Claim with the configured balancing strategy (CAS on the ownership blobs).
3. Record the intent ``[start_p, end_p]`` on the ownership blob (write-ahead, CAS), or take over
   the pending intent a crashed owner left, unchanged.
4. Read every claimed range as one Spark DataFrame and write it to the idempotent sink.
5. Checkpoint each partition to its range end (fenced by the ownership ETag), release, loop
   until every target's checkpoint reached its bound, whoever did the reading.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from dagster_eventhub_ingest.ops.lag import age_seconds
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
    cycle_size,
    effective_checkpoint,
    next_step,
    replay_ranges,
    satisfied,
    sink_layout,
    snapshot_bound,
)
from dagster_eventhub_ingest.ops.run.progress import (
    PhaseClock,
    ProgressFn,
    ReadTicker,
    RunProgress,
    progress_targets,
)
from dagster_eventhub_ingest.ops.run.report import PartitionReport, RunReport, record_end_state
from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings
from dagster_eventhub_ingest.ops.sinks.batch import PartitionWriteStats
from dagster_eventhub_ingest.resources.errors import (
    CheckpointRegressionError,
    ConfigurationError,
    DataLossError,
    OwnershipLostError,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Ownership, generation_of

__all__ = ["ClaimFn", "Processor"]

logger = logging.getLogger(__name__)

#: Claims the given unsatisfied partitions for this owner; returns the leases it now holds.
ClaimFn = Callable[[Sequence[str]], Mapping[str, Ownership]]


class Processor:
    """The run loop over injected parts, so the same code runs on Azure and in pure tests.

    Args:
        config: the run's settings (strategy, bounds, expiry, data-loss policy).
        store: leases, checkpoints and intents.
        hub: partition bounds on the driver.
        ingestor: the read+write step (Spark in production).
        owner_id: this run's owner id.
        claim: the claim cycle (``dagster_eventhub_ingest.ops.balancing``); gets the unsatisfied
        targets. heartbeat: called with every lease renewal (an owner heartbeat), optional. log:
        Dagster's ``context.log`` or None. on_progress: receives a
        :class:`dagster_eventhub_ingest.ops.run.progress.RunProgress` at the snapshot, every
            ``progress_interval`` seconds while Spark reads (also logged), and after each
            checkpoint.
        progress_interval: seconds between progress updates during a read (0: none).
        preflight: called once before the first claim, only when there is something to do
            (the sink layout check: a run with nothing to read does not look at the sink).
        clock: where the phases' times go (``RunReport.phases``); a new one by default.
        cancel: a request to stop (:mod:`dagster_eventhub_ingest.ops.run.cancel`): the run checks it
            before each claim and each read, and waits on it instead of sleeping; a stopped run
            raises ``RunCancelledError`` after releasing its leases (intents kept).
        sleep / monotonic: injectable for tests (``sleep`` default: a wait that a cancellation
            ends).
    """

    def __init__(
        self,
        config: IngestSettings,
        store: PartitionStore,
        hub: HubClient,
        ingestor: Ingestor,
        *,
        owner_id: str,
        claim: ClaimFn,
        heartbeat: Callable[[], None] | None = None,
        log: Any = None,
        on_progress: ProgressFn | None = None,
        progress_interval: float = 10.0,
        preflight: Callable[[], None] | None = None,
        clock: PhaseClock | None = None,
        cancel: Cancellation | None = None,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not owner_id:
            raise ConfigurationError("owner_id: must not be empty (the Dagster run id, a host)")
        self.config = config
        self.store = store
        self.hub = hub
        self.ingestor = ingestor
        self.owner_id = owner_id
        self.claim = claim
        self.heartbeat = heartbeat
        self.log = TeeLog(log)
        # Checkpoints the hub cannot have produced, and the partitions still to be reset.
        self._ahead = CheckpointsAhead(
            config.on_checkpoint_ahead,
            store,
            hub,
            owner_id=owner_id,
            hub_desc=store.hub.describe(),
            log=self.log,
        )
        self.cancel = cancel if cancel is not None else Cancellation()
        self.sleep: Callable[[float], object] = sleep if sleep is not None else self.cancel.wait
        self.monotonic = monotonic
        self.hub_desc = store.hub.describe()
        self._last_cp: dict[str, int | None] = {}
        self._seen: dict[str, set[str]] = {}
        self._hub_created: int | None = None
        # Consecutive claim cycles that claimed every pending partition, and the events per
        # partition the current cycle reads (dagster_eventhub_ingest.ops.run.plan.cycle_size).
        self._cycles_alone = 0
        self._cap = config.max_events_per_cycle
        self._layout = sink_layout(config.sink.format, config.sink.partition_by)
        # What the sink already holds, looked at before a range is chosen.
        self._last_resort = LastResort(config, store, owner_id, self.hub_desc, self.log)
        self.on_progress = on_progress
        self.progress_interval = progress_interval
        self.preflight = preflight
        self.clock = clock if clock is not None else PhaseClock()
        self._started = time.monotonic()
        self.progress = RunProgress(owner_id, "starting", 0.0)

    # -- public --------------------------------------------------------------------------------
    def run(self, partition_ids: Sequence[str] | None = None) -> RunReport:
        """Bring ``partition_ids`` (default: all) up to their snapshot bound, exactly once."""
        started = datetime.now(timezone.utc)
        with self.clock.phase("snapshot"):
            targets, bounds, infos, reports, cps = self._snapshot(partition_ids)
        if not self._ahead.pending and all(satisfied(bounds[p], cps.get(p)) for p in targets):
            # Nothing to read (the common scheduled run): no claim, no sink look, no Spark,
            # and the report from the snapshot just taken.
            for p in targets:
                self.progress.partitions[p].done = True
            self._emit("finished")
            with self.clock.phase("report"):
                return self._final_report(
                    targets, bounds, infos, reports, 0, started, replay=False, fresh=(infos, cps)
                )
        self.cancel.check("before claiming")
        # Something to read: the session starts while the run checks the sink and claims
        # (the join grace is a second of waiting); the first cycle waits for it before
        # recording intents. Started before the sink's check, whose first look imports
        # pyarrow (0.2-0.25 s of the driver's CPU): nothing is claimed before it passed.
        self.ingestor.start_early()
        self._preflight()
        return self._loop(targets, bounds, infos, reports, started)

    def _snapshot(
        self, partition_ids: Sequence[str] | None
    ) -> tuple[
        list[str],
        dict[str, PartitionTarget],
        dict[str, PartitionInfo],
        dict[str, PartitionReport],
        dict[str, Checkpoint],
    ]:
        """Targets, their bounds and the state of store and hub before anything is claimed."""
        targets = self._targets(partition_ids)
        self._hub_created = self.hub.hub_created_ms()
        # The store before the hub: the hub's numbers only grow, so a checkpoint or intent a
        # peer writes meanwhile can never look ahead of this snapshot.
        owns = self.store.list_ownership()
        cps = self.store.list_checkpoints(owns)
        infos = self.hub.partition_info(targets)
        self._ahead.find(targets, infos, cps, owns, self._hub_created)
        if any(owns[p].intent is not None for p in targets if p in owns):
            # A pending intent: the sink's layout on disk is checked before the intent's own.
            self._preflight()
        for pid in targets:
            own = owns.get(pid)
            if own is not None and pid not in self._ahead.pending:
                self._check_intent_layout(pid, own)
        bounds = {
            p: snapshot_bound(
                infos[p],
                None if p in self._ahead.pending else cps.get(p),
                self.config.max_events_per_partition,
                self.config.on_data_loss,
                self.hub_desc,
            )
            for p in targets
        }
        reports = {
            p: PartitionReport(p, snapshot_end_sequence_number=bounds[p].target) for p in targets
        }
        for p in targets:
            self._last_cp[p] = cps[p].sequence_number if p in cps else None
            self._seen[p] = set()
            self.log.info(
                f"snapshot hub={self.hub_desc} partition={p} owner={self.owner_id} "
                f"checkpoint={self._last_cp[p]} last_enqueued="
                f"{infos[p].last_enqueued_sequence_number} bound={bounds[p].target}"
            )
        self.progress.partitions = progress_targets(
            {p: bounds[p].target for p in targets}, dict(self._last_cp)
        )
        self._emit("snapshot")
        return targets, bounds, dict(infos), reports, dict(cps)

    def _loop(
        self,
        targets: list[str],
        bounds: dict[str, PartitionTarget],
        infos: dict[str, PartitionInfo],
        reports: dict[str, PartitionReport],
        started: datetime,
    ) -> RunReport:
        """Claim, read, checkpoint until every target reached its bound (or the deadline)."""
        cycles = 0
        keeper = LeaseKeeper(
            self.store,
            self.owner_id,
            interval=max(self.config.lease_expiry_seconds / 3, 0.05),
            on_tick=self.heartbeat,
            warn=self.log.extra_warning,
        )
        deadline = (
            self.monotonic() + self.config.run_timeout_seconds
            if self.config.run_timeout_seconds is not None
            else None
        )
        backoff = self.config.poll_initial_seconds
        with keeper:
            try:
                while True:
                    self.cancel.check("before claiming")
                    with self.clock.phase("claims"):
                        owns = self.store.list_ownership()
                        cps = self.store.list_checkpoints(owns)
                        self._observe(targets, owns, cps, reports)
                        pending = [
                            p
                            for p in targets
                            if p in self._ahead.pending or not satisfied(bounds[p], cps.get(p))
                        ]
                        for p in targets:
                            part = self.progress.partitions[p]
                            part.done = p not in pending
                            if part.done and part.mine and part.reading is None:
                                part.target_events = part.landed_events  # nothing more for us
                        claimed = self._claim_all(pending) if pending else {}
                    if not pending:
                        break
                    if not claimed:
                        if deadline is not None and self.monotonic() > deadline:
                            self.log.warning(
                                f"run_timeout_seconds reached hub={self.hub_desc} "
                                f"owner={self.owner_id}; partitions still behind: {pending}"
                            )
                            break
                        with self.clock.phase("claims"):
                            self.sleep(backoff)
                        backoff = min(backoff * 2, self.config.poll_max_seconds)
                        continue
                    backoff = self.config.poll_initial_seconds
                    cycles += 1
                    alone = len(claimed) >= len(pending)
                    self._cycles_alone = self._cycles_alone + 1 if alone else 0
                    self._cap = cycle_size(
                        self.config.max_events_per_cycle, self._cycles_alone, len(pending)
                    )
                    keeper.hold(claimed.values())
                    fault_point("after_claim")
                    self._cycle(keeper, claimed, bounds, infos, reports)
                    with self.clock.phase("checkpoint"):
                        keeper.release_all()
            finally:
                # Pending intents stay on the blobs: whoever claims next replays them.
                with self.clock.phase("checkpoint"):
                    keeper.release_all(leaving=True)
                if self.cancel.cancelled:
                    self.log.warning(
                        f"run stopped hub={self.hub_desc} owner={self.owner_id} "
                        f"({self.cancel.reason}): leases released, pending intents kept for "
                        "the next run"
                    )
        self._emit("finished")
        with self.clock.phase("report"):
            return self._final_report(
                targets, bounds, infos, reports, cycles, started, replay=False
            )

    def replay(self, spec: ReplaySettings, partition_ids: Sequence[str] | None = None) -> RunReport:
        """Write the ranges of ``spec`` to the sink; leases and checkpoints are not touched."""
        started = datetime.now(timezone.utc)
        self._preflight()
        if spec.ranges is not None:
            targets = self._targets(list(spec.ranges))
        else:
            targets = self._targets(partition_ids)
        infos = self.hub.partition_info(targets)
        owns = self.store.list_ownership()
        sdk = self.store.list_sdk_checkpoints()
        cps = self.store.list_checkpoints(owns)
        # A re-created hub's events go under its generation's keys, never over the old hub's.
        gens = {
            p: g
            for p in targets
            if (g := generation_of(sdk.get(p), owns[p].progress if p in owns else None)) is not None
        }
        ranges, skipped = replay_ranges(
            targets,
            infos,
            cps,
            ranges=spec.ranges,
            starting_position=spec.starting_position,
            ending_position=spec.ending_position,
            on_data_loss=self.config.on_data_loss,
            hub=self.hub_desc,
        )
        reports = {p: PartitionReport(p) for p in targets}
        for pid, gap in skipped.items():
            reports[pid].skipped_ranges.append(gap)
        self.progress.partitions = progress_targets(
            {p: ranges[p].end for p in ranges}, {p: ranges[p].start - 1 for p in ranges}
        )
        for pid, (start, end) in ranges.items():
            reports[pid].snapshot_end_sequence_number = end
            self.log.info(
                f"replay hub={self.hub_desc} partition={pid} owner={self.owner_id} "
                f"range=[{start}, {end}] (checkpoint not moved)"
            )
        self.cancel.check("before reading")
        try:
            with self.clock.phase("read_write"):
                results = self._ingest(ranges, None, gens, infos) if ranges else {}
        except Exception as exc:
            if self.cancel.cancelled:
                raise self.cancel.error("while replaying") from exc
            raise
        for pid, result in results.items():
            reports[pid].add(result, self.owner_id)
            self.progress.partitions[pid].landed_events += result.events
            self.progress.partitions[pid].reading = None
            self.progress.partitions[pid].done = True
        self._emit("finished")
        for pid in targets:
            reports[pid].up_to_date = pid not in ranges or pid in results
        with self.clock.phase("report"):
            return self._final_report(targets, {}, infos, reports, 1, started, replay=True)

    def _preflight(self) -> None:
        """The checks made only when there is something to do, once per run."""
        if self.preflight is not None:
            check, self.preflight = self.preflight, None
            with self.clock.phase("management"):
                check()

    def _claim_all(self, pending: Sequence[str]) -> dict[str, Ownership]:
        """Claim cycles until this owner's share stops growing, so one read covers it all.

        Strategies that take one partition per cycle (``balanced``, ``eph``) would otherwise
        turn a batch run into one Spark job per partition. Each further cycle also refreshes
        the liveness view, so a peer that joined meanwhile still gets its share.
        """
        wanted = set(pending)
        held = {p: o for p, o in self.claim(pending).items() if p in wanted}
        for _ in range(len(pending)):
            if not held or len(held) == len(pending):
                break
            more = {p: o for p, o in self.claim(pending).items() if p in wanted}
            if set(more) <= set(held):
                held.update({p: o for p, o in more.items() if p in held})
                break
            held = more
        return held

    # -- one cycle -----------------------------------------------------------------------------
    def _cycle(
        self,
        keeper: LeaseKeeper,
        claimed: Mapping[str, Ownership],
        bounds: dict[str, PartitionTarget],
        infos: dict[str, PartitionInfo],
        reports: dict[str, PartitionReport],
    ) -> None:
        for pid in claimed:
            part = self.progress.partitions.get(pid)
            if part is not None:
                # Part of this run's share: what is left to its bound, plus what it landed.
                cp = self._last_cp.get(pid)
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
            steps, replayed, gens = self._plan_cycle(keeper, claimed, bounds, infos, reports)
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
                    results = self._ingest(ranges, expired, gens, infos)
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
            self._checkpoint_cycle(keeper, steps, results, replayed, reports)
        fault_point("after_checkpoint")
        # One line per claim cycle: the landed counts move in the event log while the step runs.
        self._emit("checkpointed", log=True)

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

    def _plan_cycle(
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
        self._last_resort.new_cycle(self.ingestor)
        for pid, own in claimed.items():
            try:
                sdk_cp = sdk.get(pid)
                if pid in self._ahead.pending:
                    reset = self._ahead.reset(keeper, pid, own, sdk_cp, infos, self._hub_created)
                    if reset is not None:
                        own, sdk_cp = reset.ownership, reset.checkpoint
                        reports[pid].checkpoint_reset = reset.note
                        self._last_cp[pid] = reset.checkpoint.sequence_number
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

    def _checkpoint_cycle(
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
            self._last_cp[pid] = end
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
            own, end, offset, hub_created_ms=self._hub_created, landed_events=landed
        )

    def _check_intent_layout(self, pid: str, own: Ownership) -> None:
        """A pending intent is replayed into the sink layout it was written with, or refused.

        Its batch may already be in the sink under the old layout; the replay would add it a
        second time under the new one (and leave a folder no reader accepts).
        """
        intent = own.intent
        if intent is None or intent.layout is None or intent.layout == self._layout:
            return
        raise ConfigurationError(
            f"sink: hub={self.hub_desc} partition={pid}: the pending intent [{intent.start}, "
            f"{intent.end}] left by owner {intent.owner_id!r} was written with sink "
            f"{intent.layout}, but the sink is now {self._layout}. Replaying it into another "
            "layout would land its events twice; nothing was claimed or read. Run once more "
            "with the previous sink settings to finish it, then change them (or write to a new "
            "path)."
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
        cap = self._cap
        step = next_step(bound, cp, own.intent, begin, self.config.on_data_loss, self.hub_desc, cap)
        if step.kind == "clear" and cp is not None:
            # A checkpoint written elsewhere (an SDK processor) already covers the intent.
            keeper.apply(
                pid,
                lambda o: self.store.checkpoint(
                    o, cp.sequence_number, cp.offset, hub_created_ms=self._hub_created
                ),
            )
            step = next_step(bound, cp, None, begin, self.config.on_data_loss, self.hub_desc, cap)
        if step.kind == "read":
            # Never a range the sink already holds: the checkpoint of last resort.
            adjusted = self._last_resort.adjust(
                keeper,
                pid,
                cp,
                step,
                bound,
                infos[pid],
                generation,
                hub_created=self._hub_created,
                cap=cap,
            )
            step, generation = adjusted.step, adjusted.generation
            if adjusted.moved is not None:
                self._moved(pid, adjusted.moved, adjusted.bound, adjusted.note, bounds, report)
        if step.kind == "read":
            keeper.apply(
                pid,
                lambda o: self.store.record_intent(
                    o, step.start, step.end, layout=self._layout, generation=generation
                ),
            )
            self.log.info(
                f"intent hub={self.hub_desc} partition={pid} owner={self.owner_id} "
                f"range=[{step.start}, {step.end}]"
            )
        elif step.kind == "replay":
            assert own.intent is not None
            self._check_intent_layout(pid, own)
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
        self._last_cp[pid] = cp.sequence_number
        progress = self.progress.partitions.get(pid)
        if progress is not None:  # what is left to land from the moved checkpoint
            left = progress_targets({pid: bound.target}, {pid: cp.sequence_number})
            progress.target_events = progress.landed_events + left[pid].target_events

    def _ingest(
        self,
        ranges: Mapping[str, SeqRange],
        expired: Mapping[str, int] | None = None,
        generations: Mapping[str, int] | None = None,
        infos: Mapping[str, PartitionInfo] | None = None,
    ) -> dict[str, PartitionWriteStats]:
        for pid, rng in ranges.items():
            if pid in self.progress.partitions:
                self.progress.partitions[pid].reading = rng
                self.progress.partitions[pid].read_events = 0
        self._emit("reading")
        timer = fault_timer("mid_read")
        try:
            with ReadTicker(self.progress_interval, lambda: self._emit("reading", log=True)):
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
        takes minutes) and how long it took: a line at once, one every ``progress_interval``
        seconds, and one when it is up."""
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
            self._emit("spark starting", log=True)

        starting()
        with ReadTicker(self.progress_interval, starting), self.clock.active():
            self.ingestor.prepare()
        self.progress.spark_start_seconds = seconds()
        self._emit("spark started", log=True)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _emit(self, phase: str, *, log: bool = False) -> None:
        """Send the current progress to ``on_progress`` (and the log during long reads)."""
        self.progress.phase = phase
        self.progress.elapsed_seconds = time.monotonic() - self._started
        self.progress.spark_tasks = self.ingestor.task_counts() if phase == "reading" else None
        if phase == "reading":
            # Live counts the readers wrote to the store; never more than the range in flight.
            for pid, n in self.ingestor.read_counts().items():
                part = self.progress.partitions.get(pid)
                if part is not None and part.reading is not None:
                    part.read_events = max(part.read_events, n)
        if log:
            self.log.info(
                f"progress hub={self.hub_desc} owner={self.owner_id}: {self.progress.line()}"
            )
        if self.on_progress is not None:
            try:
                self.on_progress(self.progress)
            except Exception:  # a broken progress display must not fail the run
                logger.debug("on_progress failed", exc_info=True)

    def _targets(self, partition_ids: Sequence[str] | None) -> list[str]:
        if partition_ids:
            targets = list(dict.fromkeys(str(p) for p in partition_ids))
            known = self.hub.partition_ids()
            unknown = [p for p in targets if p not in known]
            if unknown:
                from dagster_eventhub_ingest.resources.errors import RangeError

                raise RangeError(
                    f"partition(s) {', '.join(unknown)} do not exist in hub {self.hub_desc}; "
                    f"valid partition ids: {', '.join(known)}"
                )
            return targets
        return self.hub.partition_ids()

    def _observe(
        self,
        targets: Sequence[str],
        owns: Mapping[str, Ownership],
        cps: Mapping[str, Checkpoint],
        reports: dict[str, PartitionReport],
    ) -> None:
        """Attribute checkpoint moves this run did not make to the peers seen holding them."""
        for pid in targets:
            own = owns.get(pid)
            if own is not None:
                for who in (own.owner_id, own.intent.owner_id if own.intent else ""):
                    if who and who != self.owner_id:
                        self._seen[pid].add(who)
            current = cps[pid].sequence_number if pid in cps else None
            previous = self._last_cp.get(pid)
            if current is not None and (previous is None or current > previous):
                for who in sorted(self._seen[pid]) or ["unknown"]:
                    if who not in reports[pid].read_by:
                        reports[pid].read_by.append(who)
                self._seen[pid].clear()
            self._last_cp[pid] = current

    def _final_report(
        self,
        targets: Sequence[str],
        bounds: Mapping[str, PartitionTarget],
        snapshot: Mapping[str, PartitionInfo],
        reports: dict[str, PartitionReport],
        cycles: int,
        started: datetime,
        *,
        replay: bool,
        fresh: tuple[Mapping[str, PartitionInfo], Mapping[str, Checkpoint]] | None = None,
    ) -> RunReport:
        """The report; ``fresh``: bounds and checkpoints just read (no second look needed)."""
        if fresh is not None:
            infos, cps = dict(fresh[0]), dict(fresh[1])
        else:
            try:
                infos = self.hub.partition_info(targets)
            except Exception:  # the run is done; stale bounds still tell the lag
                self.log.warning(f"could not refresh partition bounds hub={self.hub_desc}")
                infos = dict(snapshot)
            cps = self.store.list_checkpoints()
        now = datetime.now(timezone.utc)
        wanted = record_end_state(
            reports,
            targets,
            infos,
            cps,
            bounds,
            now=now,
            replay=replay,
            resets=self._ahead.pending,
            report_lag_seconds=self.config.report_lag_seconds,
        )
        if wanted:
            # Only where neither the properties nor this run's writes tell the time: one
            # single-event receive per such partition, concurrently.
            for pid, when in self.hub.enqueued_times(wanted).items():
                if when is not None:
                    reports[pid].lag_seconds = age_seconds(now, when)
        report = RunReport(
            owner_id=self.owner_id,
            partitions={p: reports[p] for p in targets},
            complete=all(reports[p].up_to_date for p in targets),
            output_location=self.ingestor.output_location,
            hub=f"{self.store.hub.fully_qualified_namespace}/{self.store.hub.eventhub_name}",
            consumer_group=self.store.hub.consumer_group,
            replay=replay,
            cycles=cycles,
            started_at=started,
            finished_at=datetime.now(timezone.utc),
        )
        self.log.info(
            f"run finished hub={self.hub_desc} owner={self.owner_id} complete={report.complete} "
            f"events={report.events} cycles={cycles}"
        )
        return report
