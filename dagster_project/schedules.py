"""The ingestion job and its schedule: every N minutes, K parallel runs over all partitions.

Each of the K runs targets every partition key (one run over the whole key range). They meet in
the partition store as peers, split the partitions by the configured balancing strategy, and each
stays until all keys are up to date; so K > 1 adds read parallelism without a coordinator, and a
run that dies is covered by the others.

A tick is skipped while runs of an earlier tick are still going (a backlog larger than one
period): piling more runs on would only make them wait for each other's leases.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from dagster_eventhub_ingest.dagster_project.assets import RUNNER_TAG
from dagster_eventhub_ingest.resources.config import ScheduleOptions

__all__ = ["RUNNER_TAG", "build_ingest_job", "build_ingest_schedule", "every_minutes_cron"]

#: Runs that have not finished yet (a tick is skipped while any of the schedule's is one).
UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def every_minutes_cron(minutes: int) -> str:
    """A cron string for "every ``minutes`` minutes" (must divide an hour or a day evenly)."""
    return ScheduleOptions.from_dict({"every_minutes": minutes}, where="schedule").cron


def build_ingest_job(
    asset: dg.AssetsDefinition, name: str | None = None
) -> dg.UnresolvedAssetJobDefinition:
    """A job that materializes ``asset`` for a set of partition keys.

    Its runs report the lag check themselves when they finish; the check's own step is left out
    so no run plans it at its start (dagster_project/checks.py says why).
    """
    return dg.define_asset_job(
        name or f"{asset.key.to_python_identifier()}_job",
        selection=dg.AssetSelection.assets(asset).without_checks(),
    )


def build_ingest_schedule(
    job: dg.UnresolvedAssetJobDefinition,
    partitions_def: dg.PartitionsDefinition,
    *,
    every_minutes: int = 5,
    runs: int = 1,
    cron_schedule: str | None = None,
    name: str | None = None,
    running: bool = False,
) -> dg.ScheduleDefinition:
    """Every ``every_minutes`` (or on ``cron_schedule``), launch ``runs`` runs over all keys.

    Args:
        job: the job from :func:`build_ingest_job`.
        partitions_def: the asset's partitions (static, or dynamic: read from the instance at
            each tick, so partitions the sensor added are included).
        every_minutes: period when no cron string is given.
        runs: K, how many parallel runs to start per tick; they share the work.
        cron_schedule: a cron string overriding ``every_minutes``.
        name: schedule name (default ``{job}_schedule``).
        running: start the schedule switched on (default off, switch it on in the UI).
    """
    options = ScheduleOptions.from_dict(
        {"every_minutes": every_minutes, "runs": runs, "cron_schedule": cron_schedule},
        where="schedule",
    )
    cron = options.cron
    schedule_name = name or f"{job.name}_schedule"

    @dg.schedule(
        name=schedule_name,
        cron_schedule=cron,
        job=job,
        default_status=(
            dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
        ),
        description=(
            f"{runs} run(s) over every partition, on '{cron}'; a tick is skipped while the "
            "previous tick's runs are still going"
        ),
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        keys = partitions_def.get_partition_keys(dynamic_partitions_store=context.instance)
        if not keys:
            return dg.SkipReason(
                "no partitions yet: the partition sensor adds them from the hub on its first tick"
            )
        running = context.instance.get_run_records(
            dg.RunsFilter(
                job_name=job.name,
                statuses=UNFINISHED,
                tags={"dagster/schedule_name": schedule_name},
            ),
            limit=runs,
        )
        if running:
            ids = ", ".join(r.dagster_run.run_id[:8] for r in running)
            return dg.SkipReason(
                f"{len(running)} run(s) of an earlier tick still going ({ids}); skipping this "
                "tick so runs do not pile up"
            )
        tick_id = (context.scheduled_execution_time or datetime.now(timezone.utc)).isoformat()
        return [
            dg.RunRequest(
                run_key=f"{tick_id}#{i}",
                tags={
                    "dagster/asset_partition_range_start": keys[0],
                    "dagster/asset_partition_range_end": keys[-1],
                    RUNNER_TAG: f"{i}/{runs}",
                },
            )
            for i in range(1, runs + 1)
        ]

    return _schedule
