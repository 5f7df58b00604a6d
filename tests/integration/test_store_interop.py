"""Interop with the official ``BlobCheckpointStore`` (sync), both directions, on Azurite.

A checkpoint or ownership written by either side must be read correctly by the other, under
exactly the blob names and metadata keys the SDK uses, so an ``EventProcessorClient`` can resume
where this project stopped and vice versa.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore
from azure.storage.blob import ContainerClient

from dagster_eventhub_ingest.resources.errors import CheckpointRegressionError, OwnershipLostError
from dagster_eventhub_ingest.resources.store.records import HubRef
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.fixtures.store import PartitionStoreFactory

pytestmark = pytest.mark.integration


@pytest.fixture
def container(blob_store_settings: StoreSettings) -> Iterator[ContainerClient]:
    """A plain client on the container (created here), to look at blobs as they are."""
    assert blob_store_settings.connection_string is not None
    with ContainerClient.from_connection_string(
        blob_store_settings.connection_string, blob_store_settings.container
    ) as client:
        client.create_container()
        yield client


@pytest.fixture
def sdk_store(
    blob_store_settings: StoreSettings, container: ContainerClient
) -> Iterator[BlobCheckpointStore]:
    """The official checkpoint store on the same container."""
    assert blob_store_settings.connection_string is not None
    store = BlobCheckpointStore.from_connection_string(
        blob_store_settings.connection_string, blob_store_settings.container
    )
    yield store
    store.close()


def _sdk_args(hub: HubRef) -> tuple[str, str, str]:
    return hub.fully_qualified_namespace, hub.eventhub_name, hub.consumer_group


def _sdk_ownership(hub: HubRef, pid: str, owner: str, etag: str | None = None) -> dict:
    return {
        "fully_qualified_namespace": hub.fully_qualified_namespace,
        "eventhub_name": hub.eventhub_name,
        "consumer_group": hub.consumer_group,
        "partition_id": pid,
        "owner_id": owner,
        "etag": etag,
    }


def test_our_checkpoint_is_read_by_the_sdk(
    partition_store_factory: PartitionStoreFactory,
    hub_ref: HubRef,
    sdk_store: BlobCheckpointStore,
    container: ContainerClient,
) -> None:
    store = partition_store_factory()
    own = store.claim("0", "run-1", None)
    assert own is not None
    store.checkpoint(own, 41, "4096")

    [cp] = sdk_store.list_checkpoints(*_sdk_args(hub_ref))
    assert cp["partition_id"] == "0"
    assert cp["sequence_number"] == 41
    assert cp["offset"] == "4096"

    names = {b.name: b.metadata for b in container.list_blobs(include=["metadata"])}
    # Exactly the SDK's names: namespace/hub/consumer group/kind/partition, lower-cased.
    assert set(names) == {
        "ehitest.servicebus.windows.net/telemetry/$default/checkpoint/0",
        "ehitest.servicebus.windows.net/telemetry/$default/ownership/0",
    }
    checkpoint_md = names["ehitest.servicebus.windows.net/telemetry/$default/checkpoint/0"]
    assert checkpoint_md == {"sequencenumber": "41", "offset": "4096"}
    ownership_md = names["ehitest.servicebus.windows.net/telemetry/$default/ownership/0"]
    assert ownership_md["ownerid"] == "run-1"


def test_sdk_checkpoint_is_our_starting_point(
    partition_store_factory: PartitionStoreFactory,
    hub_ref: HubRef,
    sdk_store: BlobCheckpointStore,
) -> None:
    sdk_store.update_checkpoint(
        {
            "fully_qualified_namespace": hub_ref.fully_qualified_namespace,
            "eventhub_name": hub_ref.eventhub_name,
            "consumer_group": hub_ref.consumer_group,
            "partition_id": "3",
            "sequence_number": 1234,
            "offset": "98765",
        }
    )
    store = partition_store_factory()
    cp = store.list_checkpoints()["3"]
    assert (cp.sequence_number, cp.offset) == (1234, "98765")
    assert store.list_sdk_checkpoints()["3"] == cp

    own = store.claim("3", "run-1", None)
    assert own is not None
    with pytest.raises(CheckpointRegressionError, match="from 1234 to 1000"):
        store.checkpoint(own, 1000, "1")  # behind what the processor already did
    store.checkpoint(own, 1300, "99999")
    [back] = sdk_store.list_checkpoints(*_sdk_args(hub_ref))
    assert (back["sequence_number"], back["offset"]) == (1300, "99999")


def test_ownership_claimed_by_the_sdk_is_seen_and_fenced_here(
    partition_store_factory: PartitionStoreFactory,
    hub_ref: HubRef,
    sdk_store: BlobCheckpointStore,
) -> None:
    [claimed] = sdk_store.claim_ownership([_sdk_ownership(hub_ref, "1", "processor-A")])
    store = partition_store_factory()
    seen = store.list_ownership()["1"]
    assert seen.owner_id == "processor-A"
    assert seen.etag.strip('"') == claimed["etag"].strip('"')
    assert abs(seen.last_modified.timestamp() - claimed["last_modified_time"]) < 1
    assert store.get_ownership("1") == seen

    # Take it over with the ETag from our listing; the processor's next claim then loses.
    taken = store.claim("1", "run-1", seen)
    assert taken is not None and taken.owner_id == "run-1"
    assert (
        sdk_store.claim_ownership([_sdk_ownership(hub_ref, "1", "processor-A", claimed["etag"])])
        == []
    )
    [listed] = sdk_store.list_ownership(*_sdk_args(hub_ref))
    assert listed["owner_id"] == "run-1"


def test_ownership_claimed_here_is_seen_by_the_sdk(
    partition_store_factory: PartitionStoreFactory,
    hub_ref: HubRef,
    sdk_store: BlobCheckpointStore,
) -> None:
    store = partition_store_factory()
    own = store.claim("2", "run-1", None)
    assert own is not None
    [listed] = sdk_store.list_ownership(*_sdk_args(hub_ref))
    assert listed["partition_id"] == "2"
    assert listed["owner_id"] == "run-1"
    assert listed["etag"].strip('"') == own.etag.strip('"')
    assert abs(listed["last_modified_time"] - own.last_modified.timestamp()) < 1

    # A processor that takes the lease with our ETag wins; our run is then fenced out.
    [stolen] = sdk_store.claim_ownership(
        [_sdk_ownership(hub_ref, "2", "processor-B", listed["etag"])]
    )
    assert stolen["owner_id"] == "processor-B"
    with pytest.raises(OwnershipLostError):
        store.checkpoint(own, 10, "100")
    assert store.list_ownership()["2"].owner_id == "processor-B"
    assert sdk_store.list_checkpoints(*_sdk_args(hub_ref)) == []


def test_release_is_what_the_sdk_calls_released(
    partition_store_factory: PartitionStoreFactory,
    hub_ref: HubRef,
    sdk_store: BlobCheckpointStore,
) -> None:
    store = partition_store_factory()
    own = store.claim("4", "run-1", None)
    assert own is not None
    assert store.release(own)
    [listed] = sdk_store.list_ownership(*_sdk_args(hub_ref))
    # The SDK releases by writing an empty owner id; listing returns it empty (or None).
    assert not listed["owner_id"]
    [claimed] = sdk_store.claim_ownership(
        [_sdk_ownership(hub_ref, "4", "processor-A", listed["etag"])]
    )
    assert claimed["owner_id"] == "processor-A"
