"""The Event Hub ingestion asset: one Dagster partition per Event Hub partition.

A run for partition keys S calls :func:`dagster_eventhub_ingest.ops.run.entry.run_ingestion` with
owner id = run id and ``partition_ids=S``. The run joins the other live runs (peers) in the
partition store, claims a balanced share, and loops until every key in S is up to date, whoever did
the reading. Only then does it log ``AssetMaterialization`` events
(:mod:`dagster_eventhub_ingest.dagster_project.metadata`): one per batch it landed, with Dagster's
standard keys, events, bytes, sequence and enqueued-time ranges and lag; and, when a user asked for
S (a backfill, the launchpad, the CLI), one for every other key of S too, so a successful run has
materialized every requested partition. Scheduled runs report only their batches. A failed run
materializes only the keys that really are up to date.

Transient errors (``retryable``) are retried by the asset's ``RetryPolicy``; the others fail
the run at once with ``dg.Failure(allow_retries=False)`` and the message on top. So does a stop
(Dagster's Terminate): a terminated run ends ``CANCELED``, never retried, under any executor.

Leases held by a run that Dagster knows to be failed or canceled are taken over at once
(``is_owner_dead`` asks the instance), without waiting for the lease to expire.
"""

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import dagster as dg
from pydantic import Field

from dagster_eventhub_ingest.dagster_project.checks import (
    LAG_CHECK_NAME,
    LAST_UPDATED_KEY,
    LastBatch,
    lag_evaluation,
    measure,
)
from dagster_eventhub_ingest.dagster_project.metadata import (
    definition_metadata,
    materialization_plan,
    partition_metadata,
)
from dagster_eventhub_ingest.dagster_project.resources import (
    LocalPySparkResource,
    session_or_factory,
)
from dagster_eventhub_ingest.ops.run.cancel import Cancellation
from dagster_eventhub_ingest.ops.run.report import RunReport
from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings
from dagster_eventhub_ingest.resources.config import (
    IngestAssetConfig,
    IngestConfig,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, EventHubIngestError
from dagster_eventhub_ingest.resources.ranges import SeqRange

__all__ = [
    "ReplayConfig",
    "ResourceKeys",
    "build_eventhub_ingest_asset",
    "build_partitions_def",
    "dagster_run_is_dead",
    "default_retry_policy",
]

T = TypeVar("T")

#: Tag the schedule puts on its runs (``i/K``); runs without it were asked for by a user.
RUNNER_TAG = "ehingest/runner"


def default_retry_policy() -> dg.RetryPolicy:
    """Retry transient failures (a service unreachable, a lease race) 3 times: ~15 s, 30 s, 60 s.

    Errors whose ``retryable`` flag is False (configuration, data loss, a corrupt blob) are
    raised as ``dg.Failure(allow_retries=False)``: the run fails at once with the message.
    """
    return dg.RetryPolicy(
        max_retries=3, delay=15, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
    )


def stopped_is_final(events: Iterator[T]) -> Iterator[T]:
    """``events``, with Dagster's interrupt (Terminate, SIGINT) raised as a step failure that is
    never retried.

    Under a ``RetryPolicy`` Dagster turns an interrupt into a step retry
    (``op_execution_error_boundary``). Under the multiprocess executor the run worker does not
    start it; in the run worker's own process (``in_process_executor``) it would run while the
    run is being terminated. A step failure with ``allow_retries=False`` ends the run
    ``CANCELED`` after Terminate under either executor (``FAILURE`` when nobody asked Dagster to
    stop it). The run has wound down before (ops/run/cancel.py).
    """
    try:
        yield from events
    except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt) as exc:
        raise _final_failure(
            exc,
            f"the run was interrupted ({type(exc).__name__}) and is not retried: its leases are "
            "released with their pending intents, and the next run takes over at once and "
            "replays them",
        ) from exc


def _final_failure(exc: BaseException, description: str) -> dg.Failure:
    """The step failure for ``exc`` that no ``RetryPolicy`` retries, with ``description`` on top
    and the error's class in its metadata."""
    return dg.Failure(
        description=description,
        metadata={"retryable": False, "error": type(exc).__name__},
        allow_retries=False,
    )


