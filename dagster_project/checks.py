"""The lag check: every partition of the hub is within a threshold, measured from the hub.

The check asks the hub for each partition's last enqueued event (one properties call per
partition, concurrently) and the store for the checkpoints (one list call), the same cheap read
as ``ehingest status`` (:func:`dagster_eventhub_ingest.ops.status.partition_status`); a lagging
partition costs one single-event receive for its age. It is declared on the ingestion asset
(``check_specs``), and:

* every ingestion run evaluates it when it finishes;
* a sensor (:func:`build_lag_sensor`) evaluates it on its own interval without launching a run,
  so lag stays reported when no ingestion runs (a stopped schedule, a stuck deployment);
* it covers every partition, not only a run's keys: a subset backfill cannot leave the others
  looking green.

Its metadata is the asset-level summary the Overview shows: total lag, how many partitions are
behind and which (labelled as ids), the worst age in whole seconds, and one row per partition
(checkpoint, lag, last batch). The same numbers also go out as an ``AssetObservation`` without a
partition (:func:`summary_observation`) at the end of every run and at every lag-sensor tick,
so the asset's own event history says where all partitions stand, not only the last one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

import dagster as dg

from dagster_eventhub_ingest.dagster_project.metadata import label_ids, round_seconds
from dagster_eventhub_ingest.resources.errors import EventHubIngestError
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

__all__ = [
    "LAG_CHECK_NAME",
    "LagThresholds",
    "LastBatch",
    "build_lag_sensor",
    "lag_check_description",
    "lag_check_result",
    "lag_check_spec",
    "lag_summary",
    "last_batches",
    "measure",
    "measure_lag",
    "summary_observation",
]

LAG_CHECK_NAME = "lag_within_threshold"


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
        "partition_ids_over_threshold": dg.MetadataValue.text(label_ids(over)),
        "threshold_events": options.max_lag_events,
        "threshold_seconds": options.max_lag_seconds,
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
        "total_lag_events": dg.MetadataValue.int(sum(lags)),
        "partitions_behind": dg.MetadataValue.int(len(behind)),
        "partition_ids_behind": dg.MetadataValue.text(label_ids(behind)),
        "max_lag_events": dg.MetadataValue.int(max(lags)) if lags else None,
        "max_lag_seconds": dg.MetadataValue.int(round(max(secs))) if secs else None,
        "partitions": dg.MetadataValue.md("\n".join(rows)),
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
            value = mat.metadata.get("sequence_range") if mat is not None else None
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
) -> dg.AssetObservation:
    """The asset-level summary of every partition, as an observation without a partition.

    The Overview of a partitioned asset otherwise shows only whichever partition landed last;
    this event (from each run's end and each lag-sensor tick) says where all of them stand.
    """
    md = lag_summary(reports, checkpoints=checkpoints, last_batches=batches)
    behind = md["partitions_behind"].value
    total = md["total_lag_events"].value
    text = (
        f"all {len(reports)} partitions: {behind} behind, {total} events to read in total "
        f"(measured by {measured_by})"
    )
    return dg.AssetObservation(
        asset_key=asset_key,
        description=text,
        metadata={"summary": dg.MetadataValue.text(text), **md},
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


def measure_lag(
    asset_key: dg.AssetKey,
    options: LagThresholds,
    eventhub: EventHubSettings,
    store: PartitionStore,
    *,
    partition_ids: Sequence[str] | None,
    lease_expiry_seconds: float,
) -> dg.AssetCheckResult:
    """The lag check's result, measured now from the hub and the checkpoints (no ingestion)."""
    check, _ = measure(
        asset_key,
        options,
        eventhub,
        store,
        partition_ids=partition_ids,
        lease_expiry_seconds=lease_expiry_seconds,
    )
    assert check is not None
    return check


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
    from dagster_eventhub_ingest.resources.hub_client import EventHubClient

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
    reports = {r.partition_id: r for r in rows}
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
            asset_key, reports, checkpoints=checkpoints, batches=last, measured_by=measured_by
        )
        if measured_by
        else None
    )
    return check, summary


def lag_check_spec(asset_key: dg.AssetKey, options: LagThresholds) -> dg.AssetCheckSpec:
    """The check as declared on the asset (evaluated by every ingestion run)."""
    return dg.AssetCheckSpec(
        LAG_CHECK_NAME,
        asset=asset_key,
        description=lag_check_description(options.max_lag_events, options.max_lag_seconds),
    )


def build_lag_sensor(
    asset_key: dg.AssetKey,
    options: LagThresholds,
    *,
    eventhub_key: str,
    partition_store_key: str,
    partition_ids: Sequence[str] | None,
    lease_expiry_seconds: float,
    every_minutes: float = 5,
    running: bool = True,
) -> dg.SensorDefinition:
    """A sensor evaluating the lag check every ``every_minutes`` without launching a run.

    It reports an ``AssetCheckEvaluation`` for the asset's lag check (``SensorResult
    .asset_events``): one properties call per partition and one list call on the store, so lag
    stays current while no ingestion runs (a stopped schedule shows as a red check).
    """

    sensor_name = f"{asset_key.to_python_identifier()}_lag"

    @dg.sensor(
        name=sensor_name,
        minimum_interval_seconds=max(30, round(every_minutes * 60)),
        required_resource_keys={eventhub_key, partition_store_key},
        default_status=(
            dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED
        ),
        description="Evaluates the lag check from the hub and the checkpoints, without a run.",
    )
    def _lag(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        eventhub = getattr(context.resources, eventhub_key).settings()
        store = getattr(context.resources, partition_store_key).store(eventhub.hub_ref())
        result, summary = measure(
            asset_key,
            options,
            eventhub,
            store,
            partition_ids=partition_ids,
            lease_expiry_seconds=lease_expiry_seconds,
            instance=context.instance,
            measured_by=f"sensor {sensor_name}",
        )
        assert result is not None
        context.log.info(f"{LAG_CHECK_NAME}: {result.description}")
        return dg.SensorResult(
            asset_events=[
                *([summary] if summary is not None else []),
                dg.AssetCheckEvaluation(
                    asset_key=asset_key,
                    check_name=LAG_CHECK_NAME,
                    passed=result.passed,
                    metadata=result.metadata,
                    severity=result.severity,
                    description=result.description,
                ),
            ],
            # No run is needed; the tick's reason (shown in the UI) is the measurement.
            skip_reason=dg.SkipReason(f"{LAG_CHECK_NAME} reported: {result.description}"),
        )

    return _lag
