"""resources: clients, the partition store, settings and errors (imports nothing above it)."""

from resources.blob_store import AzureBlobBackend
from resources.memory_store import InMemoryBackend
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
    "HubRef",
    "InMemoryBackend",
    "Intent",
    "Ownership",
    "PartitionStore",
]
