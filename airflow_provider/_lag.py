"""Lag per partition, read with the async Azure SDK clients (for the triggerer) or the sync ones.

The lag itself is computed by ``dagster_eventhub_ingest.ops.status.partition_status`` over the same
``PartitionStore`` parsing the run uses (effective checkpoint = the later of the SDK checkpoint blob
and the fenced copy on the ownership blob): the async path only fetches the blobs and partition
properties with the async twins of the store's and the hub's clients
(``dagster_eventhub_ingest.resources.store.azure_blob.alist_blobs``,
``dagster_eventhub_ingest.resources.azure.hub_client.EventHubClient.asnapshot``) and hands
snapshots of them over, so the lag a sensor waits on is exactly the lag a run and
``ehingest status`` report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from dagster_eventhub_ingest.ops.run.hub import HubClient
from dagster_eventhub_ingest.ops.status import partition_status
from dagster_eventhub_ingest.resources.azure.hub_client import (
    EventHubClient,
    HubSnapshot,
    PartitionInfo,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import BlobRecord
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = ["alag_per_partition", "condition_met", "lag_per_partition", "validate_thresholds"]

# Status needs a lease expiry to judge leases; lag does not depend on it.
_ANY_EXPIRY = 60.0


def validate_thresholds(min_lag_events: int | None, max_lag_events: int | None) -> None:
    """Exactly one threshold, a non-negative integer; the error says which to set."""
    if (min_lag_events is None) == (max_lag_events is None):
        raise ConfigurationError(
            "give exactly one of min_lag_events (wait until some partition has at least that "
            "many unprocessed events: there is work) or max_lag_events (wait until every "
            "partition has at most that many: caught up)"
        )
    for name, value in (("min_lag_events", min_lag_events), ("max_lag_events", max_lag_events)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigurationError(f"{name}: {value!r} must be an integer")
        if value is not None and value < 0:
            raise ConfigurationError(f"{name}: {value!r} must be >= 0")


def condition_met(
    lag: Mapping[str, int], min_lag_events: int | None, max_lag_events: int | None
) -> bool:
    """True when some partition's lag >= ``min_lag_events`` / every one's <= ``max_lag_events``."""
    if min_lag_events is not None:
        return any(v >= min_lag_events for v in lag.values())
    assert max_lag_events is not None
    return all(v <= max_lag_events for v in lag.values())


class _SnapshotBackend:
    """A read-only ``BlobBackend`` over blobs already listed (by the async client)."""

    def __init__(self, records: Sequence[BlobRecord]) -> None:
        self.records = list(records)

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def get(self, name: str) -> BlobRecord | None:
        return next((r for r in self.records if r.name == name), None)

    def list(self, prefix: str) -> list[BlobRecord]:
        return [r for r in self.records if r.name.startswith(prefix)]

    def put(
        self,
        name: str,
        metadata: Mapping[str, str],
        *,
        etag: str | None,
        deadline: datetime | None = None,
    ) -> None:
        raise NotImplementedError("read-only snapshot")

    def delete(self, name: str, *, etag: str | None = None) -> bool:
        raise NotImplementedError("read-only snapshot")


class _SnapshotHub:
    """A ``HubClient`` over hub and partition properties already fetched (by the async client).

    Its partitions are the ones asked for (``asnapshot`` checked them against the hub's).
    """

    def __init__(self, snapshot: HubSnapshot) -> None:
        self.snapshot = snapshot

    def partition_ids(self) -> list[str]:
        return list(self.snapshot.partitions)

    def hub_created_ms(self) -> int | None:
        return self.snapshot.created_ms

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        return {p: self.snapshot.partitions[p] for p in partition_ids}

    def enqueued_time_of(self, partition_id: str, sequence_number: int) -> datetime | None:
        return None

    def enqueued_times(self, wanted: dict[str, int]) -> dict[str, datetime | None]:
        return {}


def _lag(
    store: PartitionStore, hub: HubClient, partition_ids: Sequence[str] | None
) -> dict[str, int]:
    rows = partition_status(
        store, hub, lease_expiry_seconds=_ANY_EXPIRY, partition_ids=partition_ids, lag_seconds=False
    )
    return {r.partition_id: r.lag_events for r in rows}


def lag_per_partition(
    eventhub: EventHubSettings, store: StoreSettings, partition_ids: Sequence[str] | None = None
) -> dict[str, int]:
    """Unprocessed events per partition, with the sync clients (a sensor in poke mode)."""
    # Imported here: parsing a DAG file needs no Blob SDK.
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend

    backend = AzureBlobBackend.from_settings(store)
    try:
        store_view = PartitionStore(backend, eventhub.hub_ref())
        return _lag(store_view, EventHubClient(eventhub), partition_ids)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()


async def alag_per_partition(
    eventhub: EventHubSettings, store: StoreSettings, partition_ids: Sequence[str] | None = None
) -> dict[str, int]:
    """Unprocessed events per partition, read with the async SDK clients (for the triggerer)."""
    # Imported here: parsing a DAG file needs no Blob SDK.
    from dagster_eventhub_ingest.resources.store.azure_blob import alist_blobs

    hub_ref = eventhub.hub_ref()
    # Both kinds of blob (ownership carries the fenced checkpoint) share this prefix.
    prefix = hub_ref.prefix("checkpoint").removesuffix("checkpoint/")
    # The store before the hub, as the run and ``partition_status`` do: a checkpoint written in
    # between is then never ahead of the hub's bounds.
    records = await alist_blobs(store, prefix)
    hub = _SnapshotHub(await EventHubClient(eventhub).asnapshot(partition_ids))
    store_view = PartitionStore(_SnapshotBackend(records), hub_ref)
    return _lag(store_view, hub, hub.partition_ids())
