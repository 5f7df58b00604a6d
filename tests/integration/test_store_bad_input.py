"""Bad input to the store: each gets a clear error naming what is wrong, and nothing is overwritten.

Missing container, malformed or rejected connection strings, blobs edited by hand into garbage,
and an endpoint that does not answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from azure.core.pipeline import PipelineRequest
from azure.storage.blob import BlobServiceClient, ContainerClient

from dagster_eventhub_ingest.emulator import azurite as services
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    CorruptStoreStateError,
    OwnershipLostError,
    StoreUnavailableError,
)
from dagster_eventhub_ingest.resources.store import retry as store_retry
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import HubRef, Ownership
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.fixtures.store import PartitionStoreFactory

# A well-formed base64 string standing in for a secret; it must never appear in a message.
SECRET = "U0VDUkVUU0VDUkVUU0VDUkVUU0VDUkVU"


# -- missing container -------------------------------------------------------------------------
@pytest.mark.integration
def test_missing_container_is_a_clear_error_when_creation_is_off(
    azurite_connection_string: str, container_name: str
) -> None:
    settings = StoreSettings(
        container=container_name,
        connection_string=azurite_connection_string,
        create_container=False,
    )
    with pytest.raises(ConfigurationError) as err:
        AzureBlobBackend.from_settings(settings)
    message = str(err.value)
    assert f"container {container_name!r} does not exist" in message
    assert "create_container=True" in message
    assert services.AZURITE_KEY not in message
    service = BlobServiceClient.from_connection_string(azurite_connection_string)
    assert not service.get_container_client(container_name).exists()  # nothing created


@pytest.mark.integration
def test_missing_container_is_created_when_creation_is_on(
    azurite_connection_string: str, container_name: str, hub_ref: HubRef
) -> None:
    settings = StoreSettings(container=container_name, connection_string=azurite_connection_string)
    store = PartitionStore(AzureBlobBackend.from_settings(settings), hub_ref)
    assert (
        PartitionStore(AzureBlobBackend.from_settings(settings), hub_ref).list_ownership() == {}
    )  # a 2nd is fine
    assert store.claim("0", "owner-a", None) is not None
    service = BlobServiceClient.from_connection_string(azurite_connection_string)
    assert service.get_container_client(container_name).exists()


@pytest.mark.integration
def test_container_deleted_mid_run_is_a_configuration_error(
    partition_store_factory: PartitionStoreFactory, raw_container: ContainerClient
) -> None:
    store = partition_store_factory()
    own = store.claim("0", "owner-a", None)
    assert own is not None
    raw_container.delete_container()
    for call in (
        lambda: store.renew(own),
        store.list_ownership,
        lambda: store.claim("1", "b", None),
    ):
        with pytest.raises(ConfigurationError, match=r"does not exist .* was it deleted"):
            call()


# -- malformed connection strings (checked locally, before any network call) ---------------------
@pytest.mark.parametrize(
    ("conn_str", "expected"),
    [
        (
            f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey={SECRET}!!;"
            "BlobEndpoint=http://127.0.0.1:1/acct",
            "AccountKey is not valid base64",
        ),
        (f"AccountKey={SECRET};EndpointSuffix=core.windows.net", "neither BlobEndpoint nor"),
        (f"BlobEndpoint=http://127.0.0.1:1/acct;AccountKey={SECRET}", "without AccountName"),
        (
            f"DefaultEndpointsProtocol=ftp;AccountName=acct;AccountKey={SECRET}",
            "DefaultEndpointsProtocol='ftp' is not valid",
        ),
        (
            f"AccountName=acct;AccountKey={SECRET};BlobEndpoint=127.0.0.1:10000/acct",
            "must start with http:// or https://",
        ),
        ("AccountName=acct;BlobEndpoint=http://127.0.0.1:1/acct", "needs AccountKey or"),
        (
            f"AccountName=acct;AccountKey={SECRET};SharedAccessSignature={SECRET}x;Junk",
            "malformed connection string: segment 4 of 4",
        ),
        (f"AccountName=acct;AccountKey {SECRET}", "malformed connection string: segment 2"),
    ],
)
def test_malformed_connection_string_names_the_field_not_the_secret(
    conn_str: str, expected: str
) -> None:
    with pytest.raises(ConfigurationError) as err:
        AzureBlobBackend.from_settings(
            StoreSettings(container="leases", connection_string=conn_str)
        )
    message = str(err.value)
    assert "store connection_string" in message
    assert expected in message
    assert SECRET not in message


@pytest.mark.integration
def test_rejected_key_is_a_configuration_error_without_the_key(
    azurite_connection_string: str, container_name: str
) -> None:
    wrong = azurite_connection_string.replace(services.AZURITE_KEY, SECRET)
    with pytest.raises(ConfigurationError) as err:
        AzureBlobBackend.from_settings(
            StoreSettings(container=container_name, connection_string=wrong)
        )
    message = str(err.value)
    assert "rejected the credentials" in message and "AccountKey" in message
    assert SECRET not in message and services.AZURITE_KEY not in message


# -- blobs edited by hand ----------------------------------------------------------------------
@pytest.fixture
def raw_container(blob_store_settings: StoreSettings) -> Iterator[ContainerClient]:
    """The test's container through the plain SDK: a person with Storage Explorer."""
    assert blob_store_settings.connection_string is not None
    with ContainerClient.from_connection_string(
        blob_store_settings.connection_string, blob_store_settings.container
    ) as client:
        yield client


