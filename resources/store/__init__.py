"""The partition store: leases, fenced checkpoints and write-ahead intents over blob CAS.

The logic is written once (:mod:`.partition_store`) over a five-call blob protocol
(:class:`BlobBackend`, :mod:`.records`), with two backends that keep Azure Blob's compare-and-set
semantics: Azure Blob Storage (:mod:`.azure_blob`, its retries in :mod:`.retry`) and an in-memory
twin for pure tests and the simulator (:mod:`.memory`). :mod:`.settings` says where the store is.

The names load lazily (PEP 562): the records travel to Spark executors, which need not import
the storage SDK the Azure backend stands on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
    from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.records import (
        BlobBackend,
        BlobRecord,
        Checkpoint,
        HubRef,
        Intent,
        Ownership,
    )
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

_HOMES = {
    "AzureBlobBackend": ".azure_blob",
    "InMemoryBackend": ".memory",
    "PartitionStore": ".partition_store",
    "BlobBackend": ".records",
    "BlobRecord": ".records",
    "Checkpoint": ".records",
    "HubRef": ".records",
    "Intent": ".records",
    "Ownership": ".records",
    "StoreSettings": ".settings",
}

__all__ = [
    "AzureBlobBackend",
    "BlobBackend",
    "BlobRecord",
    "Checkpoint",
    "HubRef",
    "InMemoryBackend",
    "Intent",
    "Ownership",
    "PartitionStore",
    "StoreSettings",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
