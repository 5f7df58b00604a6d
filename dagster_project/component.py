"""The ``EventHubIngestComponent``: the whole pipeline declared in a ``defs.yaml``.

Registered for ``dg`` under the ``dagster_dg_cli.registry_modules`` entry point (see
pyproject.toml) by its one name, ``dagster_eventhub_ingest.EventHubIngestComponent``: ``dg list
components`` shows it and ``dg scaffold defs dagster_eventhub_ingest.EventHubIngestComponent
<name>`` writes a commented ``defs.yaml`` (:mod:`.scaffold`)::

    type: dagster_eventhub_ingest.EventHubIngestComponent
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

The keys are those of ``resources/config/`` (the ``ehingest`` config file takes the same).
Secrets are named by environment variable (``connection_string_env``) and reach Dagster as
``dg.EnvVar``: the UI shows the variable's name, never its value. Everything checkable without
the network is checked when the definitions load (``dg check defs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import dagster as dg
from pydantic import BaseModel, ValidationError, field_validator
from typing_extensions import Self

from dagster_eventhub_ingest.dagster_project.assets import (
    ResourceKeys,
    build_eventhub_ingest_asset,
)
from dagster_eventhub_ingest.dagster_project.checks import (
    LagProbe,
    build_freshness_checks,
    build_lag_check,
    build_lag_sensor,
)
from dagster_eventhub_ingest.dagster_project.metadata import definition_metadata
from dagster_eventhub_ingest.dagster_project.resources import (
    EventHubResource,
    LocalPySparkResource,
    PartitionStoreResource,
    SinkResource,
    local_pyspark_resource,
    spark_resource,
)
from dagster_eventhub_ingest.dagster_project.scaffold import EventHubIngestScaffolder
from dagster_eventhub_ingest.dagster_project.schedules import (
    build_ingest_job,
    build_ingest_schedule,
)
from dagster_eventhub_ingest.dagster_project.sensors import build_partition_sync_sensor
from dagster_eventhub_ingest.resources.config import (
    AssetOptions,
    EventHubConfig,
    IngestAssetConfig,
    IngestConfig,
    LagCheckOptions,
    ScheduleOptions,
    SinkConfig,
    SparkConfig,
    StoreConfig,
    format_validation_error,
    setting,
    spark_conf_strings,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError

__all__ = [
    "EventHub",
    "EventHubIngestComponent",
    "LagCheck",
    "Schedule",
    "Sink",
    "Spark",
    "Store",
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


class _Block(dg.Resolvable):
    """A defs.yaml block whose bad values read as the CLI words them: one line per error with
    the key's full path (``sink.format: 'parqet' is not a known format; did you mean ...``),
    instead of pydantic's dump, at the key's file and line."""

    @classmethod
    def resolve_from_model(cls, context: dg.ResolutionContext, model: BaseModel) -> Self:
        try:
            return super().resolve_from_model(context, model)
        except ValidationError as exc:
            where = ".".join(str(part) for part in context.path)
            message = format_validation_error(exc, where)
        if context.path:
            # A nested block (sink:, schedule:, ...): Dagster adds the file, line and snippet.
            raise context.build_resolve_fn_exc(
                [message + "\n"], field_name=str(context.path[-1]), model=model
            )
        raise ConfigurationError(message)


# The block classes are named after their defs.yaml key; Dagster's schema names each one
# ``<class>Model`` (EventHubModel, StoreModel, ...).


class EventHub(_Block, dg.Model, EventHubConfig):
    """The Event Hub to read and the consumer group whose checkpoints this pipeline owns."""

    def resource(self) -> EventHubResource:
        """The EventHubResource this describes (the secret through ``dg.EnvVar``)."""
        return EventHubResource.from_config(self)


class Store(_Block, dg.Model, StoreConfig):
    """The Blob container holding leases and checkpoints."""

    def resource(self) -> PartitionStoreResource:
        """The PartitionStoreResource this describes (the secret through ``dg.EnvVar``)."""
        return PartitionStoreResource.from_config(self)


class Sink(_Block, dg.Model, SinkConfig):
    """Where events land: a path or a table, in a Spark format or deltalake."""

    def resource(self) -> SinkResource:
        """The SinkResource this describes."""
        return SinkResource.from_config(self)


class Schedule(_Block, dg.Model, ScheduleOptions):
    """Every N minutes (or on a cron string), K runs over every partition."""


class LagCheck(_Block, dg.Model, LagCheckOptions):
    """The lag check's thresholds and the sensor that evaluates it without a run."""


def _resolve_spark_conf(context: dg.ResolutionContext, value: Any) -> dict[str, str]:
    return spark_conf_strings(context.resolve_value(value))


class Spark(_Block, dg.Model, SparkConfig):
    """How Spark starts: a local master, a cluster master or Spark Connect, and its conf."""

    # YAML writes numbers and booleans bare (shuffle partitions: 4); Spark gets strings.
    conf: Annotated[
        dict[str, str],
        dg.Resolver(
            _resolve_spark_conf,
            model_field_type=dict[str, str | int | float | bool],
            description=SparkConfig.model_fields["conf"].description,
        ),
    ] = setting(default_factory=dict, description=str(SparkConfig.model_fields["conf"].description))

    def resource(self) -> LocalPySparkResource:
        """The PySpark resource this describes."""
        return spark_resource(self)


def _resolve_partitions(context: dg.ResolutionContext, value: Any) -> list[str] | None:
    return coerce_partition_ids(context.resolve_value(value))