@dataclass(frozen=True)
class ResourceKeys:
    """Resource keys the asset uses; distinct per asset when several hubs share one project."""

    eventhub: str = "eventhub"
    partition_store: str = "partition_store"
    sink: str = "sink"
    pyspark: str = "pyspark"

    @classmethod
    def prefixed(cls, prefix: str) -> "ResourceKeys":
        """Keys named ``{prefix}_eventhub`` etc. (used by the Component, one set per instance)."""
        return cls(
            eventhub=f"{prefix}_eventhub",
            partition_store=f"{prefix}_partition_store",
            sink=f"{prefix}_sink",
            pyspark=f"{prefix}_pyspark",
        )

    def all(self) -> set[str]:
        """Every key, for ``required_resource_keys``."""
        return {self.eventhub, self.partition_store, self.sink, self.pyspark}


class ReplayConfig(dg.Config):
    """One run's config (the launchpad's, a backfill's): a replay, and this run's event cap.

    Empty for normal catch-up runs. A replay re-reads a range into the sink and never moves the
    live checkpoint; :meth:`replay_settings` turns it into the run's :class:`ReplaySettings`.
    """

    replay_ranges: dict[str, list[int]] = Field(
        default_factory=dict,
        description=(
            "Replay: partition id -> [first, last] sequence numbers (inclusive) to re-read into "
            "the sink, e.g. {'0': [100, 200]}. Each partition must be one of the run's keys."
        ),
    )
    replay_from: str | None = Field(
        default=None,
        description=(
            "Replay every target partition from this position: a sequence number, 'earliest', "
            "or 'latest'. The live checkpoint is not moved."
        ),
    )
    replay_to: str | None = Field(
        default=None,
        description="End of a replay_from replay (inclusive sequence number or 'latest').",
    )
    max_events_per_partition: int | None = Field(
        default=None,
        description="This run only: "
        + str(IngestConfig.model_fields["max_events_per_partition"].description)
        + " Unset keeps the asset's.",
    )

    def replay_settings(self, partition_keys: Sequence[str]) -> ReplaySettings | None:
        """The replay this config asks for, or None; bad input raises a clear error."""
        if self.replay_ranges and (self.replay_from or self.replay_to):
            raise ConfigurationError(
                "replay: give either replay_ranges or replay_from/replay_to, not both"
            )
        if self.replay_to and not self.replay_from:
            raise ConfigurationError("replay_to: needs replay_from (where the replay starts)")
        if self.replay_ranges:
            ranges: dict[str, SeqRange] = {}
            for pid, bounds in self.replay_ranges.items():
                if pid not in partition_keys:
                    raise ConfigurationError(
                        f"replay_ranges: partition {pid!r} is not among this run's partition keys "
                        f"{list(partition_keys)}; launch the run for that partition"
                    )
                if len(bounds) != 2 or bounds[0] < 0 or bounds[1] < bounds[0]:
                    raise ConfigurationError(
                        f"replay_ranges[{pid!r}]: {bounds} must be [first, last] with "
                        "0 <= first <= last (inclusive sequence numbers)"
                    )
                ranges[pid] = SeqRange(int(bounds[0]), int(bounds[1]))
            return ReplaySettings(ranges=ranges)
        if self.replay_from:
            return ReplaySettings(
                starting_position=self.replay_from, ending_position=self.replay_to
            )
        return None


def dagster_run_is_dead(instance: dg.DagsterInstance) -> Callable[[str], bool]:
    """``is_owner_dead`` for the run: True iff the owner id is a run this instance saw fail.

    Owners that are not Dagster runs here (the CLI, another deployment) are never judged dead;
    their leases are taken over only after expiry.
    """
    dead = {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}

    def is_dead(owner_id: str) -> bool:
        if not owner_id:
            return False
        try:
            run = instance.get_run_by_id(owner_id)
        except Exception:  # a malformed id or a storage hiccup: fall back to lease expiry
            return False
        return run is not None and run.status in dead

    return is_dead


