"""One ingestion run ("processor"): snapshot, claim, intent, read, write, checkpoint, release.

PUBLIC API CONTRACT (shared by the CLI and the Dagster integration): :class:`IngestConfig`,
:class:`ReplaySpec`, :class:`PartitionReport`, :class:`RunReport` and :func:`run_ingestion`.

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
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, InstanceOf

from dagster_eventhub_ingest.ops.cancel import Cancellation
from dagster_eventhub_ingest.ops.fault import fault_point, fault_timer, pause_point
from dagster_eventhub_ingest.ops.hub import HubClient, PartitionInfo
from dagster_eventhub_ingest.ops.ingest import Ingestor
from dagster_eventhub_ingest.ops.lag import age_seconds, partition_lag
from dagster_eventhub_ingest.ops.last_resort import LastResort
from dagster_eventhub_ingest.ops.lease import LeaseKeeper
from dagster_eventhub_ingest.ops.plan import (
    Bound,
    Step,
    checkpoint_problem,
    cycle_size,
    next_step,
    replay_ranges,
    sink_layout,
    snapshot_bound,
)
from dagster_eventhub_ingest.ops.progress import (
    PhaseClock,
    ProgressFn,
    ReadCounter,
    ReadTicker,
    RunProgress,
    progress_targets,
)
from dagster_eventhub_ingest.ops.stats import PartitionWriteStats
from dagster_eventhub_ingest.resources.config import IngestSpec, OneLineErrors, RunOptions
from dagster_eventhub_ingest.resources.errors import (
    CheckpointAheadError,
    CheckpointRegressionError,
    ConfigurationError,
    DataLossError,
    OwnershipLostError,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Ownership, generation_of
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dagster_eventhub_ingest.ops.balancing.base import RunLog
    from dagster_eventhub_ingest.ops.balancing.liveness import OwnerInstance
    from dagster_eventhub_ingest.ops.ingest import SparkIngestor

__all__ = [
    "IngestConfig",
    "PartitionReport",
    "Processor",
    "ReplaySpec",
    "RunReport",
    "run_ingestion",
]

logger = logging.getLogger(__name__)

#: Claims the given unsatisfied partitions for this owner; returns the leases it now holds.
ClaimFn = Callable[[Sequence[str]], Mapping[str, Ownership]]


class IngestConfig(OneLineErrors, RunOptions):
    """Everything one run needs: the three places plus
    :class:`~dagster_eventhub_ingest.resources.config.RunOptions`.

    The run options (strategy, bounds, timeouts, ...) are declared, described and validated
    once, in ``dagster_eventhub_ingest.resources.config.RunOptions``; this adds the resolved
    settings and two internal knobs. The CLI builds it from YAML (:meth:`from_spec`), Dagster from
    its resources, tests and benchmarks directly::

        IngestConfig(eventhub=hub, store=store, sink=sink, strategy="greedy")

    Bad values raise :class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` naming
    the key.

    Attributes:
        poll_initial_seconds / poll_max_seconds: backoff while live peers hold partitions.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    eventhub: InstanceOf[EventHubSettings]
    store: InstanceOf[StoreSettings]
    sink: InstanceOf[SinkSettings]
    poll_initial_seconds: float = 0.2
    poll_max_seconds: float = 5.0

    @classmethod
    def from_spec(
        cls,
        spec: IngestSpec,
        env: Mapping[str, str] | None = None,
        *,
        connection_strings: Mapping[str, str] | None = None,
        **internals: Any,
    ) -> IngestConfig:
        """The config for a loaded :class:`~dagster_eventhub_ingest.resources.config.IngestSpec`
        (the CLI's file, Airflow's connections).

        Reads the credentials' environment variables now (``env``: default ``os.environ``);
        ``connection_strings`` (``"eventhub"`` / ``"store"``) are given ones instead.
        """
        given = connection_strings or {}
        return cls(
            eventhub=spec.eventhub.settings(env, connection_string=given.get("eventhub")),
            store=spec.store.settings(env, connection_string=given.get("store")),
            sink=spec.sink.settings(),
            **spec.run_options().model_dump(),
            **internals,
        )


@dataclass(frozen=True)
class ReplaySpec:
    """Re-read a range into the sink without touching the live checkpoint.

    Either ``ranges`` (partition id -> inclusive ``(start_seq, end_seq)``) or a
    ``starting_position`` / ``ending_position`` (a sequence number, ``earliest``, ``latest`` or
    ``checkpoint``; defaults ``earliest`` .. ``latest``) applied to every target partition.
    """

    ranges: dict[str, SeqRange] | None = None
    starting_position: str | None = None
    ending_position: str | None = None


@dataclass
class PartitionReport:
    """What one run knows about one target partition when it ends (for logs and metadata).

    ``events``/``bytes``/sequence and enqueued-time ranges count what THIS run wrote;
    ``checkpoint_sequence_number`` and the lag are the partition's state at the end, whoever
    read it. ``read_by`` names the owners seen moving the checkpoint during the run
    (``"unknown"`` when a peer did it between two looks). ``skipped_ranges`` are inclusive
    ranges lost to retention and passed over (``on_data_loss: skip``). ``checkpoint_reset``
    says why and from where this run reset the checkpoint (``on_checkpoint_ahead``), or moved
    it past what the sink already held (a checkpoint lost or older than the sink).
    ``replayed_intents`` are pending ranges another owner recorded and this run replayed:
    ``(start, end, owner)``.
    """

    partition_id: str
    events: int = 0
    bytes: int = 0
    first_sequence_number: int | None = None
    last_sequence_number: int | None = None
    first_enqueued_time: datetime | None = None
    last_enqueued_time: datetime | None = None
    checkpoint_sequence_number: int | None = None
    snapshot_end_sequence_number: int | None = None
    lag_events: int | None = None
    lag_seconds: float | None = None
    read_by: list[str] = field(default_factory=list)
    skipped_ranges: list[SeqRange] = field(default_factory=list)
    checkpoint_reset: str | None = None
    up_to_date: bool = False
    last_enqueued_sequence_number: int | None = None
    ranges_written: list[SeqRange] = field(default_factory=list)
    replayed_intents: list[tuple[int, int, str]] = field(default_factory=list)
    #: Events landed in the sink for the partition in all (the checkpoint's ``landed``); None
    #: when unknown.
    landed_total: int | None = None

    def add(self, result: PartitionWriteStats, owner_id: str) -> None:
        """Fold one written range into the report."""
        self.events += result.events
        self.bytes += result.bytes
        self.ranges_written.append(SeqRange(result.start, result.end))
        if result.first_sequence_number is not None and (
            self.first_sequence_number is None
            or result.first_sequence_number < self.first_sequence_number
        ):
            self.first_sequence_number = result.first_sequence_number
        if result.last_sequence_number is not None and (
            self.last_sequence_number is None
            or result.last_sequence_number > self.last_sequence_number
        ):
            self.last_sequence_number = result.last_sequence_number
        if result.first_enqueued_time is not None and (
            self.first_enqueued_time is None
            or result.first_enqueued_time < self.first_enqueued_time
        ):
            self.first_enqueued_time = result.first_enqueued_time
        if result.last_enqueued_time is not None and (
            self.last_enqueued_time is None or result.last_enqueued_time > self.last_enqueued_time
        ):
            self.last_enqueued_time = result.last_enqueued_time
        if owner_id not in self.read_by:
            self.read_by.append(owner_id)


@dataclass
class RunReport:
    """The outcome of ``run_ingestion``; ``complete`` iff every target reached its bound.

    In replay mode ``complete`` means every requested range was written; checkpoints untouched.
    """

    owner_id: str
    partitions: dict[str, PartitionReport]
    complete: bool
    output_location: str | None = None
    hub: str = ""
    consumer_group: str = ""
    replay: bool = False
    cycles: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: Wall and driver-CPU seconds per phase (``dagster_eventhub_ingest.ops.progress.PHASES``):
    #: where the run's time went, e.g. ``{"spark_start": {"seconds": 4.1, "cpu_seconds": 0.2},
    #: ...}``.
    phases: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """Events this run wrote, over all partitions."""
        return sum(p.events for p in self.partitions.values())

    @property
    def bytes(self) -> int:
        """Body bytes this run wrote, over all partitions."""
        return sum(p.bytes for p in self.partitions.values())

    @property
    def incomplete_partitions(self) -> list[str]:
        """Target partitions that did not reach their bound."""
        return [p for p, r in self.partitions.items() if not r.up_to_date]


def _effective(*cps: Checkpoint | None) -> Checkpoint | None:
    best: Checkpoint | None = None
    for cp in cps:
        if cp is not None and (best is None or cp.sequence_number > best.sequence_number):
            best = cp
    return best


def _satisfied(bound: Bound, cp: Checkpoint | None) -> bool:
    target = bound.target
    return target is None or (cp is not None and cp.sequence_number >= target)


class _Log:
    """Log lines to the module logger and, when given, to Dagster's ``context.log`` too."""

    def __init__(self, extra: Any) -> None:
        self.extra = extra

    def info(self, msg: str) -> None:
        logger.info(msg)
        if self.extra is not None:
            self.extra.info(msg)

    def warning(self, msg: str) -> None:
        logger.warning(msg)
        self.extra_warning(msg)

    def extra_warning(self, msg: str) -> None:
        """Only to ``context.log`` (for lines another module already logged itself)."""
        if self.extra is not None:
            self.extra.warning(msg)

    def extra_only(self) -> _ExtraLog | None:
        """A log for modules that log their lines themselves
        (``dagster_eventhub_ingest.ops.balancing``): only ``context.log`` gets them from it. None
        without one."""
        return None if self.extra is None else _ExtraLog(self.extra)


class _ExtraLog:
    """Dagster's ``context.log`` alone, as a
    :class:`dagster_eventhub_ingest.ops.balancing.base.RunLog`."""

    def __init__(self, extra: Any) -> None:
        self.extra = extra

    def info(self, msg: str) -> None:
        self.extra.info(msg)

    def warning(self, msg: str) -> None:
        self.extra.warning(msg)


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
        :class:`dagster_eventhub_ingest.ops.progress.RunProgress` at the snapshot, every
            ``progress_interval`` seconds while Spark reads (also logged), and after each
            checkpoint.
        progress_interval: seconds between progress updates during a read (0: none).
        preflight: called once before the first claim, only when there is something to do
            (the sink layout check: a run with nothing to read does not look at the sink).
        clock: where the phases' times go (``RunReport.phases``); a new one by default.
        cancel: a request to stop (:mod:`dagster_eventhub_ingest.ops.cancel`): the run checks it
            before each claim and each read, and waits on it instead of sleeping; a stopped run
            raises ``RunCancelledError`` after releasing its leases (intents kept).
        sleep / monotonic: injectable for tests (``sleep`` default: a wait that a cancellation
            ends).
    """

    def __init__(
        self,
        config: IngestConfig,
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
        self.log = _Log(log)
        self.cancel = cancel if cancel is not None else Cancellation()
        self.sleep: Callable[[float], object] = sleep if sleep is not None else self.cancel.wait
        self.monotonic = monotonic
        self.hub_desc = store.hub.describe()
        self._last_cp: dict[str, int | None] = {}
        self._seen: dict[str, set[str]] = {}
        # Partitions whose checkpoint the hub cannot have produced, still to be reset.
        self._resets: dict[str, str] = {}
        self._hub_created: int | None = None
        # Consecutive claim cycles that claimed every pending partition, and the events per
        # partition the current cycle reads (dagster_eventhub_ingest.ops.plan.cycle_size).
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
        if not self._resets and all(_satisfied(bounds[p], cps.get(p)) for p in targets):
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
        start_early = getattr(self.ingestor, "start_early", None)
        if start_early is not None:
            # Something to read: the session starts while the run checks the sink and claims
            # (the join grace is a second of waiting); the first cycle waits for it before
            # recording intents. Started before the sink's check, whose first look imports
            # pyarrow (0.2-0.25 s of the driver's CPU): nothing is claimed before it passed.
            start_early()
        self._preflight()
        return self._loop(targets, bounds, infos, reports, started)

    def _snapshot(
        self, partition_ids: Sequence[str] | None
    ) -> tuple[
        list[str],
        dict[str, Bound],
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
        self._check_ahead(targets, infos, cps, owns)
        if any(owns[p].intent is not None for p in targets if p in owns):
            # A pending intent: the sink's layout on disk is checked before the intent's own.
            self._preflight()
        for pid in targets:
            own = owns.get(pid)
            if own is not None and pid not in self._resets:
                self._check_intent_layout(pid, own)
        bounds = {
            p: snapshot_bound(
                infos[p],
                None if p in self._resets else cps.get(p),
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
        bounds: dict[str, Bound],
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
                            if p in self._resets or not _satisfied(bounds[p], cps.get(p))
                        ]
                        for p in targets:
                            self.progress.partitions[p].done = p not in pending
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

    def replay(self, spec: ReplaySpec, partition_ids: Sequence[str] | None = None) -> RunReport:
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
        bounds: dict[str, Bound],
        infos: dict[str, PartitionInfo],
        reports: dict[str, PartitionReport],
    ) -> None:
        prepare = getattr(self.ingestor, "prepare", None)
        if prepare is not None:
            # The session (started early, or now) is up before the intents: while it starts
            # (seconds), a run that joined meanwhile can still take its share of leases not
            # yet started (dagster_eventhub_ingest.ops.balancing: unstarted surplus is stealable),
            # so runs a few seconds apart split even a small backlog. What is left of the start is
            # timed as spark_start.
            with self.clock.active():
                prepare()
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
        self._emit("checkpointed")

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
        bounds: dict[str, Bound],
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
                if pid in self._resets:
                    own, sdk_cp = self._reset(keeper, pid, own, sdk_cp, infos, reports)
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

    def _check_ahead(
        self,
        targets: Sequence[str],
        infos: Mapping[str, PartitionInfo],
        cps: Mapping[str, Checkpoint],
        owns: Mapping[str, Ownership],
    ) -> None:
        """Find checkpoints the hub cannot have produced; fail, or mark them for a reset."""
        problems: dict[str, str] = {}
        for pid in targets:
            own = owns.get(pid)
            why = checkpoint_problem(
                infos[pid], cps.get(pid), own.intent if own else None, self._hub_created
            )
            if why is not None:
                problems[pid] = why
        if not problems:
            return
        if self.config.on_checkpoint_ahead != "reset_to_earliest":
            detail = "; ".join(
                f"partition {pid}: {why}, earliest retained event "
                f"{infos[pid].begin_sequence_number}"
                for pid, why in problems.items()
            )
            flags = " ".join(f"--partition {pid}" for pid in problems)
            raise CheckpointAheadError(
                f"hub={self.hub_desc}: checkpoint ahead of the hub, {detail}. Reading on would "
                "skip every new event up to the checkpoint, so nothing was claimed or read. To "
                "restart from the earliest retained event, run once with on_checkpoint_ahead: "
                f"reset_to_earliest (`ehingest run --config FILE {flags} --on-checkpoint-ahead "
                "reset_to_earliest`, or that key in the Dagster run config); it is recorded in "
                "the run report and the checkpoint's ehireset metadata. If the checkpoint was "
                "edited by mistake, restore it instead."
            )
        for pid, why in problems.items():
            self.log.warning(
                f"checkpoint ahead hub={self.hub_desc} partition={pid} owner={self.owner_id}: "
                f"{why}; resetting to the earliest retained event "
                f"{infos[pid].begin_sequence_number} (on_checkpoint_ahead=reset_to_earliest)"
            )
        self._resets.update(problems)

    def _reset(
        self,
        keeper: LeaseKeeper,
        pid: str,
        own: Ownership,
        sdk_cp: Checkpoint | None,
        infos: dict[str, PartitionInfo],
        reports: dict[str, PartitionReport],
    ) -> tuple[Ownership, Checkpoint | None]:
        """Under the lease: look again, and reset the checkpoint if it is still impossible.

        Returns the lease and the SDK checkpoint as they are now.
        """
        cp = _effective(sdk_cp, own.progress)
        infos.update(self.hub.partition_info([pid]))
        info = infos[pid]
        why = checkpoint_problem(info, cp, own.intent, self._hub_created)
        del self._resets[pid]
        if why is None:
            return own, sdk_cp  # a peer reset it meanwhile
        target = info.begin_sequence_number - 1
        # Sequence numbers restarted, so batch keys would repeat the old hub's and replace its
        # batches in the sink: unless the checkpoint is known to be this very hub's, the new
        # hub's batches get its creation time as their generation
        # (dagster_eventhub_ingest.ops.stats.batch_key).
        generation = None
        if self._hub_created is not None and (cp is None or cp.hub_created_ms != self._hub_created):
            generation = self._hub_created
        note = (
            f"reset from {cp.sequence_number if cp else None} to {target} at "
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} by {self.owner_id}: {why}"
        )
        updated = keeper.apply(
            pid,
            lambda o: self.store.reset_checkpoint(
                o, target, "-1", note, hub_created_ms=self._hub_created, generation=generation
            ),
        )
        reports[pid].checkpoint_reset = note
        self._last_cp[pid] = target
        self.log.warning(f"checkpoint reset hub={self.hub_desc} partition={pid}: {note}")
        return updated, Checkpoint(
            pid, target, "-1", hub_created_ms=self._hub_created, generation=generation
        )

    def _plan_partition(
        self,
        keeper: LeaseKeeper,
        pid: str,
        own: Ownership,
        sdk_cp: Checkpoint | None,
        bounds: dict[str, Bound],
        infos: Mapping[str, PartitionInfo],
        generation: int | None,
        report: PartitionReport,
    ) -> tuple[Step, int | None]:
        """The partition's step this cycle (its intent recorded), and the hub generation its
        batch key names. ``bounds[pid]`` moves with a checkpoint moved past the sink."""
        bound = bounds[pid]
        begin = infos[pid].begin_sequence_number
        cp = _effective(sdk_cp, own.progress)
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
            written = getattr(self.ingestor, "batch_written", None)
            gen = own.intent.generation
            if (
                step.skipped is not None
                and written is not None
                and (
                    written(pid, step.start, step.end)
                    if gen is None
                    else written(pid, step.start, step.end, gen)
                )
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
        bound: Bound,
        note: str | None,
        bounds: dict[str, Bound],
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

    # -- bookkeeping ---------------------------------------------------------------------------
    def _emit(self, phase: str, *, log: bool = False) -> None:
        """Send the current progress to ``on_progress`` (and the log during long reads)."""
        self.progress.phase = phase
        self.progress.elapsed_seconds = time.monotonic() - self._started
        counts = getattr(self.ingestor, "task_counts", None)
        self.progress.spark_tasks = counts() if phase == "reading" and counts else None
        read = getattr(self.ingestor, "read_counts", None)
        if phase == "reading" and read is not None:
            # Live counts the readers wrote to the store; never more than the range in flight.
            for pid, n in read().items():
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
        bounds: Mapping[str, Bound],
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
        wanted: dict[str, int] = {}
        for pid in targets:
            r, info, cp = reports[pid], infos[pid], cps.get(pid)
            r.checkpoint_sequence_number = cp.sequence_number if cp else None
            r.landed_total = cp.landed if cp else None
            r.last_enqueued_sequence_number = info.last_enqueued_sequence_number
            lag = partition_lag(
                info.begin_sequence_number,
                info.last_enqueued_sequence_number,
                cp.sequence_number if cp else None,
            )
            r.lag_events = lag.events
            if lag.oldest_unprocessed is None:
                r.lag_seconds = 0.0
            elif self.config.report_lag_seconds:
                since = _oldest_unprocessed_bound(r, info, cp)
                if since is not None:
                    r.lag_seconds = age_seconds(now, since)
                else:
                    wanted[pid] = lag.oldest_unprocessed
            if not replay:
                bound = bounds[pid]
                r.up_to_date = _satisfied(bound, cp) and pid not in self._resets
                if (
                    bound.gap is not None
                    and not r.skipped_ranges
                    and cp is not None
                    and cp.sequence_number >= bound.gap.end
                ):
                    r.skipped_ranges.append(bound.gap)  # a peer passed over it
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


def _oldest_unprocessed_bound(
    report: PartitionReport, info: PartitionInfo, cp: Checkpoint | None
) -> datetime | None:
    """When the oldest unprocessed event was enqueued (or a time no later), without a receive.

    One event behind: it is the last enqueued event, whose time the partition properties give
    (exact). Otherwise, when this run wrote the checkpointed event, the next one was enqueued
    at or after it: its time bounds the age from above (tight on a busy partition). None when
    neither applies (the caller then receives that event).
    """
    if report.lag_events == 1 and info.last_enqueued_time is not None:
        return info.last_enqueued_time
    if (
        cp is not None
        and report.last_sequence_number == cp.sequence_number
        and report.last_enqueued_time is not None
    ):
        return report.last_enqueued_time
    return None


def _default_claim(
    config: IngestConfig,
    store: PartitionStore,
    owner_id: str,
    is_owner_dead: Callable[[str], bool] | None,
    joined_at: list[float] | None = None,
    expected_peers: Callable[[], Collection[str]] | None = None,
    run_log: RunLog | None = None,
    cancel: Cancellation | None = None,
) -> ClaimFn:
    """The claim cycle of ``dagster_eventhub_ingest.ops.balancing`` with this run's strategy and
    expiry.

    ``joined_at``: holds when (``time.monotonic``) the run wrote its heartbeat, once it has;
    the first claim then waits only what is left of ``join_grace_seconds``, so the hub
    snapshot taken meanwhile is not added to the grace. ``run_log``: where takeovers and
    dropped claims also go (the run's event log). ``cancel``: ends the grace's wait early, and
    then nothing is claimed.
    """
    from dagster_eventhub_ingest.ops.balancing import claim_cycle, get_strategy

    # Raises ConfigurationError naming the valid strategies.
    strategy = get_strategy(config.strategy, **dict(config.strategy_options))
    expiry = timedelta(seconds=config.lease_expiry_seconds)
    first = [True]

    def claim(targets: Sequence[str]) -> Mapping[str, Ownership]:
        if first[0] and joined_at:
            left = config.join_grace_seconds - (time.monotonic() - joined_at[0])
            if left > 0:
                if cancel is None:
                    time.sleep(left)
                else:
                    cancel.wait(left)
        first[0] = False
        if cancel is not None:
            cancel.check("before claiming")
        return claim_cycle(
            store,
            owner_id,
            strategy,
            targets=list(targets),
            expiry=expiry,
            is_owner_dead=is_owner_dead,
            join_grace=config.join_grace_seconds,
            expected_peers=expected_peers,
            run_log=run_log,
        )

    return claim


def run_ingestion(
    config: IngestConfig,
    spark: SparkSession | None,
    *,
    owner_id: str,
    partition_ids: Sequence[str] | None = None,
    replay: ReplaySpec | None = None,
    is_owner_dead: Callable[[str], bool] | None = None,
    log: Any = None,
    spark_factory: Callable[[], SparkSession] | None = None,
    on_progress: ProgressFn | None = None,
    progress_interval: float = 10.0,
    attempt: int | None = None,
    phases: PhaseClock | None = None,
    expected_peers: Callable[[], Collection[str]] | None = None,
    cancel: Cancellation | None = None,
) -> RunReport:
    """Bring ``partition_ids`` (default: all) up to their snapshot bound, exactly once.

    Args:
        config: hub, store, sink and run settings.
        spark: the session to read and write with; None starts a local one only if there is
            something to read.
        owner_id: this run's owner id (the Dagster run id; a host/pid for the CLI).
        partition_ids: target partitions (default: every partition of the hub).
        replay: re-write a range into the sink without moving checkpoints.
        is_owner_dead: tells whether another owner id is known dead (e.g. its Dagster run
            failed), so its partitions are taken over without waiting for lease expiry.
        log: Dagster's ``context.log`` (progress lines also go to this module's logger).
        spark_factory: starts a session when ``spark`` is None and there is something to read
            (default: ``dagster_eventhub_ingest.resources.spark.session.local_spark_session``).
        on_progress / progress_interval: live progress
        (:mod:`dagster_eventhub_ingest.ops.progress`); during a read
            it is also written to ``log`` every ``progress_interval`` seconds.
        attempt: the orchestrator's attempt number when retries keep the owner id and start
            only after the previous attempt ended (Dagster step retries): a lower attempt with
            the same owner id is then taken over at once.
        phases: the clock the run's phases are timed on (the CLI passes one holding its
            start-up); the report's ``phases`` has them.
        expected_peers: owner ids an orchestrator knows are starting over the same
            partitions (Dagster: runs launched, not yet heartbeating); they count as peers
            when this run claims, so it leaves them their share
            (dagster_eventhub_ingest.ops.balancing.cycle).
        cancel: a request to stop (:class:`dagster_eventhub_ingest.ops.cancel.Cancellation`;
            the CLI's signal handlers and Airflow's ``on_kill`` make one). The run works on a
            thread of its own and waits for it here, so an exception the host raises in this
            thread (Dagster's Terminate: ``DagsterExecutionInterruptedError``; a
            ``KeyboardInterrupt``) stops it the same way and is raised again once it wound
            down. Stopped, the run reads nothing further (its Spark jobs are interrupted),
            releases its leases with their pending intents, and raises ``RunCancelledError``.
            The session it was given (or the caller's factory started) is the caller's to stop
            (``dagster_eventhub_ingest.resources.spark.owned.OwnedSession``).

    Returns:
        The run report; ``complete`` is True iff every target reached its bound.

    Raises:
        DataLossError: a checkpoint is older than retention (``on_data_loss: fail``).
        RangeError: an unknown partition id or an impossible replay range.
        ConfigurationError: bad settings, a hub or consumer group that does not exist.
        DuplicateOwnerError: another live process runs with this owner id (nothing read).
        CheckpointAheadError: a checkpoint the hub cannot have produced (re-created hub).
        EventHubUnavailableError / StoreUnavailableError: a service is unreachable.
        SinkError: the sink cannot be written.
        RunCancelledError: the run was asked to stop (``cancel``), and stopped cleanly.
    """
    stop = cancel if cancel is not None else Cancellation()
    return stop.run(
        lambda: _run(
            config,
            spark,
            owner_id=owner_id,
            partition_ids=partition_ids,
            replay=replay,
            is_owner_dead=is_owner_dead,
            log=log,
            spark_factory=spark_factory,
            on_progress=on_progress,
            progress_interval=progress_interval,
            attempt=attempt,
            phases=phases,
            expected_peers=expected_peers,
            cancel=stop,
        )
    )


def _run(
    config: IngestConfig,
    spark: SparkSession | None,
    *,
    owner_id: str,
    partition_ids: Sequence[str] | None,
    replay: ReplaySpec | None,
    is_owner_dead: Callable[[str], bool] | None,
    log: Any,
    spark_factory: Callable[[], SparkSession] | None,
    on_progress: ProgressFn | None,
    progress_interval: float,
    attempt: int | None,
    phases: PhaseClock | None,
    expected_peers: Callable[[], Collection[str]] | None,
    cancel: Cancellation,
) -> RunReport:
    """:func:`run_ingestion`'s work, on the run's own thread."""
    if spark is not None:
        # A classic session is active per thread; Spark finds Python data sources (the Delta
        # writer) through the calling thread's active session.
        from dagster_eventhub_ingest.resources.spark.session import make_active

        make_active(spark)
    clock = phases if phases is not None else PhaseClock()
    with clock.phase("management"):
        hub, store, ingestor, me = _run_parts(config, spark, spark_factory, attempt, owner_id)
    cancel.on_cancel(ingestor.interrupt)

    def preflight() -> None:
        from dagster_eventhub_ingest.ops.sink_checks import check_sink_layout
        from dagster_eventhub_ingest.ops.sink_source import check_sink_source

        check_sink_layout(config.sink)  # a changed partition_by would land replays twice
        # Another source's sink, or one shared without saying so: refused before any claim.
        check_sink_source(config.sink, store.hub, lambda: ingestor.spark)

    common: dict[str, Any] = {
        "owner_id": owner_id,
        "log": log,
        "on_progress": on_progress,
        "progress_interval": progress_interval,
        "preflight": preflight,
        "clock": clock,
        "cancel": cancel,
    }
    if replay is not None:
        processor = Processor(config, store, hub, ingestor, claim=lambda targets: {}, **common)
        report = processor.replay(replay, partition_ids)
        report.phases = clock.as_dict()
        return report
    from dagster_eventhub_ingest.ops.balancing import delete_heartbeat
    from dagster_eventhub_ingest.ops.balancing.liveness import (
        Heartbeat,
        take_owner_id,
        write_heartbeat,
    )

    joined_at: list[float] = []
    # Takeovers, dropped claims and owner-id takeovers reach the run's event log too.
    run_log = _Log(log).extra_only()
    claim = _default_claim(
        config, store, owner_id, is_owner_dead, joined_at, expected_peers, run_log, cancel
    )
    beat: list[Heartbeat] = []

    def heartbeat() -> None:
        # Every renewal tick: a live process is never silent for the expiry, so another one
        # started with its owner id sees it write and is refused (take_owner_id).
        beat[:] = [write_heartbeat(store, owner_id, beat[0] if beat else None)]

    processor = Processor(config, store, hub, ingestor, claim=claim, heartbeat=heartbeat, **common)
    pause_point("before_join")
    me.start()
    try:
        # One live process per owner id, before anything is claimed or read; this heartbeat
        # also announces the owner, so the join grace runs while the hub is snapshotted.
        with clock.phase("management"):
            beat.append(
                take_owner_id(
                    store,
                    owner_id,
                    me,
                    expiry=timedelta(seconds=config.lease_expiry_seconds),
                    run_log=run_log,
                )
            )
    except BaseException:
        me.stop()
        raise
    joined_at.append(time.monotonic())
    try:
        report = processor.run(partition_ids)
    finally:
        me.stop()
        # Graceful leave: peers stop counting this owner at once (leases were released).
        try:
            with clock.phase("checkpoint"):
                delete_heartbeat(store, owner_id)
        except Exception:  # a leftover heartbeat only ages out
            logger.warning(
                "could not delete heartbeat owner=%s (it ages out)",
                owner_id,
                exc_info=logger.isEnabledFor(logging.INFO),
            )
    report.phases = clock.as_dict()
    logger.info("run phases owner=%s: %s", owner_id, clock.line())
    return report


def _import_store_client() -> None:
    try:
        import dagster_eventhub_ingest.resources.store.azure_blob  # noqa: F401
    except Exception:  # imported again (and failing visibly) where it is used
        logger.debug(
            "pre-import of dagster_eventhub_ingest.resources.store.azure_blob failed", exc_info=True
        )


def _run_parts(
    config: IngestConfig,
    spark: SparkSession | None,
    spark_factory: Callable[[], SparkSession] | None,
    attempt: int | None,
    owner_id: str,
) -> tuple[HubClient, PartitionStore, SparkIngestor, OwnerInstance]:
    """The hub client, store, ingestor and owner instance of a run, after the checks that need
    no claim.

    Before anything is claimed: a local sink path that a cluster's executors cannot share, a
    hub or consumer group that does not exist (a ConfigurationError within seconds, before this
    owner writes anything to the store), a sink format the session does not have.
    """
    from dagster_eventhub_ingest.ops.balancing.liveness import OwnerInstance
    from dagster_eventhub_ingest.ops.ingest import SparkIngestor
    from dagster_eventhub_ingest.ops.write import check_sink_format
    from dagster_eventhub_ingest.resources.hub_client import EventHubClient

    if spark is not None:
        from dagster_eventhub_ingest.ops.write import check_sink_for_session

        check_sink_for_session(config.sink, spark)
    # The storage SDK's import (~0.3 s of CPU) overlaps the hub's first management call,
    # which mostly waits on the network; nothing is written to the store before it answered.
    importer = threading.Thread(target=_import_store_client, name="import-store", daemon=True)
    importer.start()
    hub = EventHubClient(config.eventhub)
    try:
        hub.partition_ids()
        hub.check_consumer_group()
    finally:
        importer.join()
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend

    me = OwnerInstance.current(attempt)
    store = PartitionStore(
        AzureBlobBackend.from_settings(config.store),
        config.eventhub.hub_ref(),
        instance=me.token(),
        lease_expiry=timedelta(seconds=config.lease_expiry_seconds),
    )
    ingestor = SparkIngestor(
        spark,
        config.eventhub,
        config.sink,
        receive_timeout_seconds=config.receive_timeout_seconds,
        prefetch=config.prefetch,
        max_readers_per_partition=config.max_readers_per_partition,
        spark_factory=spark_factory,
        read_counter=(
            ReadCounter(
                config.store, store.backend, store.hub, owner_id, config.read_progress_seconds
            )
            if config.read_progress_seconds > 0
            else None
        ),
    )
    # A data source Spark does not have would fail at the first write, after the claims: ask
    # the session now (it starts here only for a format that needs the question).
    check_sink_format(config.sink, lambda: ingestor.spark)
    return hub, store, ingestor, me
