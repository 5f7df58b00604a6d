"""How Dagster declares the pipeline: the asset, its schedule, its lag check."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from dagster_eventhub_ingest.resources.config._model import (
    OneLineErrors,
    StrictModel,
    _above,
    _at_least,
    setting,
)
from dagster_eventhub_ingest.resources.config._run import IngestConfig

LagSeverity = Literal["WARN", "ERROR"]


class AssetPolicies(StrictModel):
    """How Dagster runs and judges the asset: its concurrency pool and freshness check."""

    pool: str | None = setting(
        default="eventhub_ingest",
        description="Dagster concurrency pool of the ingestion step; set its limit on the "
        "instance to at least schedule.runs.",
    )
    freshness_fail_minutes: float | None = setting(
        default=None,
        description="Freshness check window in minutes: overdue when the sink is not caught up "
        "with the hub as of this long ago (an unread event older than this, or no measurement "
        "for this long). Default: three schedule periods when a schedule is set. Example: 15.",
    )

    @field_validator("freshness_fail_minutes")
    @classmethod
    def _freshness(cls, value: float | None) -> float | None:
        return _above(value, 0, " (or unset)")


class AssetOptions(AssetPolicies):
    """How the Dagster asset is declared (defs.yaml's top-level keys beside the run options)."""

    asset_key: str = setting(default="eventhub_events", description="Asset key ('a/b' for a path).")
    group_name: str | None = setting(default=None, description="Asset group in the UI.")
    description: str | None = setting(default=None, description="Asset description in the UI.")
    partition_sync_interval_seconds: int = setting(
        default=300, description="How often the sensor asks the hub for new partitions (>= 1)."
    )
    backfill_max_partitions_per_run: int | None = setting(
        default=None,
        description="UI backfills: unset = one run per contiguous range; N = runs of <= N keys.",
    )

    @field_validator("partition_sync_interval_seconds", "backfill_max_partitions_per_run")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        return _at_least(value, 1, integer=True)


class ScheduleOptions(StrictModel):
    """Every N minutes (or on a cron string), K runs over every partition."""

    every_minutes: int = setting(
        default=5, description="Period in minutes; divides an hour or a day (1, 5, 15, 60, ...)."
    )
    runs: int = setting(default=1, description="K: parallel runs per tick (>= 1); they share work.")
    cron_schedule: str | None = setting(default=None, description="Cron string (overrides N).")
    running: bool = setting(default=False, description="Start the schedule switched on.")

    @field_validator("every_minutes")
    @classmethod
    def _period(cls, value: int) -> int:
        if _every_minutes_cron(value) is None:
            raise ValueError(
                f"{value} does not divide an hour or a day evenly; use one of 1, 2, 3, 4, 5, 6, "
                "10, 12, 15, 20, 30, 60, 120, 180, ... or give a cron string"
            )
        return value

    @field_validator("runs")
    @classmethod
    def _runs(cls, value: int) -> int:
        return _at_least(value, 1, " (parallel runs per tick)", integer=True)

    @property
    def cron(self) -> str:
        """The cron string of the schedule: ``cron_schedule``, or every ``every_minutes``."""
        return self.cron_schedule or str(_every_minutes_cron(self.every_minutes))


def _every_minutes_cron(minutes: int) -> str | None:
    """A cron string for "every ``minutes`` minutes" (None unless it divides an hour or a day)."""
    if 1 <= minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if minutes >= 60 and minutes % 60 == 0 and 24 % (minutes // 60) == 0:
        hours = minutes // 60
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    return None


class LagCheckOptions(StrictModel):
    """The lag check: thresholds (set at least one for a check), severity, and its sensor."""

    max_lag_events: int | None = setting(
        default=None, description="Max events behind the hub (>= 0)."
    )
    max_lag_seconds: float | None = setting(
        default=None, description="Max age of the oldest unread event, seconds (>= 0)."
    )
    severity: LagSeverity = setting(default="WARN", description="Severity on failure.")
    every_minutes: float = setting(
        default=5,
        description="A sensor also evaluates the check this often, from the hub and the "
        "checkpoints without a run, so lag is reported while no ingestion runs (> 0).",
    )
    running: bool = setting(default=True, description="Start the check's sensor switched on.")

    @field_validator("max_lag_events", "max_lag_seconds")
    @classmethod
    def _threshold(cls, value: float | None) -> float | None:
        return _at_least(value, 0, " (or unset for no threshold)")

    @field_validator("every_minutes")
    @classmethod
    def _every(cls, value: float) -> float:
        return _above(value, 0)

    @property
    def has_thresholds(self) -> bool:
        """True when a threshold is set (otherwise there is no check)."""
        return self.max_lag_events is not None or self.max_lag_seconds is not None


class IngestAssetConfig(OneLineErrors, IngestConfig, AssetPolicies):
    """The ingestion asset built in Python (``build_eventhub_ingest_asset(options=...)``): how
    its runs ingest (:class:`IngestConfig`), its pool and freshness (:class:`AssetPolicies`) and
    its lag check (:class:`LagCheckOptions`; a check exists only when a threshold is set).

    The Component declares the same keys in defs.yaml. Bad values raise
    :class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` naming the key::

        IngestAssetConfig(strategy="balanced", lag_check=LagCheckOptions(max_lag_events=10_000))
    """

    lag_check: LagCheckOptions | None = setting(
        default=None, description="The lag check: thresholds, severity and its sensor."
    )

    @property
    def lag_thresholds(self) -> LagCheckOptions | None:
        """The lag check when it has a threshold (None: the asset has no lag check)."""
        check = self.lag_check
        return check if check is not None and check.has_thresholds else None
