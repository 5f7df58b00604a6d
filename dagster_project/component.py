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

import warnings
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from dagster_eventhub_ingest.dagster_project.assets import (
    IngestOptions,
    ResourceKeys,
    build_eventhub_ingest_asset,
)
from dagster_eventhub_ingest.dagster_project.checks import (
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
    ConfigDeprecationWarning,
    EventHubConfig,
    LagCheckOptions,
    RunOptions,
    ScheduleOptions,
    SinkConfig,
    SparkConfig,
    StoreConfig,
    format_validation_error,
    spark_conf_strings,
    unknown_key_message,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError

__all__ = [
    "EventHubIngestComponent",
    "EventHubModel",
    "LagCheckModel",
    "ScheduleModel",
    "SinkModel",
    "SparkModel",
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
    """defs.yaml's errors as the CLI words them: one line naming the key, value and what is valid.

    Dagster validates the YAML against a model derived from the class before anything of ours
    runs. Our key check sits in front of that derived model: it sets unknown keys aside (so
    Dagster's schema check does not dump pydantic's errors for them, one per branch of a
    template-or-block union) and :meth:`resolve_from_model` reports them as one line with a
    did-you-mean, at the key's file and line. Values are checked when Dagster builds the class
    from the resolved YAML: a failure there becomes one line per error with the key's full path
    (``sink.format: ...``) instead of pydantic's dump.
    """

    @classmethod
    def resolve_from_model(cls, context: dg.ResolutionContext, model: BaseModel) -> Any:
        unknown = getattr(model, "_unknown_keys", None)
        if unknown:
            valid = _shown_keys(cls)  # type: ignore[arg-type]
            message = "; ".join(unknown_key_message(key, valid) for key in sorted(unknown))
            where = ".".join(str(part) for part in context.path)
            message = f"{where}.{message}" if where else message
        else:
            try:
                return super().resolve_from_model(context, model)  # type: ignore[misc]
            except ValidationError as exc:
                where = ".".join(str(part) for part in context.path)
                message = format_validation_error(exc, where)
        if context.path:
            # A nested block (sink:, schedule:, ...): Dagster adds the file, line and snippet.
            raise context.build_resolve_fn_exc(
                [message + "\n"], field_name=str(context.path[-1]), model=model
            )
        raise ConfigurationError(message)

    @classmethod
    def model(cls) -> type[BaseModel]:
        if cls not in _KEY_CHECKED:
            base: type[BaseModel] = super().model()  # type: ignore[misc]
            valid = set(base.model_fields)

            def set_aside(data: Any, handler: Any) -> Any:
                unknown = (
                    {str(k): v for k, v in data.items() if k not in valid}
                    if isinstance(data, Mapping)
                    else {}
                )
                if unknown:
                    data = {k: v for k, v in data.items() if k in valid}
                instance = handler(data)
                if unknown:
                    instance._unknown_keys = unknown
                return instance

            derived = create_model(
                base.__name__,
                __base__=base,
                __validators__={
                    "_did_you_mean": model_validator(mode="wrap")(set_aside)  # type: ignore[arg-type,dict-item]
                },
                _unknown_keys=(dict[str, Any], PrivateAttr(default_factory=dict)),
            )
            # Dagster records each YAML key's file and line on the attribute of that name.
            setattr(derived, "__getattr__", _unknown_key_attribute)  # noqa: B010
            _KEY_CHECKED[cls] = derived
        return _KEY_CHECKED[cls]


def _unknown_key_attribute(self: BaseModel, name: str) -> Any:
    """An unknown key's value, set aside by the key check (then pydantic's own lookup)."""
    private = object.__getattribute__(self, "__pydantic_private__") or {}
    unknown = private.get("_unknown_keys") or {}
    if name in unknown:
        return unknown[name]
    return getattr(BaseModel, "__getattr__")(self, name)  # noqa: B009 (pydantic's, not typed)


def _shown_keys(model: type[BaseModel]) -> list[str]:
    """The keys an unknown-key message offers: every field but the deprecated spellings."""
    return [
        name
        for name, info in model.model_fields.items()
        if not (info.description or "").startswith("Deprecated")
    ]


class EventHubModel(_KeyChecked, dg.Resolvable, dg.Model, EventHubConfig):
    """The Event Hub to read (:class:`dagster_eventhub_ingest.resources.config.EventHubConfig`,
    templates resolved)."""

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
    """The Blob container for leases and checkpoints
    (:class:`dagster_eventhub_ingest.resources.config.StoreConfig`)."""

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
    """Where events land (:class:`dagster_eventhub_ingest.resources.config.SinkConfig`)."""

    def resource(self) -> SinkResource:
        """The :class:`SinkResource` this describes."""
        return SinkResource.from_config(self)


class ScheduleModel(_KeyChecked, dg.Resolvable, dg.Model, ScheduleOptions):
    """Every N minutes, K runs over every partition
    (:class:`dagster_eventhub_ingest.resources.config.ScheduleOptions`)."""


class LagCheckModel(_KeyChecked, dg.Resolvable, dg.Model, LagCheckOptions):
    """The lag check and its sensor
    (:class:`dagster_eventhub_ingest.resources.config.LagCheckOptions`)."""


def _resolve_spark_conf(context: dg.ResolutionContext, value: Any) -> dict[str, str]:
    return spark_conf_strings(context.resolve_value(value))


class SparkModel(_KeyChecked, dg.Resolvable, dg.Model, SparkConfig):
    """How Spark starts (:class:`dagster_eventhub_ingest.resources.config.SparkConfig`, the CLI
    file's ``spark:``)."""

    # YAML writes numbers and booleans bare (shuffle partitions: 4); Spark gets strings.
    conf: Annotated[
        dict[str, str],
        dg.Resolver(
            _resolve_spark_conf,
            model_field_type=dict[str, str | int | float | bool],
            description=SparkConfig.model_fields["conf"].description,
        ),
    ] = Field(default_factory=dict, description=SparkConfig.model_fields["conf"].description)

    def resource(self) -> LocalPySparkResource:
        """The PySpark resource this describes."""
        return spark_resource(self)


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


@dg.scaffold_with(EventHubIngestScaffolder)
class EventHubIngestComponent(
    _KeyChecked, dg.Component, dg.Model, RunOptions, AssetOptions, dg.Resolvable
):
    """Land an Azure Event Hub into a Spark sink, exactly once, in scheduled Dagster batches.

    Builds a partitioned asset (one partition per hub partition, with a lag check), its job, a
    schedule launching K parallel runs, a sensor syncing dynamic partitions with the hub, and the
    resources (Event Hub, partition store, sink, local PySpark). The run options (strategy,
    max_events_per_partition, ...) are :class:`dagster_eventhub_ingest.resources.config.RunOptions`,
    the same keys as the ``ehingest`` config file; everything is validated when the definitions
    load.
    """

    eventhub: EventHubModel = Field(description="The Event Hub to read.")
    store: StoreModel = Field(description="The Blob container for leases and checkpoints.")
    sink: SinkModel = Field(description="Where events land.")
    partitions: ResolvedPartitionIds = None
    schedule: ScheduleModel | None = Field(default=None, description="Scheduled runs (optional).")
    lag_check: LagCheckModel | None = Field(default=None, description="Lag check (optional).")
    spark: SparkModel | None = Field(
        default=None,
        description="How Spark starts (master or remote, conf, app_name, ship_code), as in the "
        "ehingest config file; unset: a local session with loopback defaults.",
    )
    # Old spellings (one release): moved into ``spark`` with a deprecation warning.
    spark_config: dict[str, str | int | float | bool] | None = Field(
        default=None, description="Deprecated: write spark.conf (and spark.master)."
    )
    spark_remote: str | None = Field(default=None, description="Deprecated: write spark.remote.")

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Accept the old ``spark_config`` / ``spark_remote`` keys (one release)."""
        old = [k for k in ("spark_config", "spark_remote") if data.get(k) is not None]
        for key in ("spark_config", "spark_remote"):
            if key not in old:
                data.pop(key, None)  # declared (so defs.yaml may still name them), but unset
        if not old:
            return data
        if data.get("spark") is not None:
            raise ValueError(
                f"give the Spark settings in one place: move {', '.join(old)} into spark"
            )
        conf = dict(data.pop("spark_config", None) or {})
        spark: dict[str, Any] = {}
        if "spark.master" in conf:
            spark["master"] = conf.pop("spark.master")
        if conf:
            spark["conf"] = conf
        if "spark_remote" in data:
            spark["remote"] = data.pop("spark_remote")
        warnings.warn(
            f"{', '.join(old)} are deprecated; write spark: {spark} (the old keys stop working "
            "in the next release)",
            ConfigDeprecationWarning,
            stacklevel=2,
        )
        data["spark"] = SparkModel(**spark)
        return data

    @field_validator("partitions", mode="before")
    @classmethod
    def _coerce_partitions(cls, value: Any) -> Any:
        return coerce_partition_ids(value)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The asset, job, schedule, sensor and resources this component declares."""
        options = IngestOptions(
            **self.run_options().model_dump(),
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
    options: IngestOptions | None = None,
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
            schedule=ScheduleModel(every_minutes=5, runs=2),
        )
    """
    asset_key = dg.AssetKey.from_coercible(key)
    keys = ResourceKeys.prefixed(asset_key.to_python_identifier())
    opts = options or IngestOptions()
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
        checks.append(
            build_lag_check(
                asset_key,
                lag,
                eventhub_key=keys.eventhub,
                partition_store_key=keys.partition_store,
                partition_ids=partition_ids,
                lease_expiry_seconds=opts.lease_expiry_seconds,
            )
        )
        sensors.append(
            build_lag_sensor(
                asset_key,
                lag,
                eventhub_key=keys.eventhub,
                partition_store_key=keys.partition_store,
                partition_ids=partition_ids,
                lease_expiry_seconds=opts.lease_expiry_seconds,
                every_minutes=lag.every_minutes,
                running=lag.running,
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
