"""The lag check: every partition of the hub is within a threshold, measured from the hub.

The check asks the hub for each partition's last enqueued event (one properties call per
partition, concurrently) and the store for the checkpoints (one list call), the same cheap read
as ``ehingest status`` (:func:`dagster_eventhub_ingest.ops.status.partition_status`); a lagging
partition costs one single-event receive for its age. It is its own ``@asset_check`` on the
ingestion asset (:func:`build_lag_check`, runnable alone from the UI), and:

* every ingestion run reports its evaluation when it finishes, measured then;
* a sensor (:func:`build_lag_sensor`) evaluates it on its own interval without launching a run,
  so lag stays reported when no ingestion runs (a stopped schedule, a stuck deployment);
* it covers every partition, not only a run's keys: a subset backfill cannot leave the others
  looking green.

Why the ingestion step does not declare it (``check_specs``): Dagster shows the check execution
with the highest record id, and a declared check gets its record when the run *starts*. A sensor
tick or a concurrent run finishing during a long run would then out-rank that run's newer
measurement, and an evaluation older than the latest materialization reads "Not evaluated".
Reported as an ``AssetCheckEvaluation`` when measured, each evaluation's record is as new as
its measurement. The ingestion job excludes the check's own step for the same reason.

Its metadata is the asset-level summary the Overview shows: total lag, how many partitions are
behind and which (labelled as ids), the worst age in whole seconds, and one row per partition
(checkpoint, lag, last batch). The same numbers also go out as an ``AssetObservation`` without a
partition (:func:`summary_observation`) at the end of every run and at every lag-sensor tick,
so the asset's own event history says where all partitions stand, not only the last one. That
observation carries ``dagster/last_updated_timestamp``: the sink holds every event enqueued
before it (:func:`caught_up_as_of`), which Dagster's freshness check reads
(:func:`build_freshness_checks`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol

import dagster as dg

from dagster_eventhub_ingest.dagster_project.metadata import key, label_ids, round_seconds
from dagster_eventhub_ingest.resources.errors import EventHubIngestError
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

__all__ = [
    "LAG_CHECK_NAME",
    "LAST_UPDATED_KEY",
    "LagProbe",
    "LagThresholds",
    "LastBatch",
    "build_freshness_checks",
    "build_lag_check",
    "build_lag_sensor",
    "caught_up_as_of",
    "lag_check_description",
    "lag_check_result",
    "lag_evaluation",
    "lag_summary",
    "last_batches",
    "measure",
    "summary_observation",
]

LAG_CHECK_NAME = "lag_within_threshold"

#: Dagster's key for "the data is current as of" (its freshness checks read it).
LAST_UPDATED_KEY = "dagster/last_updated_timestamp"


class LagThresholds(Protocol):
    """What the check needs to know
    (:class:`dagster_eventhub_ingest.resources.config.LagCheckOptions` provides it)."""

    @property
    def max_lag_events(self) -> int | None: ...

    @property
    def max_lag_seconds(self) -> float | None: ...

    @property
    def severity(self) -> Literal["WARN", "ERROR"]: ...


class _Lag(Protocol):
    @property
    def lag_events(self) -> int | None: ...

    @property
    def lag_seconds(self) -> float | None: ...


def lag_check_result(
    asset_key: dg.AssetKey,
    options: LagThresholds,
    reports: Mapping[str, _Lag | None],
    *,
    checkpoints: Mapping[str, int | None] | None = None,
    last_batches: Mapping[str, LastBatch] | None = None,
) -> dg.AssetCheckResult:
    """Pass iff every partition's lag is within the thresholds.

    ``reports`` maps partition id to anything with ``lag_events`` / ``lag_seconds`` (a
    :class:`dagster_eventhub_ingest.ops.status.PartitionStatus` or
    :class:`dagster_eventhub_ingest.ops.run.report.PartitionReport`); a partition without one (not
    measured) counts as over the threshold.
    """
    over: list[str] = []
    for pid, rep in reports.items():
        events = rep.lag_events if rep else None
        seconds = round_seconds(rep.lag_seconds) if rep else None
        if (
            options.max_lag_events is not None
            and (events is None or events > options.max_lag_events)
        ) or (
            options.max_lag_seconds is not None
            and (seconds is None or seconds > options.max_lag_seconds)
        ):
            over.append(pid)
    summary = lag_summary(reports, checkpoints=checkpoints, last_batches=last_batches)
    behind = [p for p, r in reports.items() if r and r.lag_events]
    lags = [r.lag_events for r in reports.values() if r and r.lag_events is not None]
    metadata: dict[str, Any] = {
        **summary,
        key("partition_ids_over_threshold"): dg.MetadataValue.text(label_ids(over)),
        key("threshold_events"): options.max_lag_events,
        key("threshold_seconds"): options.max_lag_seconds,
    }
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=LAG_CHECK_NAME,
        passed=not over,
        severity=dg.AssetCheckSeverity(options.severity),
        description=(
            f"{len(behind)} of {len(reports)} partitions behind, {sum(lags)} events in total"
            + (f"; over the threshold: {label_ids(over)}" if over else "")
        ),
        metadata={k: v for k, v in metadata.items() if v is not None},
    )


@dataclass(frozen=True)
class LastBatch:
    """A partition's latest landed batch: its sequence range, when and by which run."""

    sequence_range: str
    timestamp: float
    run_id: str


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def lag_summary(
    reports: Mapping[str, _Lag | None],
    *,
    checkpoints: Mapping[str, int | None] | None = None,
    last_batches: Mapping[str, LastBatch] | None = None,
) -> dict[str, Any]:
    """The asset-level numbers over every partition (the lag check's and the summary's).

    Counts are ints (Dagster plots them), ids are labelled (``partition ids 0, 3``), seconds
    are whole, and one table row per partition gives its checkpoint, lag and last batch.
    """
    behind: list[str] = []
    rows = [
        "| partition | checkpoint | lag events | lag seconds | last batch | landed at | run |",
        "|---|---|---|---|---|---|---|",
    ]
    for pid, rep in reports.items():
        events = rep.lag_events if rep else None
        seconds = round_seconds(rep.lag_seconds) if rep else None
        if events:
            behind.append(pid)
        cp = (checkpoints or {}).get(pid)
        last = (last_batches or {}).get(pid)
        batch = (
            f"{last.sequence_range} | {_when(last.timestamp)} | {last.run_id[:8]}"
            if last
            else "- | - | -"
        )
        rows.append(
            f"| {pid} | {'-' if cp is None else cp} | {'?' if events is None else events} | "
            f"{'?' if seconds is None else seconds} | {batch} |"
        )
    lags = [r.lag_events for r in reports.values() if r and r.lag_events is not None]
    secs = [r.lag_seconds for r in reports.values() if r and r.lag_seconds is not None]
    metadata: dict[str, Any] = {
        key("total_lag_events"): dg.MetadataValue.int(sum(lags)),
        key("partitions_behind"): dg.MetadataValue.int(len(behind)),
        key("partition_ids_behind"): dg.MetadataValue.text(label_ids(behind)),
        key("max_lag_events"): dg.MetadataValue.int(max(lags)) if lags else None,
        key("max_lag_seconds"): dg.MetadataValue.int(round(max(secs))) if secs else None,
        key("partitions"): dg.MetadataValue.md("\n".join(rows)),
    }
    return {k: v for k, v in metadata.items() if v is not None}