_PARTITIONS = (
    "Static partition ids of the hub, e.g. [0, 1, 2, 3]; default: none, the partitions are "
    "dynamic and a sensor adds the hub's ids as they appear."
)

ResolvedPartitionIds = Annotated[
    list[str] | None,
    dg.Resolver(
        _resolve_partitions, model_field_type=list[str | int] | None, description=_PARTITIONS
    ),
]


@dg.scaffold_with(EventHubIngestScaffolder)
class EventHubIngestComponent(_Block, dg.Component, dg.Model, IngestConfig, AssetOptions):
    """Land an Azure Event Hub into a Spark sink, exactly once, in scheduled Dagster batches.

    Builds a partitioned asset (one partition per hub partition) with its lag check, its job, a
    schedule launching K parallel runs, a sensor syncing dynamic partitions with the hub, and
    the resources (Event Hub, partition store, sink, Spark). The run options (strategy,
    max_events_per_partition, ...) are the same keys as the ehingest config file; everything is
    checked when the definitions load (dg check defs).
    """

    eventhub: EventHub = setting(description="The Event Hub to read (required).")
    store: Store = setting(description="The Blob container for leases and checkpoints (required).")
    sink: Sink = setting(description="Where events land (required).")
    partitions: ResolvedPartitionIds = setting(default=None, description=_PARTITIONS)
    schedule: Schedule | None = setting(
        default=None,
        description="Scheduled runs, e.g. {every_minutes: 5, runs: 2}; default: none.",
    )
    lag_check: LagCheck | None = setting(
        default=None,
        description="The lag check and its sensor, e.g. {max_lag_events: 10000}; default: no "
        "lag check.",
    )
    spark: Spark | None = setting(
        default=None,
        description="How Spark starts (master or remote, conf, app_name, ship_code), as in the "
        "ehingest config file, e.g. {master: 'spark://host:7077'}; default: a local session "
        "on every core with loopback settings.",
    )

    @field_validator("partitions", mode="before")
    @classmethod
    def _coerce_partitions(cls, value: Any) -> Any:
        return coerce_partition_ids(value)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The asset, checks, job, schedule, sensors and resources this component declares."""
        options = IngestAssetConfig(
            **self.ingest_config().model_dump(),
            pool=self.pool,
            freshness_fail_minutes=self.freshness_fail_minutes,
            lag_check=self.lag_check,
        )
        return build_eventhub_ingest_defs(
            key=self.asset_key.split("/"),
            eventhub=self.eventhub.resource(),
            partition_store=self.store.resource(),
            sink=self.sink.resource(),
            pyspark=self.spark.resource() if self.spark is not None else None,
            partition_ids=self.partitions,
            options=options,
            group_name=self.group_name,
            description=self.description,
            schedule=self.schedule,
            partition_sync_interval_seconds=self.partition_sync_interval_seconds,
            backfill_max_partitions_per_run=self.backfill_max_partitions_per_run,
        )


def build_eventhub_ingest_defs(
    *,
    key: str | Sequence[str] | dg.AssetKey,
    eventhub: EventHubResource,
    partition_store: PartitionStoreResource,
    sink: SinkResource,
    pyspark: Any | None = None,
    partition_ids: Sequence[str] | None = None,
    options: IngestAssetConfig | None = None,
    group_name: str | None = None,
    description: str | None = None,
    schedule: ScheduleOptions | None = None,
    partition_sync_interval_seconds: int = AssetOptions.model_fields[
        "partition_sync_interval_seconds"
    ].default,
    backfill_max_partitions_per_run: int | None = None,
    retry_policy: dg.RetryPolicy | None = None,
) -> dg.Definitions:
    """Everything for one hub in Python: asset (+ lag check), job, schedule, sensor, resources.

    ``retry_policy`` replaces
    :func:`dagster_eventhub_ingest.dagster_project.assets.default_retry_policy` (transient errors
    only; configuration and data-loss errors are never retried).

    Resource keys are prefixed by the asset name so several hubs can live in one project.

    Example::

        defs = build_eventhub_ingest_defs(
            key="telemetry",
            eventhub=EventHubResource(eventhub_name="telemetry", credential=...),
            partition_store=PartitionStoreResource(container="eventhub-state", credential=...),
            sink=SinkResource(path="/data/telemetry"),
            partition_ids=["0", "1", "2", "3"],
            schedule=ScheduleOptions(every_minutes=5, runs=2),
        )
    """
    asset_key = dg.AssetKey.from_coercible(key)
    keys = ResourceKeys.prefixed(asset_key.to_python_identifier())
    opts = options or IngestAssetConfig()
    if schedule is not None and opts.freshness_fail_minutes is None:
        # Fresh means caught up with the hub as of three schedule periods ago.
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
    checks: list[dg.AssetChecksDefinition] = []
    lag = opts.lag_thresholds
    if lag is not None:
        probe = LagProbe(
            asset_key,
            lag,
            eventhub_key=keys.eventhub,
            partition_store_key=keys.partition_store,
            partition_ids=partition_ids,
            lease_expiry_seconds=opts.lease_expiry_seconds,
        )
        checks.append(build_lag_check(probe))
        sensors.append(
            build_lag_sensor(probe, every_minutes=lag.every_minutes, running=lag.running)
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
    if opts.freshness_fail_minutes is not None:
        freshness, freshness_sensor = build_freshness_checks(
            asset_key,
            opts.freshness_fail_minutes,
            sensor_name=f"{asset_key.to_python_identifier()}_freshness",
        )
        checks.extend(freshness)
        sensors.append(freshness_sensor)
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
        asset_checks=checks,
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
