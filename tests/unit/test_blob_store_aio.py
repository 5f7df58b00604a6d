"""The Blob store's async listing (Airflow's lag trigger): the sync backend's records and errors.

Over a fake ``aio`` ContainerClient, so no aiohttp is needed; the real one runs in the Airflow
tier against Azurite (tests/airflow/test_airflow_lag_and_connections.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError, ServiceRequestError

import dagster_eventhub_ingest.resources.store.azure_blob as blob_store
from dagster_eventhub_ingest.resources.errors import ConfigurationError, StoreUnavailableError
from dagster_eventhub_ingest.resources.store.records import BlobRecord
from dagster_eventhub_ingest.resources.store.retry import AsyncStoreRetryPolicy
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

SETTINGS = StoreSettings(container="leases", connection_string="UseDevelopmentStorage=true")
WHEN = datetime(2024, 5, 1, tzinfo=timezone.utc)


class _AioContainer:
    url = "http://127.0.0.1:10000/devstoreaccount1/leases?sig=S3CRET"

    def __init__(self, blobs: list[Any], error: Exception | None = None) -> None:
        self.blobs, self.error, self.closed = blobs, error, False

    async def __aenter__(self) -> _AioContainer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True

    async def _pages(self, prefix: str) -> AsyncIterator[Any]:
        if self.error is not None:
            raise self.error
        for blob in self.blobs:
            if blob.name.startswith(prefix):
                yield blob

    def list_blobs(
        self, *, name_starts_with: str, include: list[str], **options: Any
    ) -> AsyncIterator[Any]:
        assert include == ["metadata"]
        assert "ehi_retries" in options  # the call's retry log, for its error message
        return self._pages(name_starts_with)


def _use(monkeypatch: pytest.MonkeyPatch, fake: _AioContainer) -> None:
    monkeypatch.setattr(blob_store, "aio_container_client", lambda settings: fake)


def test_async_listing_gives_the_records_the_sync_backend_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blobs = [
        # Listing hands out bare ETags and a released ownerid as None, as the sync listing does.
        SimpleNamespace(
            name="ns/h/$default/ownership/0",
            metadata={"ownerid": None},
            etag="0x8D1",
            last_modified=WHEN,
        ),
        SimpleNamespace(
            name="ns/h/$default/checkpoint/0",
            metadata={"sequencenumber": "9"},
            etag='"0x8D2"',
            last_modified=WHEN,
        ),
        SimpleNamespace(name="other/0", metadata=None, etag="0x8D3", last_modified=WHEN),
    ]
    fake = _AioContainer(blobs)
    _use(monkeypatch, fake)
    records = asyncio.run(blob_store.alist_blobs(SETTINGS, "ns/h/$default/"))
    assert records == [
        BlobRecord("ns/h/$default/ownership/0", {"ownerid": ""}, '"0x8D1"', WHEN),
        BlobRecord("ns/h/$default/checkpoint/0", {"sequencenumber": "9"}, '"0x8D2"', WHEN),
    ]
    assert fake.closed


def test_async_listing_of_a_missing_container_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, _AioContainer([], ResourceNotFoundError("ContainerNotFound")))
    assert asyncio.run(blob_store.alist_blobs(SETTINGS, "ns/")) == []


def test_async_listing_errors_are_the_sync_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, _AioContainer([], ServiceRequestError("connection refused")))
    with pytest.raises(StoreUnavailableError) as err:
        asyncio.run(blob_store.alist_blobs(SETTINGS, "ns/"))
    assert str(err.value).startswith(
        "Blob Storage did not answer (list 'ns/' in container 'leases' at "
        "http://127.0.0.1:10000/devstoreaccount1/leases) without a retry: connection refused."
    )
    assert "S3CRET" not in str(err.value)


def test_async_client_is_built_and_checked_as_the_sync_one() -> None:
    bad = StoreSettings(container="leases", connection_string="AccountName=a")
    with pytest.raises(ConfigurationError, match="store connection_string: needs AccountKey"):
        blob_store.aio_container_client(bad)
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigurationError, match=r"async Blob client needs aiohttp"):
            blob_store.aio_container_client(SETTINGS)
    else:
        client = blob_store.aio_container_client(SETTINGS)
        assert isinstance(client._config.retry_policy, AsyncStoreRetryPolicy)