def last_batches(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition_ids: Sequence[str]
) -> dict[str, LastBatch]:
    """Each partition's latest materialization that landed a batch (one query per partition).

    Materializations without a batch (``batch: none ...``, a peer read it) are passed over; a
    failure to read the event log leaves the column empty rather than failing the caller.
    """
    out: dict[str, LastBatch] = {}
    for pid in partition_ids:
        try:
            result = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[pid]), limit=10
            )
        except Exception:  # informational only
            continue
        for rec in result.records:
            mat = rec.asset_materialization
            value = mat.metadata.get(key("sequence_range")) if mat is not None else None
            if value is not None:
                out[pid] = LastBatch(str(value.value), rec.timestamp, rec.run_id)
                break
    return out


def summary_observation(
    asset_key: dg.AssetKey,
    reports: Mapping[str, _Lag | None],
    *,
    checkpoints: Mapping[str, int | None] | None,
    batches: Mapping[str, LastBatch] | None,
    measured_by: str,
    measured_at: float,
) -> dg.AssetObservation:
    """The asset-level summary of every partition, as an observation without a partition.

    The Overview of a partitioned asset otherwise shows only whichever partition landed last;
    this event (from each run's end and each lag-sensor tick) says where all of them stand.
    With every partition's age known it carries ``dagster/last_updated_timestamp``
    (:func:`caught_up_as_of`), which Dagster's freshness check reads.
    """
    md = lag_summary(reports, checkpoints=checkpoints, last_batches=batches)
    as_of = caught_up_as_of(reports, measured_at)
    if as_of is not None:
        md[LAST_UPDATED_KEY] = dg.MetadataValue.timestamp(as_of)
    behind = md[key("partitions_behind")].value
    total = md[key("total_lag_events")].value
    text = (
        f"all {len(reports)} partitions: {behind} behind, {total} events to read in total "
        f"(measured by {measured_by})"
    )
    return dg.AssetObservation(
        asset_key=asset_key,
        description=text,
        metadata={key("summary"): dg.MetadataValue.text(text), **md},
    )


