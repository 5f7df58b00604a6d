"""resources: values and adapters, one folder per concept (imports nothing above it).

- :mod:`.errors`: the one exception tree; :mod:`.ranges`: the one sequence-number range type;
- :mod:`.config`: the one configuration model (every setting declared once);
- :mod:`.settings`, :mod:`.sink`, :mod:`.store.settings`: the frozen values a run and its Spark
  executors are given;
- :mod:`.azure`: the Azure SDKs' adapters (the Event Hubs management client among them);
  :mod:`.store`: the partition store;
- :mod:`.spark`: the Spark runtime; :mod:`.eventhubs_source`: the ``eventhubs`` data source;
  :mod:`.amqp`: the reader's own AMQP client.

The public names load lazily (PEP 562): ``import dagster_eventhub_ingest.resources.errors`` (the
CLI's first import) must not pull in pyspark, pyarrow and the storage SDK, so a run with nothing
to read exits in well under a second of imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.eventhubs_source import (
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
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session
    from dagster_eventhub_ingest.resources.store import (
        AzureBlobBackend,
        BlobBackend,
        BlobRecord,
        Checkpoint,
        HubRef,
        InMemoryBackend,
        Intent,
        Ownership,
        PartitionStore,
        StoreSettings,
    )

_HOMES = {
    "AzureBlobBackend": "dagster_eventhub_ingest.resources.store",
    "InMemoryBackend": "dagster_eventhub_ingest.resources.store",
    "local_spark_session": "dagster_eventhub_ingest.resources.spark.session",
    "DataGap": "dagster_eventhub_ingest.resources.eventhubs_source",
    "EventHubsDataSource": "dagster_eventhub_ingest.resources.eventhubs_source",
    "EventPosition": "dagster_eventhub_ingest.resources.eventhubs_source",
    "PartitionRange": "dagster_eventhub_ingest.resources.eventhubs_source",
    "ReadOptions": "dagster_eventhub_ingest.resources.eventhubs_source",
    "ReadPlan": "dagster_eventhub_ingest.resources.eventhubs_source",
    "plan_read": "dagster_eventhub_ingest.resources.eventhubs_source",
    "read_eventhubs": "dagster_eventhub_ingest.resources.eventhubs_source",
    "register_eventhubs_source": "dagster_eventhub_ingest.resources.eventhubs_source",
    "BlobBackend": "dagster_eventhub_ingest.resources.store",
    "BlobRecord": "dagster_eventhub_ingest.resources.store",
    "Checkpoint": "dagster_eventhub_ingest.resources.store",
    "HubRef": "dagster_eventhub_ingest.resources.store",
    "Intent": "dagster_eventhub_ingest.resources.store",
    "Ownership": "dagster_eventhub_ingest.resources.store",
    "PartitionStore": "dagster_eventhub_ingest.resources.store",
    "StoreSettings": "dagster_eventhub_ingest.resources.store",
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
    "StoreSettings",
    "local_spark_session",
    "plan_read",
    "read_eventhubs",
    "register_eventhubs_source",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
