"""The ``EventHubIngestComponent``: the whole pipeline declared in a ``defs.yaml``.

Registered for ``dg`` under the ``dagster_dg_cli.registry_modules`` entry point (see
pyproject.toml), so ``dg list components`` shows it and ``dg scaffold defs`` can create one::

    type: dagster_project.component.EventHubIngestComponent
    attributes:
      asset_key: telemetry
      eventhub:
        eventhub_name: telemetry
        connection_string_env: EVENTHUB_CONNECTION_STRING
      store:
        container: eventhub-state
        connection_string_env: AZURE_STORAGE_CONNECTION_STRING
      sink:
        path: /data/telemetry
      partitions: [0, 1, 2, 3]      # omit for dynamic partitions synced from the hub
      schedule: {every_minutes: 5, runs: 2}
      lag_check: {max_lag_events: 10000}

Secrets are named by environment variable (``*_env``) and reach Dagster as ``dg.EnvVar``: the UI
shows the variable's name, never its value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import Field, field_validator

from dagster_project.assets import IngestOptions, ResourceKeys, build_eventhub_ingest_asset
from dagster_project.checks import build_lag_sensor
from dagster_project.metadata import definition_metadata
from dagster_project.resources import (
    EventHubConnectionString,
    EventHubIdentity,
    EventHubResource,
    PartitionStoreResource,
    SinkResource,
    StoreConnectionString,
    StoreIdentity,
    local_pyspark_resource,
)
from dagster_project.schedules import build_ingest_job, build_ingest_schedule
from dagster_project.sensors import build_partition_sync_sensor
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


class EventHubModel(dg.Resolvable, dg.Model):
    """The Event Hub to read: by connection string (in an env var) or namespace + identity."""

    eventhub_name: str = Field(description="Name of the Event Hub.")
    consumer_group: str = Field(default="$Default", description="Consumer group to read as.")
    credential_type: Literal["connection_string", "default_azure_credential"] = Field(
        default="connection_string",
        description="'connection_string' (from connection_string_env) or "
        "'default_azure_credential' (with fully_qualified_namespace).",
    )
    connection_string_env: str = Field(
        default="EVENTHUB_CONNECTION_STRING",
        description="Name of the environment variable holding the connection string.",
    )
    fully_qualified_namespace: str | None = Field(
        default=None, description="e.g. 'myns.servicebus.windows.net' (identity auth only)."
    )

    def resource(self) -> EventHubResource:
        """The :class:`EventHubResource` this describes (secret through ``dg.EnvVar``)."""
        credential: EventHubConnectionString | EventHubIdentity
        if self.credential_type == "connection_string":
            credential = EventHubConnectionString(
                connection_string=dg.EnvVar(self.connection_string_env)
            )
        else:
            if not self.fully_qualified_namespace:
                raise ConfigurationError(
                    "eventhub.fully_qualified_namespace: required with credential_type="
                    "'default_azure_credential', e.g. 'myns.servicebus.windows.net'"
                )
            credential = EventHubIdentity(fully_qualified_namespace=self.fully_qualified_namespace)
        return EventHubResource(
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
            credential=credential,
        )


class StoreModel(dg.Resolvable, dg.Model):
    """The Blob container for leases and checkpoints."""

    container: str = Field(description="Blob container name, e.g. 'eventhub-state'.")
    credential_type: Literal["connection_string", "default_azure_credential"] = Field(
        default="connection_string",
        description="'connection_string' (from connection_string_env) or "
        "'default_azure_credential' (with account_url).",
    )
    connection_string_env: str = Field(
        default="AZURE_STORAGE_CONNECTION_STRING",
        description="Name of the environment variable holding the connection string.",
    )
    account_url: str | None = Field(
        default=None,
        description="e.g. 'https://myaccount.blob.core.windows.net' (identity auth only).",
    )
    create_container: bool = Field(default=True, description="Create the container if missing.")

    def resource(self) -> PartitionStoreResource:
        """The :class:`PartitionStoreResource` this describes (secret through ``dg.EnvVar``)."""
        credential: StoreConnectionString | StoreIdentity
        if self.credential_type == "connection_string":
            credential = StoreConnectionString(
                connection_string=dg.EnvVar(self.connection_string_env)
            )
        else:
            if not self.account_url:
                raise ConfigurationError(
                    "store.account_url: required with credential_type='default_azure_credential'"
                    ", e.g. 'https://myaccount.blob.core.windows.net'"
                )
            credential = StoreIdentity(account_url=self.account_url)
        return PartitionStoreResource(
            container=self.container, create_container=self.create_container, credential=credential
        )


class SinkModel(dg.Resolvable, dg.Model):
    """Where events land."""

    format: str = Field(default="parquet", description="'parquet', 'delta', 'deltalake', ...")
    path: str | None = Field(default=None, description="Output folder or URI.")
    table: str | None = Field(default=None, description="Spark table (instead of path).")
    partition_by: list[str] = Field(default_factory=list, description="Extra partition columns.")
    shared: bool = Field(
        default=False,
        description="The local path is a volume every Spark node mounts at the same place "
        "(otherwise a local path is refused on a non-local Spark).",
    )

    def resource(self) -> SinkResource:
        """The :class:`SinkResource` this describes."""
        return SinkResource(
            format=self.format,
            path=self.path,
            table=self.table,
            partition_by=self.partition_by,
            shared=self.shared,
        )


class ScheduleModel(dg.Resolvable, dg.Model):
    """Every N minutes, K runs over every partition."""

    every_minutes: int = Field(default=5, description="Period in minutes (divides an hour/day).")
    runs: int = Field(default=1, description="K: parallel runs per tick; they share the work.")
    cron_schedule: str | None = Field(default=None, description="Cron string (overrides N).")
    running: bool = Field(default=False, description="Start the schedule switched on.")


class LagCheckModel(dg.Resolvable, dg.Model):
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


class EventHubIngestComponent(dg.Component, dg.Model, dg.Resolvable):
    """Land an Azure Event Hub into a Spark sink, exactly once, in scheduled Dagster batches.

    Builds a partitioned asset (one partition per hub partition, with a lag check), its job, a
    schedule launching K parallel runs, a sensor syncing dynamic partitions with the hub, and the
    resources (Event Hub, partition store, sink, local PySpark).
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
    strategy: str = Field(
        default="balanced",
        description="Balancing strategy: greedy, balanced, eph, equal, jump_hash, delay_race.",
    )
    max_events_per_partition: int = Field(
        default=100_000, description="Upper bound of events read per partition in one run."
    )
    lease_expiry_seconds: float = Field(
        default=60.0, description="A lease not renewed for this long may be taken over."
    )
    on_data_loss: Literal["fail", "skip"] = Field(
        default="fail", description="When events expired before being read: fail, or skip."
    )
    receive_timeout_seconds: float = Field(default=30.0, description="Event Hubs receive timeout.")
    prefetch: int = Field(default=300, description="Events prefetched per receiver.")
    max_readers_per_partition: int = Field(
        default=1, description="Spark input partitions per Event Hub partition range."
    )
    run_timeout_seconds: float | None = Field(
        default=None,
        description="Stop waiting for live peers after this long (the run then fails naming the "
        "partitions not up to date); unset waits while peers renew their leases.",
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
    spark_config: dict[str, str] = Field(
        default_factory=dict, description="Spark settings over the local loopback defaults."
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

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The asset, job, schedule, sensor and resources this component declares."""
        lag = self.lag_check or LagCheckModel()
        options = IngestOptions(
            strategy=self.strategy,
            max_events_per_partition=self.max_events_per_partition,
            lease_expiry_seconds=self.lease_expiry_seconds,
            on_data_loss=self.on_data_loss,
            receive_timeout_seconds=self.receive_timeout_seconds,
            prefetch=self.prefetch,
            max_readers_per_partition=self.max_readers_per_partition,
            max_lag_events=lag.max_lag_events,
            max_lag_seconds=lag.max_lag_seconds,
            lag_check_severity=lag.severity,
            run_timeout_seconds=self.run_timeout_seconds,
            pool=self.pool,
            freshness_fail_minutes=self.freshness_fail_minutes,
        )
        return build_eventhub_ingest_defs(
            key=self.asset_key.split("/"),
            eventhub=self.eventhub.resource(),
            partition_store=self.store.resource(),
            sink=self.sink.resource(),
            pyspark=local_pyspark_resource(self.spark_config, remote=self.spark_remote),
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
) -> dg.Definitions:
    """Everything for one hub in Python: asset (+ lag check), job, schedule, sensor, resources.

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
        opts = dataclasses.replace(opts, freshness_fail_minutes=3.0 * schedule.every_minutes)
    asset = build_eventhub_ingest_asset(
        key=asset_key,
        partition_ids=partition_ids,
        options=opts,
        resource_keys=keys,
        group_name=group_name,
        description=description,
        backfill_max_partitions_per_run=backfill_max_partitions_per_run,
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