def caught_up_as_of(reports: Mapping[str, _Lag | None], measured_at: float) -> float | None:
    """When the sink was last caught up with the hub: every event enqueued before it has landed.

    A partition with nothing to read is current at ``measured_at``; one behind is current up to
    its oldest unread event (``lag_seconds`` is that event's age). The asset is as current as
    its most behind partition; None when a partition's age is unknown.
    """
    ages = [r.lag_seconds if r is not None else None for r in reports.values()]
    if not ages or any(a is None for a in ages):
        return None
    return measured_at - max(a for a in ages if a is not None)


def lag_evaluation(
    result: dg.AssetCheckResult, instance: dg.DagsterInstance
) -> dg.AssetCheckEvaluation:
    """The lag check's result as an evaluation a run or a sensor reports when it measured it.

    It names the asset's latest materialization as the one it judged. Without that, Dagster
    compares the latest materialization's time with the evaluation's record time, which SQLite
    keeps in whole seconds: an evaluation within a second of another run's batch would read
    "Not evaluated".
    """
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    assert result.asset_key is not None and result.check_name is not None
    latest = instance.fetch_materializations(result.asset_key, limit=1).records
    return dg.AssetCheckEvaluation(
        asset_key=result.asset_key,
        check_name=result.check_name,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
        target_materialization_data=(
            AssetCheckEvaluationTargetMaterializationData(
                storage_id=latest[0].storage_id,
                run_id=latest[0].run_id,
                timestamp=latest[0].timestamp,
            )
            if latest
            else None
        ),
    )


def lag_check_description(max_lag_events: int | None, max_lag_seconds: float | None) -> str:
    """One line for the check's description in the UI."""
    parts = []
    if max_lag_events is not None:
        parts.append(f"<= {max_lag_events} events")
    if max_lag_seconds is not None:
        parts.append(f"<= {max_lag_seconds:g} s")
    return (
        "Lag of every hub partition, measured from the hub and the checkpoints, is "
        + " and ".join(parts)
    )


def measure(
    asset_key: dg.AssetKey,
    options: LagThresholds | None,
    eventhub: EventHubSettings,
    store: PartitionStore,
    *,
    partition_ids: Sequence[str] | None,
    lease_expiry_seconds: float,
    instance: dg.DagsterInstance | None = None,
    measured_by: str = "",
    batches: Mapping[str, LastBatch] | None = None,
) -> tuple[dg.AssetCheckResult | None, dg.AssetObservation | None]:
    """Measure every partition once; the lag check's result and the asset-level summary.

    ``options``: the check's thresholds (None: no lag check, only the summary). ``instance``
    gives the summary each partition's last batch (``batches`` adds or overrides some, e.g.
    the batches the calling run landed); without ``measured_by`` no summary is made.
    """
    from dagster_eventhub_ingest.ops.status import partition_status
    from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient

    measured_at = time.time()
    try:
        rows = partition_status(
            store,
            EventHubClient(eventhub),
            lease_expiry_seconds=lease_expiry_seconds,
            partition_ids=list(partition_ids) if partition_ids else None,
        )
    except EventHubIngestError as exc:
        if options is None:
            return None, None
        # Not measurable is not "within the threshold": fail the check with the reason.
        return (
            dg.AssetCheckResult(
                asset_key=asset_key,
                check_name=LAG_CHECK_NAME,
                passed=False,
                severity=dg.AssetCheckSeverity(options.severity),
                description=f"lag not measured: {type(exc).__name__}: {exc}",
            ),
            None,
        )
    reports: dict[str, _Lag | None] = {r.partition_id: r for r in rows}
    checkpoints = {r.partition_id: r.checkpoint for r in rows}
    last = last_batches(instance, asset_key, list(reports)) if instance is not None else {}
    last.update(batches or {})
    check = (
        lag_check_result(asset_key, options, reports, checkpoints=checkpoints, last_batches=last)
        if options is not None
        else None
    )
    summary = (
        summary_observation(
            asset_key,
            reports,
            checkpoints=checkpoints,
            batches=last,
            measured_by=measured_by,
            measured_at=measured_at,
        )
        if measured_by
        else None
    )
    return check, summary