def _snapshot(client: ContainerClient, name: str) -> tuple[str, dict[str, str]]:
    props = client.get_blob_client(name).get_blob_properties()
    return props.etag, dict(props.metadata)


def _claimed(store: PartitionStore) -> Ownership:
    own = store.claim("0", "owner-a", None)
    assert own is not None
    return store.checkpoint(store.record_intent(own, 0, 9), 4, "40")


@pytest.mark.integration
def test_garbage_ownership_metadata_is_reported_and_left_alone(
    partition_store_factory: PartitionStoreFactory, raw_container: ContainerClient
) -> None:
    store = partition_store_factory()
    own = _claimed(store)
    name = store.hub.prefix("ownership") + "0"
    assert own.metadata is not None
    edited = {**own.metadata, "ehiepoch": "banana"}
    raw_container.get_blob_client(name).set_blob_metadata(edited)
    before = _snapshot(raw_container, name)

    for call in (store.list_ownership, lambda: store.get_ownership("0"), store.list_checkpoints):
        with pytest.raises(CorruptStoreStateError) as err:
            call()
        assert repr(name) in str(err.value)
        assert "ehiepoch='banana' is not an integer" in str(err.value)
    # The owner's next write is a CAS on the ETag it holds: the edit moved it, so nothing is
    # overwritten (it hears that it lost the lease and drops the partition).
    with pytest.raises(OwnershipLostError):
        store.checkpoint(own, 9, "90")
    with pytest.raises(OwnershipLostError):
        store.renew(own)
    assert _snapshot(raw_container, name) == before


@pytest.mark.integration
def test_reversed_intent_is_reported(
    partition_store_factory: PartitionStoreFactory, raw_container: ContainerClient
) -> None:
    store = partition_store_factory()
    own = _claimed(store)
    name = store.hub.prefix("ownership") + "0"
    assert own.metadata is not None
    edited = {**own.metadata, "ehiintentstart": "9", "ehiintentend": "3"}
    raw_container.get_blob_client(name).set_blob_metadata(edited)
    before = _snapshot(raw_container, name)
    with pytest.raises(CorruptStoreStateError, match=r"intent range \[9, 3\]") as err:
        store.get_ownership("0")
    assert repr(name) in str(err.value)
    assert _snapshot(raw_container, name) == before


@pytest.mark.integration
@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"sequencenumber": "twelve", "offset": "40"}, "sequencenumber='twelve' is not an int"),
        ({"offset": "40"}, "has no 'sequencenumber' metadata"),
    ],
)
def test_garbage_checkpoint_blob_blocks_the_checkpoint_and_is_left_alone(
    partition_store_factory: PartitionStoreFactory,
    raw_container: ContainerClient,
    metadata: dict[str, str],
    expected: str,
) -> None:
    store = partition_store_factory()
    own = _claimed(store)
    checkpoint_name = store.hub.prefix("checkpoint") + "0"
    ownership_name = store.hub.prefix("ownership") + "0"
    raw_container.get_blob_client(checkpoint_name).set_blob_metadata(metadata)
    before = (_snapshot(raw_container, checkpoint_name), _snapshot(raw_container, ownership_name))

    with pytest.raises(CorruptStoreStateError) as err:
        store.checkpoint(own, 9, "90")
    assert repr(checkpoint_name) in str(err.value) and expected in str(err.value)
    with pytest.raises(CorruptStoreStateError):
        store.list_checkpoints()
    after = (_snapshot(raw_container, checkpoint_name), _snapshot(raw_container, ownership_name))
    assert after == before


# -- unreachable endpoint ----------------------------------------------------------------------
@pytest.mark.integration
def test_unreachable_endpoint_fails_fast_after_bounded_retries(container_name: str) -> None:
    port = services.free_port()  # nothing listens there
    conn = services.azurite_connection_string(port)
    attempts: list[PipelineRequest] = []
    settings = StoreSettings(container=container_name, connection_string=conn)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as err:
        AzureBlobBackend.from_settings(settings, raw_request_hook=attempts.append)
    elapsed = time.monotonic() - started
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message
    assert "did not answer" in message and "Check that the account URL" in message
    assert services.AZURITE_KEY not in message
    assert len(attempts) == store_retry.CONNECT_RETRIES + 1
    assert f"after {store_retry.CONNECT_RETRIES} retries over" in message
    assert elapsed < 15
    assert err.value.retryable


@pytest.mark.integration
def test_service_gone_mid_run_is_store_unavailable(hub_ref: HubRef, container_name: str) -> None:
    with services.azurite() as conn:
        store = PartitionStore(
            AzureBlobBackend.from_settings(
                StoreSettings(container=container_name, connection_string=conn)
            ),
            hub_ref,
        )
        own = store.claim("0", "owner-a", None)
        assert own is not None
    # Azurite is stopped now: the lease holder's renew must fail clearly, not hang.
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="did not answer"):
        store.renew(own)
    assert time.monotonic() - started < 15