def dagster_runs_starting(
    context: dg.AssetExecutionContext, asset_key: dg.AssetKey, targets: Sequence[str]
) -> Callable[[], list[str]]:
    """``expected_peers`` for the run: other runs of this asset over any of ``targets`` that
    are queued, starting or started (they will join; counting them now leaves their share).

    Two backfills launched seconds apart start their Spark sessions before either writes a
    heartbeat; without this hint the first claims every partition and the second reads 0. A
    run expected in vain (it waits on a pool slot, or fails) costs this one an extra claim
    cycle, never a wrong claim: the hint only shrinks this run's share. Asked at most every
    2 s (one query of the run storage).
    """
    instance, me = context.instance, context.run.run_id
    wanted = set(targets)
    pdef = context.assets_def.partitions_def
    statuses = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    cache: list[Any] = [float("-inf"), []]

    def keys_of(run: dg.DagsterRun) -> set[str] | None:
        tags = run.tags
        if "dagster/partition" in tags:
            return {tags["dagster/partition"]}
        start = tags.get("dagster/asset_partition_range_start")
        end = tags.get("dagster/asset_partition_range_end")
        if start is None or end is None or pdef is None:
            return None
        try:
            return set(
                pdef.get_partition_keys_in_range(
                    dg.PartitionKeyRange(start, end), dynamic_partitions_store=instance
                )
            )
        except Exception:  # unknown keys: assume it overlaps (costs a cycle at most)
            return None

    def expected() -> list[str]:
        if time.monotonic() - cache[0] < 2.0:
            return list(cache[1])
        found = []
        for run in instance.get_runs(dg.RunsFilter(statuses=statuses), limit=100):
            if run.run_id == me:
                continue
            if run.asset_selection is not None and asset_key not in run.asset_selection:
                continue
            keys = keys_of(run)
            if keys is None or keys & wanted:
                found.append(run.run_id)
        cache[:] = [time.monotonic(), found]
        return found

    return expected


def build_partitions_def(
    partition_ids: Sequence[str] | None, dynamic_name: str
) -> dg.StaticPartitionsDefinition | dg.DynamicPartitionsDefinition:
    """Static partitions from config, or dynamic ones a sensor keeps in sync with the hub."""
    if partition_ids is None:
        return dg.DynamicPartitionsDefinition(name=dynamic_name)
    ids = [str(p) for p in partition_ids]
    if not ids:
        raise ConfigurationError(
            "partitions: the list is empty; list the hub's partition ids (e.g. ['0', '1']) or "
            "leave it unset for dynamic partitions synced from the hub"
        )
    if len(set(ids)) != len(ids):
        raise ConfigurationError(f"partitions: {ids} has duplicates")
    return dg.StaticPartitionsDefinition(ids)


