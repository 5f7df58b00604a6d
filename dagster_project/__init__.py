"""dagster_project: the Dagster integration (resources, asset, schedule, sensor, Component).

Import the pieces from here to build your own Definitions, or declare the
:class:`EventHubIngestComponent` in a ``defs.yaml``; see docs/dagster.md.
"""

from dagster_eventhub_ingest.dagster_project.assets import (
    ReplayConfig,
    ResourceKeys,
    build_eventhub_ingest_asset,
    dagster_run_is_dead,
)
from dagster_eventhub_ingest.dagster_project.checks import LAG_CHECK_NAME, lag_check_result
from dagster_eventhub_ingest.dagster_project.component import (
    EventHubIngestComponent,
    build_eventhub_ingest_defs,
)
from dagster_eventhub_ingest.dagster_project.resources import (
    EventHubConnectionString,
    EventHubIdentity,
    EventHubResource,
    LocalPySparkResource,
    PartitionStoreResource,
    SinkResource,
    StoreConnectionString,
    StoreIdentity,
    local_pyspark_resource,
)
from dagster_eventhub_ingest.dagster_project.schedules import (
    build_ingest_job,
    build_ingest_schedule,
)
from dagster_eventhub_ingest.dagster_project.sensors import build_partition_sync_sensor
from dagster_eventhub_ingest.resources.config import IngestAssetConfig

__all__ = [
    "LAG_CHECK_NAME",
    "EventHubConnectionString",
    "EventHubIdentity",
    "EventHubIngestComponent",
    "EventHubResource",
    "IngestAssetConfig",
    "LocalPySparkResource",
    "PartitionStoreResource",
    "ReplayConfig",
    "ResourceKeys",
    "SinkResource",
    "StoreConnectionString",
    "StoreIdentity",
    "build_eventhub_ingest_asset",
    "build_eventhub_ingest_defs",
    "build_ingest_job",
    "build_ingest_schedule",
    "build_partition_sync_sensor",
    "dagster_run_is_dead",
    "lag_check_result",
    "local_pyspark_resource",
]
