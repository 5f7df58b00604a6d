"""resources: clients, the partition store, settings and errors (imports nothing above it)."""

from resources.blob_store import AzureBlobBackend
from resources.memory_store import InMemoryBackend
from resources.spark_session import local_spark_session
from resources.spark_source import (
    DataGap,
    EventHubsDataSource,
    EventPosition,
    PartitionRange,
    ReadOptions,
    ReadPlan,
    plan_read,
    read_eventhubs,
    register_eventhubs_source,
)
from resources.store import (
    BlobBackend,
    BlobRecord,
    Checkpoint,
    HubRef,
    Intent,
    Ownership,
    PartitionStore,
)

__all__ = [
    "AzureBlobBackend",
    "BlobBackend",
    "BlobRecord",
    "Checkpoint",
    "DataGap",
    "EventHubsDataSource",
    "EventPosition",
    "HubRef",
    "InMemoryBackend",
    "Intent",
    "Ownership",
    "PartitionRange",
    "PartitionStore",
    "ReadOptions",
    "ReadPlan",
    "local_spark_session",
    "plan_read",
    "read_eventhubs",
    "register_eventhubs_source",
]