@dataclass(frozen=True)
class LagProbe:
    """Where the lag check measures: the asset, its thresholds, the resources holding the hub
    and the store, the partitions (None: all the hub has) and the lease expiry."""

    asset_key: dg.AssetKey
    options: LagThresholds
    eventhub_key: str
    partition_store_key: str
    partition_ids: Sequence[str] | None
    lease_expiry_seconds: float

    @property
    def resource_keys(self) -> set[str]:
        """The resources a check or sensor needs to measure."""
        return {self.eventhub_key, self.partition_store_key}

    def measure(
        self, resources: Any, *, instance: dg.DagsterInstance | None = None, measured_by: str = ""
    ) -> tuple[dg.AssetCheckResult, dg.AssetObservation | None]:
        """The check's result and (with ``measured_by``) the summary, measured now."""
        eventhub = getattr(resources, self.eventhub_key).settings()
        store = getattr(resources, self.partition_store_key).store(eventhub.hub_ref())
        result, summary = measure(
            self.asset_key,
            self.options,
            eventhub,
            store,
            partition_ids=self.partition_ids,
            lease_expiry_seconds=self.lease_expiry_seconds,
            instance=instance,
            measured_by=measured_by,
        )
        assert result is not None
        return result, summary


def build_lag_check(probe: LagProbe) -> dg.AssetChecksDefinition:
    """The lag check as its own definition: "Execute" in the UI measures it now, without a run
    of the asset. Ingestion runs and the lag sensor report the same check when they measure."""

    @dg.asset_check(
        asset=probe.asset_key,
        name=LAG_CHECK_NAME,
        description=lag_check_description(
            probe.options.max_lag_events, probe.options.max_lag_seconds
        ),
        required_resource_keys=probe.resource_keys,
    )
    # Unannotated: Dagster compares the annotation to its classes, and this module's are strings.
    def _lag(context) -> dg.AssetCheckResult:
        return probe.measure(context.resources)[0]

    return _lag


def build_freshness_checks(
    asset_key: dg.AssetKey, fail_minutes: float, *, sensor_name: str
) -> tuple[Sequence[dg.AssetChecksDefinition], dg.SensorDefinition]:
    """Dagster's last-update freshness check on the asset and the sensor that evaluates it.

    It reads ``dagster/last_updated_timestamp`` from the latest observation or materialization:
    the time up to which the sink holds every event of the hub (:func:`caught_up_as_of`). A
    quiet hub measured caught up stays fresh without new batches; a growing backlog goes
    overdue whether or not runs happen; no measurement for ``fail_minutes`` is overdue too.
    """
    checks = dg.build_last_update_freshness_checks(
        assets=[asset_key], lower_bound_delta=timedelta(minutes=fail_minutes)
    )
    sensor = dg.build_sensor_for_freshness_checks(
        freshness_checks=checks,
        name=sensor_name,
        minimum_interval_seconds=max(30, round(fail_minutes * 60 / 4)),
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    return checks, sensor


def _reported_since(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, since: float
) -> str | None:
    """Who reported the lag check after ``since`` (a run's id, or "a sensor"); None: nobody."""
    key = dg.AssetCheckKey(asset_key, LAG_CHECK_NAME)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key]).get(key)
    event = record.event if record is not None else None
    if event is None or event.dagster_event_type != dg.DagsterEventType.ASSET_CHECK_EVALUATION:
        return None  # none yet, or a run's planned step (that run reports when it ends)
    if event.timestamp <= since:
        return None
    assert record is not None
    return f"run {record.run_id}" if record.run_id else "a sensor or run"


def build_lag_sensor(
    probe: LagProbe, *, every_minutes: float = 5, running: bool = True
) -> dg.SensorDefinition:
    """A sensor evaluating the lag check every ``every_minutes`` without launching a run.

    It reports an ``AssetCheckEvaluation`` for the asset's lag check (``SensorResult
    .asset_events``): one properties call per partition and one list call on the store, so lag
    stays current while no ingestion runs (a stopped schedule shows as a red check).
    """

    sensor_name = f"{probe.asset_key.to_python_identifier()}_lag"

    @dg.sensor(
        name=sensor_name,
        minimum_interval_seconds=max(30, round(every_minutes * 60)),
        required_resource_keys=probe.resource_keys,
        default_status=(
            dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED
        ),
        description="Evaluates the lag check from the hub and the checkpoints, without a run.",
    )
    def _lag(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        began = time.time()
        result, summary = probe.measure(
            context.resources, instance=context.instance, measured_by=f"sensor {sensor_name}"
        )
        context.log.info(f"{LAG_CHECK_NAME}: {result.description}")
        events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = (
            [summary] if summary is not None else []
        )
        newer = _reported_since(context.instance, probe.asset_key, began)
        if newer is None:
            events.append(lag_evaluation(result, context.instance))
            reason = f"{LAG_CHECK_NAME} reported: {result.description}"
        else:
            # A run reported the check while this tick measured: its result is the newer one,
            # and ours, stored after it, would shadow it.
            reason = f"{LAG_CHECK_NAME} not reported: {newer} reported it while this tick measured"
        # No run is needed; the tick's reason (shown in the UI) is the measurement.
        return dg.SensorResult(asset_events=events, skip_reason=dg.SkipReason(reason))

    return _lag
