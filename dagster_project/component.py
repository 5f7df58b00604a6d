"""The ``EventHubIngestComponent``: the whole pipeline declared in a ``defs.yaml``.

Registered for ``dg`` under the ``dagster_dg_cli.registry_modules`` entry point (see
pyproject.toml), so ``dg list components`` shows it and ``dg scaffold defs`` can create one::

    type: dagster_project.component.EventHubIngestComponent
    attributes:
      asset_key: telemetry
      eventhub:
        eventhub_name: telemetry
        credential: {connection_string_env: EVENTHUB_CONNECTION_STRING}
      store:
        container: eventhub-state
        credential: {connection_string_env: AZURE_STORAGE_CONNECTION_STRING}
      sink:
        path: /data/telemetry
        partition_by: [partition]
      partitions: [0, 1, 2, 3]      # omit for dynamic partitions synced from the hub
      schedule: {every_minutes: 5, runs: 2}
      lag_check: {max_lag_events: 10000}

The keys are those of ``resources/config.py`` (the ``ehingest`` config file takes the same).
Secrets are named by environment variable (``connection_string_env``) and reach Dagster as
``dg.EnvVar``: the UI shows the variable's name, never its value. Everything checkable without
the network is checked when the definitions load (``dg check defs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import BaseModel, Field, create_model, field_validator, model_validator

from dagster_project.assets import IngestOptions, ResourceKeys, build_eventhub_ingest_asset
from dagster_project.checks import build_lag_sensor
from dagster_project.metadata import definition_metadata
from dagster_project.resources import (
    EventHubResource,
    PartitionStoreResource,
    SinkResource,
    local_pyspark_resource,
)
from dagster_project.schedules import build_ingest_job, build_ingest_schedule
from dagster_project.sensors import build_partition_sync_sensor
from resources.config import (
    EventHubConfig,
    RunOptions,
    SinkConfig,
    StoreConfig,
    spark_conf_strings,
    unknown_key_message,
)
from resources.errors import ConfigurationError

__all__ = [
    "EventHubIngestComponent",
    "EventHubModel",
    "LagCheckModel",
    "ScheduleModel",
    "SinkModel",
    "StoreModel",
    "build_eventhub_ingest_defs",
    "coerce_partition_ids",
]


def coerce_partition_ids(value: Any) -> Any:
    """Partition ids as strings: YAML reads ``[0, 1]`` as ints, Event Hubs ids are strings."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Sequence):
        out = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int | str):
                raise ConfigurationError(
                    f"partitions: {item!r} is not a partition id; use ids as the hub reports "
                    "them, e.g. [0, 1, 2, 3] or ['0', '1']"
                )
            out.append(str(item))
        return out
    return value


_KEY_CHECKED: dict[type, type[BaseModel]] = {}


class _KeyChecked:
    """Unknown keys in defs.yaml get a did-you-mean (Dagster's own message has none).

    Dagster validates the YAML against a model derived from the class before anything of ours
    runs; this adds our key check in front of that derived model.
    """

    @classmethod
    def model(cls) -> type[BaseModel]:
        if cls not in _KEY_CHECKED:
            base: type[BaseModel] = super().model()  # type: ignore[misc]
            valid = list(base.model_fields)

            def check(data: Any) -> Any:
                if isinstance(data, Mapping):
                    for key in data:
                        if key not in valid:
                            raise ValueError(unknown_key_message(str(key), valid))
                return data

            _KEY_CHECKED[cls] = create_model(
                base.__name__,
                __base__=base,
                __validators__={
                    "_did_you_mean": model_validator(mode="before")(check)  # type: ignore[dict-item]
                },
            )
        return _KEY_CHECKED[cls]


class EventHubModel(_KeyChecked, dg.Resolvable, dg.Model, EventHubConfig):
    """The Event Hub to read (:class:`resources.config.EventHubConfig`, templates resolved)."""

    # Old spellings (one release): moved into ``credential`` with a deprecation warning.
    credential_type: Literal["connection_string", "default_azure_credential"] | None = Field(
        default=None, description="Deprecated: write credential.credential_type."
    )
    connection_string_env: str | None = Field(
        default=None, description="Deprecated: write credential.connection_string_env."
    )
    fully_qualified_namespace: str | None = Field(
        default=None, description="Deprecated: write credential.fully_qualified_namespace."
    )

    def resource(self) -> EventHubResource:
        """The :class:`EventHubResource` this describes (secret through ``dg.EnvVar``)."""
        return EventHubResource.from_config(self)


