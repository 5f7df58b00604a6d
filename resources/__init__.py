"""resources: clients, the partition store, settings and errors (imports nothing above it).

The public names load lazily (PEP 562): ``import resources.errors`` (the CLI's first import)
must not pull in pyspark, pyarrow and the storage SDK, so a run with nothing to read exits in
well under a second of imports (issue 15).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "AzureBlobBackend": "resources.blob_store",
    "InMemoryBackend": "resources.memory_store",
    "local_spark_session": "resources.spark_session",
    "DataGap": "resources.spark_source",
    "EventHubsDataSource": "resources.spark_source",
    "EventPosition": "resources.spark_source",
    "PartitionRange": "resources.spark_source",
    "ReadOptions": "resources.spark_source",
    "ReadPlan": "resources.spark_source",
    "plan_read": "resources.spark_source",
    "read_eventhubs": "resources.spark_source",
    "register_eventhubs_source": "resources.spark_source",
    "BlobBackend": "resources.store",
    "BlobRecord": "resources.store",
    "Checkpoint": "resources.store",
    "HubRef": "resources.store",
    "Intent": "resources.store",
    "Ownership": "resources.store",
    "PartitionStore": "resources.store",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'resources' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
