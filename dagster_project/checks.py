"""The lag check: after each run, every partition's lag is within a threshold.

Lag is what the run measured when it finished: events enqueued in the hub after the checkpoint
(``lag_events``) and how long the oldest of them has waited (``lag_seconds``). The check is
declared on the ingestion asset (``check_specs``) and evaluated by every run, so its history in
the UI follows the schedule; it fails when a run was bounded (``max_events_per_partition``) or
outpaced by producers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

import dagster as dg

from ops.run import PartitionReport

__all__ = ["LAG_CHECK_NAME", "LagThresholds", "lag_check_description", "lag_check_result"]

LAG_CHECK_NAME = "lag_within_threshold"


class LagThresholds(Protocol):
    """What the check needs to know (``IngestOptions`` provides it)."""

    max_lag_events: int | None
    max_lag_seconds: float | None
    lag_check_severity: Literal["WARN", "ERROR"]


def lag_check_result(
    asset_key: dg.AssetKey,
    options: LagThresholds,
    reports: Mapping[str, PartitionReport | None],
) -> dg.AssetCheckResult:
    """Pass iff every partition's lag after the run is within the thresholds.

    A partition without a report (the run did not get to it) counts as over the threshold.
    """
    per_partition: dict[str, dict[str, float | int | None]] = {}
    over: list[str] = []
    for pid, maybe in reports.items():
        rep = maybe or PartitionReport(partition_id=pid)
        per_partition[pid] = {"lag_events": rep.lag_events, "lag_seconds": rep.lag_seconds}
        if (
            options.max_lag_events is not None
            and (rep.lag_events is None or rep.lag_events > options.max_lag_events)
        ) or (
            options.max_lag_seconds is not None
            and (rep.lag_seconds is None or rep.lag_seconds > options.max_lag_seconds)
        ):
            over.append(pid)
    lags = [r.lag_events for r in reports.values() if r and r.lag_events is not None]
    secs = [r.lag_seconds for r in reports.values() if r and r.lag_seconds is not None]
    metadata: dict[str, Any] = {
        "partitions_over_threshold": dg.MetadataValue.text(", ".join(over) or "none"),
        "max_lag_events": dg.MetadataValue.int(max(lags)) if lags else None,
        "max_lag_seconds": dg.MetadataValue.float(float(max(secs))) if secs else None,
        "threshold_events": options.max_lag_events,
        "threshold_seconds": options.max_lag_seconds,
        "lag_per_partition": dg.MetadataValue.json(per_partition),
    }
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=LAG_CHECK_NAME,
        passed=not over,
        severity=dg.AssetCheckSeverity(options.lag_check_severity),
        metadata={k: v for k, v in metadata.items() if v is not None},
    )


def lag_check_description(max_lag_events: int | None, max_lag_seconds: float | None) -> str:
    """One line for the check's description in the UI."""
    parts = []
    if max_lag_events is not None:
        parts.append(f"<= {max_lag_events} events")
    if max_lag_seconds is not None:
        parts.append(f"<= {max_lag_seconds:g} s")
    return "Lag after the run, per partition, is " + " and ".join(parts)
