"""The one configuration model: every setting declared once, with its default, limits and help.

Every surface reads these classes: the ``ehingest`` YAML (``cli/config.py``), the Dagster
Component's ``defs.yaml`` and resources (``dagster_project/``), the asset's run config, and the
run itself (:class:`dagster_eventhub_ingest.ops.run.settings.IngestSettings`, the value a run
gets, extends :class:`IngestConfig`). Everything that can be checked without the network is
checked here, at load: names of strategies and formats, the sink's ``partition_by`` columns
against the output schema, reader limits, numbers. Unknown keys are rejected with a
did-you-mean, or with the block they belong in.

Build from a plain dict (YAML, a test)::

    config = PipelineConfig.from_dict({
        "eventhub": {"eventhub_name": "telemetry"},        # connection string from
        "store": {"container": "ehingest-state"},          # EVENTHUB_CONNECTION_STRING and
        "sink": {"path": "/data/telemetry"},               # AZURE_STORAGE_CONNECTION_STRING
        "strategy": "balanced",
    })
    settings = IngestSettings.from_config(config)  # from dagster_eventhub_ingest.ops.run

Credentials have one shape everywhere: a connection string named by an environment variable, or
``DefaultAzureCredential`` with its options::

    eventhub:
      eventhub_name: telemetry
      credential: {connection_string_env: EVENTHUB_CONNECTION_STRING}
    store:
      container: ehingest-state
      credential:
        credential_type: default_azure_credential
        account_url: https://myaccount.blob.core.windows.net
        managed_identity_client_id: 00000000-0000-0000-0000-000000000000

YAML text and ``${VAR}`` references are read by :func:`load_yaml` and :func:`expand_env`,
which refuse alias bombs and variables that are empty inside a longer value.

Errors raised by :meth:`StrictModel.from_dict` are
:class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` whose message names the key
path, the (redacted) value and what is valid.
"""

from __future__ import annotations

from dagster_eventhub_ingest.resources.config._credentials import (
    EventHubConnectionStringCredential,
    EventHubIdentityCredential,
    IdentityOptions,
    StoreConnectionStringCredential,
    StoreIdentityCredential,
)
from dagster_eventhub_ingest.resources.config._dagster import (
    AssetOptions,
    AssetPolicies,
    IngestAssetConfig,
    LagCheckOptions,
    LagSeverity,
    ScheduleOptions,
)
from dagster_eventhub_ingest.resources.config._model import (
    OneLineErrors,
    StrictModel,
    format_validation_error,
    setting,
)
from dagster_eventhub_ingest.resources.config._places import EventHubConfig, StoreConfig
from dagster_eventhub_ingest.resources.config._run import (
    ON_CHECKPOINT_AHEAD,
    STRATEGY_NAMES,
    STRATEGY_OPTIONS,
    DelayRaceOptions,
    IngestConfig,
    OnCheckpointAhead,
    PipelineConfig,
    StrategyName,
    check_strategy_options,
)
from dagster_eventhub_ingest.resources.config._sink import OUTPUT_COLUMNS, SinkConfig
from dagster_eventhub_ingest.resources.config._sources import (
    ENV_REFERENCE,
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    expand_env,
    load_yaml,
)
from dagster_eventhub_ingest.resources.config._spark import (
    DEFAULT_SPARK_MASTER,
    SparkConfig,
    spark_conf_strings,
)
from dagster_eventhub_ingest.resources.limits import (
    MAX_PREFETCH,
    MAX_READERS_PER_PARTITION,
    ON_DATA_LOSS,
    OnDataLoss,
)
from dagster_eventhub_ingest.resources.sink import (
    DELTALAKE_FORMAT,
    PARTITION_COLUMNS,
    SPARK_FORMATS,
)

__all__ = [
    "DEFAULT_SPARK_MASTER",
    "DELTALAKE_FORMAT",
    "ENV_REFERENCE",
    "MAX_PREFETCH",
    "MAX_READERS_PER_PARTITION",
    "MAX_YAML_DEPTH",
    "MAX_YAML_VALUES",
    "ON_CHECKPOINT_AHEAD",
    "ON_DATA_LOSS",
    "OUTPUT_COLUMNS",
    "PARTITION_COLUMNS",
    "SPARK_FORMATS",
    "STRATEGY_NAMES",
    "STRATEGY_OPTIONS",
    "AssetOptions",
    "AssetPolicies",
    "DelayRaceOptions",
    "EventHubConfig",
    "EventHubConnectionStringCredential",
    "EventHubIdentityCredential",
    "IdentityOptions",
    "IngestAssetConfig",
    "IngestConfig",
    "LagCheckOptions",
    "LagSeverity",
    "OnCheckpointAhead",
    "OnDataLoss",
    "OneLineErrors",
    "PipelineConfig",
    "ScheduleOptions",
    "SinkConfig",
    "SparkConfig",
    "StoreConfig",
    "StoreConnectionStringCredential",
    "StoreIdentityCredential",
    "StrategyName",
    "StrictModel",
    "check_strategy_options",
    "expand_env",
    "format_validation_error",
    "load_yaml",
    "setting",
    "spark_conf_strings",
]