class StoreModel(_KeyChecked, dg.Resolvable, dg.Model, StoreConfig):
    """The Blob container for leases and checkpoints (:class:`resources.config.StoreConfig`)."""

    credential_type: Literal["connection_string", "default_azure_credential"] | None = Field(
        default=None, description="Deprecated: write credential.credential_type."
    )
    connection_string_env: str | None = Field(
        default=None, description="Deprecated: write credential.connection_string_env."
    )
    account_url: str | None = Field(
        default=None, description="Deprecated: write credential.account_url."
    )

    def resource(self) -> PartitionStoreResource:
        """The :class:`PartitionStoreResource` this describes (secret through ``dg.EnvVar``)."""
        return PartitionStoreResource.from_config(self)


class SinkModel(_KeyChecked, dg.Resolvable, dg.Model, SinkConfig):
    """Where events land (:class:`resources.config.SinkConfig`)."""

    def resource(self) -> SinkResource:
        """The :class:`SinkResource` this describes."""
        return SinkResource.from_config(self)


class ScheduleModel(_KeyChecked, dg.Resolvable, dg.Model):
    """Every N minutes, K runs over every partition."""

    every_minutes: int = Field(default=5, description="Period in minutes (divides an hour/day).")
    runs: int = Field(default=1, description="K: parallel runs per tick; they share the work.")
    cron_schedule: str | None = Field(default=None, description="Cron string (overrides N).")
    running: bool = Field(default=False, description="Start the schedule switched on.")


class LagCheckModel(_KeyChecked, dg.Resolvable, dg.Model):
    """Thresholds of the lag check (set at least one)."""

    max_lag_events: int | None = Field(default=None, description="Max events behind the hub.")
    max_lag_seconds: float | None = Field(default=None, description="Max age of unread events.")
    severity: Literal["WARN", "ERROR"] = Field(default="WARN", description="Severity on failure.")
    every_minutes: float = Field(
        default=5,
        description="A sensor also evaluates the check this often, from the hub and the "
        "checkpoints without a run, so lag is reported while no ingestion runs.",
    )
    running: bool = Field(default=True, description="Start the check's sensor switched on.")


def _resolve_partitions(context: dg.ResolutionContext, value: Any) -> list[str] | None:
    return coerce_partition_ids(context.resolve_value(value))


ResolvedPartitionIds = Annotated[
    list[str] | None,
    dg.Resolver(
        _resolve_partitions,
        model_field_type=list[str | int] | None,
        description="Static partition ids; omit for dynamic partitions synced from the hub.",
    ),
]


