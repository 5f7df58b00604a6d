"""Lag per partition, read with the async Azure SDK clients (for the triggerer) or the sync ones.

The lag itself is computed by ``ops.status.partition_status`` over the same ``PartitionStore``
parsing the run uses (effective checkpoint = the later of the SDK checkpoint blob and the fenced
copy on the ownership blob): the async path only fetches the blobs and partition properties
with ``azure.storage.blob.aio`` / ``azure.eventhub.aio`` and hands snapshots of them over, so the
lag a sensor waits on is exactly the lag a run and ``ehingest status`` report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ops.hub import HubClient
from ops.status import partition_status
from resources.credentials import CredentialOptions, identity_kwargs
from resources.errors import (
    ConfigurationError,
    EventHubUnavailableError,
    RangeError,
    StoreUnavailableError,
    redact,
)
from resources.hub_client import (
    EventHubClient,
    PartitionInfo,
    partition_info_from_properties,
    sort_partition_ids,
    utc,
)
from resources.settings import EventHubSettings, StoreSettings
from resources.store import BlobRecord, PartitionStore

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
        return datetime.now(UTC)

    def get(self, name: str) -> BlobRecord | None:
        return next((r for r in self.records if r.name == name), None)

    def list(self, prefix: str) -> list[BlobRecord]:
        return [r for r in self.records if r.name.startswith(prefix)]

    def put(self, name: str, metadata: Mapping[str, str], *, etag: str | None) -> None:
        raise NotImplementedError("read-only snapshot")

    def delete(self, name: str, *, etag: str | None = None) -> bool:
        raise NotImplementedError("read-only snapshot")


class _SnapshotHub:
    """A ``HubClient`` over hub and partition properties already fetched (by the async client)."""

    def __init__(self, infos: Mapping[str, PartitionInfo], created_ms: int | None) -> None:
        self.infos = dict(infos)
        self.created_ms = created_ms

    def partition_ids(self) -> list[str]:
        return list(self.infos)

    def hub_created_ms(self) -> int | None:
        return self.created_ms

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        return {p: self.infos[p] for p in partition_ids}

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
    backend = store.backend()
    try:
        store_view = PartitionStore(backend, eventhub.hub_ref())
        return _lag(store_view, EventHubClient(eventhub), partition_ids)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()


def _aio_consumer(eventhub: EventHubSettings) -> Any:
    from azure.eventhub.aio import EventHubConsumerClient

    if eventhub.credential_type == "connection_string":
        assert eventhub.connection_string is not None
        return EventHubConsumerClient.from_connection_string(
            eventhub.connection_string,
            consumer_group=eventhub.consumer_group,
            eventhub_name=eventhub.eventhub_name,
            retry_total=2,
        )
    assert eventhub.fully_qualified_namespace is not None
    return EventHubConsumerClient(
        eventhub.fully_qualified_namespace,
        eventhub.eventhub_name,
        eventhub.consumer_group,
        _aio_credential(eventhub.credential_options),
        retry_total=2,
    )


def _aio_container(store: StoreSettings) -> Any:
    from azure.storage.blob.aio import ContainerClient

    if store.credential_type == "connection_string":
        assert store.connection_string is not None
        return ContainerClient.from_connection_string(
            store.connection_string, store.container, retry_total=2
        )
    assert store.account_url is not None
    return ContainerClient(
        store.account_url,
        store.container,
        credential=_aio_credential(store.credential_options),
        retry_total=2,
    )


def _aio_credential(options: CredentialOptions) -> Any:
    """DefaultAzureCredential (aio) with the connection's identity options, as the sync path."""
    from azure.identity.aio import DefaultAzureCredential

    return DefaultAzureCredential(**identity_kwargs(options))


async def _ahub(eventhub: EventHubSettings, partition_ids: Sequence[str] | None) -> _SnapshotHub:
    try:
        async with _aio_consumer(eventhub) as client:
            hub_props = await client.get_eventhub_properties()
            known = sort_partition_ids(str(p) for p in hub_props["partition_ids"])
            unknown = sorted(set(partition_ids or ()) - set(known))
            if unknown:
                raise RangeError(
                    f"partition {unknown[0]!r} is not a partition of {eventhub.eventhub_name!r}; "
                    f"valid: {', '.join(known)}"
                )
            targets = list(partition_ids) if partition_ids else known
            props = await asyncio.gather(*(client.get_partition_properties(p) for p in targets))
    except RangeError:
        raise
    except Exception as exc:
        raise EventHubUnavailableError(
            f"Event Hub {eventhub.eventhub_name!r} on {eventhub.namespace}: cannot read partition "
            f"properties: {type(exc).__name__}: {redact(str(exc))[:500]}"
        ) from exc
    created = utc(hub_props.get("created_at"))
    return _SnapshotHub(
        {p: partition_info_from_properties(p, pr) for p, pr in zip(targets, props, strict=True)},
        int(created.timestamp() * 1000) if created is not None else None,
    )


async def _ablobs(store: StoreSettings, prefix: str) -> list[BlobRecord]:
    from azure.core.exceptions import ResourceNotFoundError

    records: list[BlobRecord] = []
    try:
        async with _aio_container(store) as container:
            async for blob in container.list_blobs(name_starts_with=prefix, include=["metadata"]):
                records.append(
                    BlobRecord(
                        name=blob.name,
                        metadata=dict(blob.metadata or {}),
                        etag=str(blob.etag),
                        last_modified=blob.last_modified,
                    )
                )
    except ResourceNotFoundError:
        return []  # no container yet: nothing was ever checkpointed
    except Exception as exc:
        raise StoreUnavailableError(
            f"container {store.container!r}: cannot list checkpoints: {type(exc).__name__}: "
            f"{redact(str(exc))[:500]}"
        ) from exc
    return records


async def alag_per_partition(
    eventhub: EventHubSettings, store: StoreSettings, partition_ids: Sequence[str] | None = None
) -> dict[str, int]:
    """Unprocessed events per partition, read with the async SDK clients (for the triggerer)."""
    hub_ref = eventhub.hub_ref()
    # Both kinds of blob (ownership carries the fenced checkpoint) share this prefix.
    prefix = hub_ref.prefix("checkpoint").removesuffix("checkpoint/")
    # The store before the hub, as the run and ``partition_status`` do: a checkpoint written in
    # between is then never ahead of the hub's bounds.
    records = await _ablobs(store, prefix)
    hub = await _ahub(eventhub, partition_ids)
    store_view = PartitionStore(_SnapshotBackend(records), hub_ref)
    return _lag(store_view, hub, hub.partition_ids())
