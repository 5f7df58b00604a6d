"""The run loop ("processor"): snapshot, claim cycles until every target is satisfied, report.

The loop owns what lasts a whole run: the snapshot of hub and store, the claim cycles and their
backoff, the leases kept alive while Spark reads, the deadline, the replay of given ranges and
the final report. Each claim cycle's own steps (plan and record intents, fence, read+write,
checkpoint) are a :class:`~dagster_eventhub_ingest.ops.run.cycle.ClaimCycle`. The other parts
live beside them: pure planning in :mod:`.plan`, leases in :mod:`.lease`, the sink as checkpoint
of last resort in :mod:`.last_resort`, checkpoints ahead of the hub in :mod:`.ahead`, the
read+write step in :mod:`.ingestor`, live progress in :mod:`.progress`, the end state and
report in :mod:`.report`, the log in :mod:`.log`, the entry point in :mod:`.entry`.

The loop (docs/run.md has the exactly-once argument step by step):

1. Snapshot: per target partition ``end_p = min(last_enqueued, checkpoint_p + max_events)``.
2. Claim with the configured balancing strategy (CAS on the ownership blobs).
3. Record the intent ``[start_p, end_p]`` on the ownership blob (write-ahead, CAS), or take over
   the pending intent a crashed owner left, unchanged.
4. Read every claimed range as one Spark DataFrame and write it to the idempotent sink.
5. Checkpoint each partition to its range end (fenced by the ownership ETag), release, loop
   until every target's checkpoint reached its bound, whoever did the reading.

Steps 3-5 are the cycle's (:mod:`.cycle`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from dagster_eventhub_ingest.ops.lag import age_seconds
from dagster_eventhub_ingest.ops.run.ahead import CheckpointsAhead
from dagster_eventhub_ingest.ops.run.cancel import Cancellation
from dagster_eventhub_ingest.ops.run.cycle import ClaimCycle, RunState
from dagster_eventhub_ingest.ops.run.fault import fault_point
from dagster_eventhub_ingest.ops.run.hub import HubClient, PartitionInfo
from dagster_eventhub_ingest.ops.run.ingestor import Ingestor
from dagster_eventhub_ingest.ops.run.last_resort import LastResort
from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
from dagster_eventhub_ingest.ops.run.log import TeeLog
from dagster_eventhub_ingest.ops.run.plan import (
    PartitionTarget,
    check_intent_layout,
    cycle_size,
    replay_ranges,
    satisfied,
    sink_layout,
    snapshot_bound,
)
from dagster_eventhub_ingest.ops.run.progress import (
    PhaseClock,
    ProgressFeed,
    ProgressFn,
    RunProgress,
    progress_targets,
)
from dagster_eventhub_ingest.ops.run.report import PartitionReport, RunReport, record_end_state
from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Ownership, generation_of

__all__ = ["ClaimFn", "Processor"]

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
        self.hub_desc = store.hub.describe()
        # Checkpoints the hub cannot have produced, and the partitions still to be reset.
        self._ahead = CheckpointsAhead(
            config.on_checkpoint_ahead,
            store,
            hub,
            owner_id=owner_id,
            hub_desc=self.hub_desc,
            log=self.log,
        )
        self.cancel = cancel if cancel is not None else Cancellation()
        self.sleep: Callable[[float], object] = sleep if sleep is not None else self.cancel.wait
        self.monotonic = monotonic
        # The last checkpoint seen per partition, the hub's creation time, the cycle's size.
        self._state = RunState(cap=config.max_events_per_cycle)
        self._seen: dict[str, set[str]] = {}
        # Consecutive claim cycles that claimed every pending partition
        # (dagster_eventhub_ingest.ops.run.plan.cycle_size).
        self._cycles_alone = 0
        self._layout = sink_layout(config.sink.format, config.sink.partition_by)
        self.on_progress = on_progress
        self.progress_interval = progress_interval
        self.preflight = preflight
        self.clock = clock if clock is not None else PhaseClock()
        self.progress = RunProgress(owner_id, "starting", 0.0)
        self._feed = ProgressFeed(
            self.progress,
            ingestor,
            self.log,
            hub_desc=self.hub_desc,
            owner_id=owner_id,
            on_progress=on_progress,
            interval=progress_interval,
        )
        self._cycle = ClaimCycle(
            config,
            store,
            hub,
            ingestor,
            owner_id=owner_id,
            hub_desc=self.hub_desc,
            log=self.log,
            clock=self.clock,
            cancel=self.cancel,
            feed=self._feed,
            state=self._state,
            ahead=self._ahead,
            # What the sink already holds, looked at before a range is chosen.
            last_resort=LastResort(config, store, owner_id, self.hub_desc, self.log),
            layout=self._layout,
        )

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
            self._feed.emit("finished")
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
        self._state.hub_created = self.hub.hub_created_ms()
        # The store before the hub: the hub's numbers only grow, so a checkpoint or intent a
        # peer writes meanwhile can never look ahead of this snapshot.
        owns = self.store.list_ownership()
        cps = self.store.list_checkpoints(owns)
        infos = self.hub.partition_info(targets)
        self._ahead.find(targets, infos, cps, owns, self._state.hub_created)
        if any(owns[p].intent is not None for p in targets if p in owns):
            # A pending intent: the sink's layout on disk is checked before the intent's own.
            self._preflight()
        for pid in targets:
            own = owns.get(pid)
            if own is not None and pid not in self._ahead.pending:
                check_intent_layout(self.hub_desc, pid, own.intent, self._layout)
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
            self._state.last_cp[p] = cps[p].sequence_number if p in cps else None
            self._seen[p] = set()
            self.log.info(
                f"snapshot hub={self.hub_desc} partition={p} owner={self.owner_id} "
                f"checkpoint={self._state.last_cp[p]} last_enqueued="
                f"{infos[p].last_enqueued_sequence_number} bound={bounds[p].target}"
            )
        self.progress.partitions = progress_targets(
            {p: bounds[p].target for p in targets}, dict(self._state.last_cp)
        )
        self._feed.emit("snapshot")
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
                    self._state.cap = cycle_size(
                        self.config.max_events_per_cycle, self._cycles_alone, len(pending)
                    )
                    keeper.hold(claimed.values())
                    fault_point("after_claim")
                    self._cycle.run(keeper, claimed, bounds, infos, reports)
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
        self._feed.emit("finished")
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
                results = self._cycle.ingest(ranges, None, gens, infos) if ranges else {}
        except Exception as exc:
            if self.cancel.cancelled:
                raise self.cancel.error("while replaying") from exc
            raise
        for pid, result in results.items():
            reports[pid].add(result, self.owner_id)
            self.progress.partitions[pid].landed_events += result.events
            self.progress.partitions[pid].reading = None
            self.progress.partitions[pid].done = True
        self._feed.emit("finished")
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

    # -- bookkeeping ---------------------------------------------------------------------------
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
            previous = self._state.last_cp.get(pid)
            if current is not None and (previous is None or current > previous):
                for who in sorted(self._seen[pid]) or ["unknown"]:
                    if who not in reports[pid].read_by:
                        reports[pid].read_by.append(who)
                self._seen[pid].clear()
            self._state.last_cp[pid] = current

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