class EventHubIngestComponent(_KeyChecked, dg.Component, dg.Model, RunOptions, dg.Resolvable):
    """Land an Azure Event Hub into a Spark sink, exactly once, in scheduled Dagster batches.

    Builds a partitioned asset (one partition per hub partition, with a lag check), its job, a
    schedule launching K parallel runs, a sensor syncing dynamic partitions with the hub, and the
    resources (Event Hub, partition store, sink, local PySpark). The run options (strategy,
    max_events_per_partition, ...) are :class:`resources.config.RunOptions`, the same keys as
    the ``ehingest`` config file; everything is validated when the definitions load.
    """

    asset_key: str = Field(default="eventhub_events", description="Asset key ('a/b' for a path).")
    group_name: str | None = Field(default=None, description="Asset group in the UI.")
    description: str | None = Field(default=None, description="Asset description in the UI.")
    eventhub: EventHubModel = Field(description="The Event Hub to read.")
    store: StoreModel = Field(description="The Blob container for leases and checkpoints.")
    sink: SinkModel = Field(description="Where events land.")
    partitions: ResolvedPartitionIds = None
    partition_sync_interval_seconds: int = Field(
        default=300, description="How often the sensor asks the hub for new partitions."
    )
    backfill_max_partitions_per_run: int | None = Field(
        default=None,
        description="UI backfills: None = one run per contiguous range; N = runs of <= N keys.",
    )
    pool: str | None = Field(
        default="eventhub_ingest",
        description="Dagster concurrency pool of the ingestion step; set its limit on the "
        "instance to at least schedule.runs.",
    )
    freshness_fail_minutes: float | None = Field(
        default=None,
        description="Freshness policy: fail when no batch landed for this long (default: three "
        "schedule periods when a schedule is set).",
    )
    schedule: ScheduleModel | None = Field(default=None, description="Scheduled runs (optional).")
    lag_check: LagCheckModel | None = Field(default=None, description="Lag check (optional).")
    spark_config: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Spark settings over the local loopback defaults (numbers and booleans are "
        "passed to Spark as strings).",
    )
    spark_remote: str | None = Field(
        default=None,
        description="Spark Connect URL ('sc://host:15002', Databricks serverless style) instead "
        "of a local or cluster master; spark_config then holds session settings only.",
    )

    @field_validator("partitions", mode="before")
    @classmethod
    def _coerce_partitions(cls, value: Any) -> Any:
        return coerce_partition_ids(value)

    @field_validator("spark_config", mode="before")
    @classmethod
    def _spark_strings(cls, value: Any) -> Any:
        return spark_conf_strings(value)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The asset, job, schedule, sensor and resources this component declares."""
        lag = self.lag_check or LagCheckModel()
        options = IngestOptions(
            **self.run_options().model_dump(),
            max_lag_events=lag.max_lag_events,
            max_lag_seconds=lag.max_lag_seconds,
            lag_check_severity=lag.severity,
            pool=self.pool,
            freshness_fail_minutes=self.freshness_fail_minutes,
        )
        return build_eventhub_ingest_defs(
            key=self.asset_key.split("/"),
            eventhub=self.eventhub.resource(),
            partition_store=self.store.resource(),
            sink=self.sink.resource(),
            pyspark=local_pyspark_resource(dict(self.spark_config), remote=self.spark_remote),
            partition_ids=self.partitions,
            options=options,
            group_name=self.group_name,
            description=self.description,
            schedule=self.schedule,
            partition_sync_interval_seconds=self.partition_sync_interval_seconds,
            backfill_max_partitions_per_run=self.backfill_max_partitions_per_run,
            lag_check_every_minutes=lag.every_minutes,
            lag_check_running=lag.running,
        )


def build_eventhub_ingest_defs(
    *,
    key: str | Sequence[str] | dg.AssetKey,
    eventhub: EventHubResource,
    partition_store: PartitionStoreResource,
    sink: SinkResource,
    pyspark: Any | None = None,
    partition_ids: Sequence[str] | None = None,
    options: IngestOptions | None = None,
    group_name: str | None = None,
    description: str | None = None,
    schedule: ScheduleModel | None = None,
    partition_sync_interval_seconds: int = 300,
    backfill_max_partitions_per_run: int | None = None,
    lag_check_every_minutes: float = 5,
    lag_check_running: bool = False,
    retry_policy: dg.RetryPolicy | None = None,
) -> dg.Definitions:
    """Everything for one hub in Python: asset (+ lag check), job, schedule, sensor, resources.

    ``retry_policy`` replaces :func:`dagster_project.assets.default_retry_policy` (transient
    errors only; configuration and data-loss errors are never retried).

    Resource keys are prefixed by the asset name so several hubs can live in one project.

    Example::

        defs = build_eventhub_ingest_defs(
            key="telemetry",
            eventhub=EventHubResource(eventhub_name="telemetry", credential=...),
            partition_store=PartitionStoreResource(container="eventhub-state", credential=...),
            sink=SinkResource(path="/data/telemetry"),
            partition_ids=["0", "1", "2", "3"],
            schedule=ScheduleModel(every_minutes=5, runs=2),
        )
    """
    asset_key = dg.AssetKey.from_coercible(key)
    keys = ResourceKeys.prefixed(asset_key.to_python_identifier())
    opts = options or IngestOptions()
    if schedule is not None and opts.freshness_fail_minutes is None:
        # Fresh means a batch landed within three schedule periods.
        opts = opts.replace(freshness_fail_minutes=3.0 * schedule.every_minutes)
    asset = build_eventhub_ingest_asset(
        key=asset_key,
        partition_ids=partition_ids,
        options=opts,
        resource_keys=keys,
        group_name=group_name,
        description=description,
        backfill_max_partitions_per_run=backfill_max_partitions_per_run,
        retry_policy=retry_policy,
        metadata=definition_metadata(sink.path, sink.table),
    )
    assert asset.partitions_def is not None
    job = build_ingest_job(asset)
    schedules = []
    sensors = []
    if opts.has_lag_check:
        sensors.append(
            build_lag_sensor(
                asset_key,
                opts,
                eventhub_key=keys.eventhub,
                partition_store_key=keys.partition_store,
                partition_ids=partition_ids,
                lease_expiry_seconds=opts.lease_expiry_seconds,
                every_minutes=lag_check_every_minutes,
                running=lag_check_running,
            )
        )
    if schedule is not None:
        schedules.append(
            build_ingest_schedule(
                job,
                asset.partitions_def,
                every_minutes=schedule.every_minutes,
                runs=schedule.runs,
                cron_schedule=schedule.cron_schedule,
                running=schedule.running,
            )
        )
    if isinstance(asset.partitions_def, dg.DynamicPartitionsDefinition):
        sensors.append(
            build_partition_sync_sensor(
                asset.partitions_def,
                eventhub_resource_key=keys.eventhub,
                minimum_interval_seconds=partition_sync_interval_seconds,
            )
        )
    return dg.Definitions(
        assets=[asset],
        jobs=[job],
        schedules=schedules,
        sensors=sensors,
        resources={
            keys.eventhub: eventhub,
            keys.partition_store: partition_store,
            keys.sink: sink,
            keys.pyspark: pyspark if pyspark is not None else local_pyspark_resource(),
        },
    )