def build_eventhub_ingest_asset(
    *,
    key: str | Sequence[str] | dg.AssetKey = "eventhub_events",
    partition_ids: Sequence[str] | None = None,
    dynamic_partitions_name: str | None = None,
    options: IngestAssetConfig | None = None,
    resource_keys: ResourceKeys | None = None,
    group_name: str | None = None,
    description: str | None = None,
    backfill_max_partitions_per_run: int | None = None,
    retry_policy: dg.RetryPolicy | None = None,
    metadata: dict[str, object] | None = None,
) -> dg.AssetsDefinition:
    """Build the ingestion asset, partitioned by Event Hub partition id.

    Args:
        key: asset key.
        partition_ids: static partition ids; None makes the partitions dynamic (named
            ``dynamic_partitions_name``, default ``{key}_partitions``), kept in sync with the hub
            by the sensor from
            :func:`dagster_eventhub_ingest.dagster_project.sensors.build_partition_sync_sensor`.
        options: ingestion knobs and lag thresholds.
        resource_keys: which resources to use (defaults: eventhub, partition_store, sink,
            pyspark).
        group_name: Dagster asset group.
        description: asset description shown in the UI.
        backfill_max_partitions_per_run: None (default) runs a UI backfill as one run per
            contiguous range, which brings every key up to date with a balanced plan; N splits
            it into runs of at most N partitions (more parallel runs, each fewer keys).
        retry_policy: default :func:`default_retry_policy` (transient errors only).
        metadata: definition metadata (default: the column schema; the Component adds the
            sink's ``dagster/uri`` or ``dagster/table_name``).

    With a lag threshold the asset declares the lag check and evaluates it after every run
    (:mod:`dagster_eventhub_ingest.dagster_project.checks`); the check's own sensor comes from
    :func:`dagster_eventhub_ingest.dagster_project.component.build_eventhub_ingest_defs`.

    Example::

        asset = build_eventhub_ingest_asset(key="telemetry", partition_ids=["0", "1"])
        defs = dg.Definitions(assets=[asset], resources={...})
    """
    opts = options or IngestAssetConfig()
    keys = resource_keys or ResourceKeys()
    asset_key = dg.AssetKey.from_coercible(key)
    pdef = build_partitions_def(
        partition_ids, dynamic_partitions_name or f"{asset_key.to_python_identifier()}_partitions"
    )
    if backfill_max_partitions_per_run is None:
        policy = dg.BackfillPolicy.single_run()
    elif backfill_max_partitions_per_run >= 1:
        policy = dg.BackfillPolicy.multi_run(backfill_max_partitions_per_run)
    else:
        raise ConfigurationError(
            f"backfill_max_partitions_per_run: {backfill_max_partitions_per_run} must be >= 1 "
            "(or unset for one run per range)"
        )

    @dg.asset(
        key=asset_key,
        partitions_def=pdef,
        backfill_policy=policy,
        required_resource_keys=keys.all(),
        output_required=False,
        group_name=group_name,
        kinds={"azure", "spark"},
        retry_policy=retry_policy if retry_policy is not None else default_retry_policy(),
        pool=opts.pool,
        metadata=metadata or definition_metadata(None, None),
        description=description
        or "Events from an Azure Event Hub, landed exactly once; one partition per hub partition.",
    )
    def _ingest(
        context: dg.AssetExecutionContext, config: ReplayConfig
    ) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
        yield from stopped_is_final(_events(context, config))

    def _events(
        context: dg.AssetExecutionContext, config: ReplayConfig
    ) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
        targets = list(context.partition_keys)
        resources = context.resources
        # Dagster's Terminate raises DagsterExecutionInterruptedError in this thread; the run
        # waits on its own thread, so it winds down cleanly (ops/run/cancel.py) before it is raised.
        cancel = Cancellation()
        try:
            eventhub = getattr(resources, keys.eventhub)
            store = getattr(resources, keys.partition_store)
            sink = getattr(resources, keys.sink)
            replay = config.replay_settings(targets)
            sink_settings = sink.settings()
            # An override of 0 is an error, not "use the default" (is not None, not `or`).
            run_options = opts.ingest_config().with_overrides(
                max_events_per_partition=config.max_events_per_partition
            )
            ingest_settings = IngestSettings(
                eventhub=eventhub.settings(),
                store=store.settings(),
                sink=sink_settings,
                **run_options.model_dump(),
            )
            pyspark = getattr(resources, keys.pyspark)
            spark, spark_factory = session_or_factory(pyspark, ingest_settings.sink)
            if isinstance(pyspark, LocalPySparkResource):
                # A stopped run that does not wind down in time is unblocked by ending the
                # session it waits on (ops/run/cancel.py).
                cancel.on_force(lambda: pyspark.stop_session(keep_archive=False))
            context.log.info(
                f"run {context.run.run_id} ingesting "
                f"{ingest_settings.eventhub.hub_ref().describe()} partitions {targets} "
                f"(strategy {opts.strategy}{', replay' if replay else ''})"
            )
            # Imported here: the run's machinery (and pyspark, which the source's modules
            # import) is the step's, not the definitions' (a code server never needs it).
            from dagster_eventhub_ingest.ops.run.entry import run_ingestion

            report: RunReport = run_ingestion(
                ingest_settings,
                spark,
                # This package's resource starts its session only when there is something to
                # read: a run with nothing to read starts no JVM.
                spark_factory=spark_factory,
                owner_id=context.run.run_id,
                partition_ids=targets,
                replay=replay,
                is_owner_dead=dagster_run_is_dead(context.instance),
                expected_peers=(
                    None if replay else dagster_runs_starting(context, asset_key, targets)
                ),
                log=context.log,
                # A step retry keeps the run id as owner id and starts after the failed
                # attempt ended: it takes that attempt's leases over at once.
                attempt=context.retry_number,
                cancel=cancel,
            )
        except BaseException as exc:
            pyspark = getattr(resources, keys.pyspark, None)
            if cancel.cancelled and isinstance(pyspark, LocalPySparkResource):
                # Stopped: end the session and its JVM now, not after a class-data archive.
                pyspark.stop_session(keep_archive=False)
            if not isinstance(exc, EventHubIngestError):
                raise
            if exc.retryable:
                raise  # the RetryPolicy retries it, with backoff
            raise _final_failure(exc, f"{type(exc).__name__}: {exc}") from exc
        explicit = RUNNER_TAG not in context.run.tags
        materialized = context.instance.get_materialized_partitions(asset_key)
        done = materialization_plan(
            targets,
            report.partitions,
            complete=report.complete,
            explicit_request=explicit,
            never_materialized={p for p in targets if p not in materialized},
        )
        # Every partition, measured now: keys outside this run's subset are judged too, and
        # the summary (an observation without a partition) tells the Overview about all of them.
        landed = {
            pid: LastBatch(
                f"{rep.first_sequence_number}..{rep.last_sequence_number}",
                time.time(),
                context.run.run_id,
            )
            for pid, rep in report.partitions.items()
            if rep.events and rep.first_sequence_number is not None and replay is None
        }
        check, summary = measure(
            asset_key,
            opts.lag_thresholds,
            ingest_settings.eventhub,
            store.store(ingest_settings.eventhub.hub_ref()),
            partition_ids=partition_ids,
            lease_expiry_seconds=opts.lease_expiry_seconds,
            instance=context.instance,
            measured_by=f"run {context.run.run_id}",
            batches=landed,
        )
        # Each materialization says how current the whole sink is, as the summary does: the
        # freshness check reads whichever of the two is latest.
        as_of = summary.metadata.get(LAST_UPDATED_KEY) if summary is not None else None
        for pid in done:
            yield dg.AssetMaterialization(
                asset_key=asset_key,
                partition=pid,
                metadata={
                    **partition_metadata(
                        report.partitions[pid],
                        output_location=report.output_location,
                        replay=replay is not None,
                        sink_table=sink_settings.table,
                        sink_sources=sink_settings.sources,
                    ),
                    **({LAST_UPDATED_KEY: as_of} if as_of is not None else {}),
                },
            )
        if summary is not None:
            context.log_event(summary)
        if check is not None:
            evaluation = lag_evaluation(check, context.instance)
            planned = context.run.asset_check_selection
            if planned is None:  # every check of the job
                planned = context.job_def.asset_layer.asset_graph.asset_check_keys
            if evaluation.asset_check_key in planned:
                # The run planned the check's own step at its start (the UI's Materialize
                # includes an asset's checks), so Dagster's record of it is as old as the run
                # and a sensor tick meanwhile would out-rank it; that step is then skipped
                # (the asset yields no output). A record of its own is as new as this
                # measurement (checks.py).
                context.instance.report_runless_asset_event(evaluation)
                context.log.info(
                    f"{LAG_CHECK_NAME} reported as measured at the end of this run: "
                    f"{check.description}"
                )
            else:
                # Reported, not declared: its record is as new as this measurement.
                yield evaluation
        quiet = [p for p in targets if p not in done and p in report.partitions]
        if quiet and report.complete:
            context.log.info(
                f"up to date without a new batch from this run (no materialization, so plots "
                f"show one point per batch): partition ids {', '.join(quiet)}"
            )
        missing = [
            pid
            for pid in targets
            if pid not in report.partitions
            or not (report.partitions[pid].up_to_date or report.complete)
        ]
        if missing or not report.complete:
            raise dg.Failure(
                description=(
                    f"partitions {missing} of {asset_key.to_user_string()} are not up to date "
                    f"after run {context.run.run_id}; the next run (or a retry) continues from "
                    "their checkpoints, and any recorded intent is replayed exactly once"
                ),
                allow_retries=True,
            )

    return _ingest
