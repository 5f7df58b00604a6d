"""Azure Blob Storage backend of the partition store (azure-storage-blob, sync).

Implements :class:`dagster_eventhub_ingest.resources.store.records.BlobBackend` with the service's
own compare-and-set: create-only is ``upload_blob(if_none_match="*")`` (409 ``BlobAlreadyExists`` =
lost race), a conditional update is ``set_blob_metadata(if_match=etag)`` (412, or 404 when the blob
was deleted meanwhile = lost race). Every other failure is translated into the package's error
hierarchy (:mod:`dagster_eventhub_ingest.resources.errors`) with ``raise ... from exc`` and a
redacted message.

The store's clock is the service's: every response's ``Date`` header (and ``Last-Modified``) is
a lower bound of the service time when it arrived; :meth:`AzureBlobBackend.now` advances the
best bound with ``time.monotonic()``. The local wall clock is never consulted, so a client
whose clock is minutes off still judges lease expiry the way every other client does.

Example::

    from dagster_eventhub_ingest.resources.store import (
        AzureBlobBackend, HubRef, PartitionStore, StoreSettings,
    )

    settings = StoreSettings(container="leases", connection_string=os.environ["STORE_CONN"])
    backend = AzureBlobBackend.from_settings(settings)
    store = PartitionStore(backend, HubRef("myns.servicebus.windows.net", "telemetry"))
    own = store.claim("0", owner_id="run-42", previous=None)
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import ContainerClient

from dagster_eventhub_ingest.resources.azure.credentials import (
    make_async_credential,
    make_credential,
    parse_connection_string,
)
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    StoreUnavailableError,
    redact,
)
from dagster_eventhub_ingest.resources.store.records import BlobRecord
from dagster_eventhub_ingest.resources.store.retry import (
    AsyncStoreRetryPolicy,
    RetryLog,
    StoreRetryPolicy,
    call_options,
)

if TYPE_CHECKING:
    from azure.core.pipeline import PipelineResponse
    from azure.storage.blob.aio import ContainerClient as AsyncContainerClient

    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = ["AzureBlobBackend", "aio_container_client", "alist_blobs", "container_client"]

logger = logging.getLogger(__name__)

# Short on purpose: a run that cannot reach its store should fail within seconds with a clear
# message (retries: dagster_eventhub_ingest.resources.store.retry).
CONNECTION_TIMEOUT_SECONDS = 3
READ_TIMEOUT_SECONDS = 20
CLOCK_REFRESH_SECONDS = 30.0

_CONN_FIELD = "store connection_string"


def _validate_connection_string(conn_str: str) -> None:
    """Check a storage connection string locally; errors name the field, never the secret."""
    parts = {k.lower(): v for k, v in parse_connection_string(conn_str, _CONN_FIELD).items()}
    if parts.get("usedevelopmentstorage", "").lower() == "true":
        return
    if "blobendpoint" not in parts and "accountname" not in parts:
        raise ConfigurationError(
            f"{_CONN_FIELD}: has neither BlobEndpoint nor AccountName; copy the full "
            "connection string from the storage account's 'Access keys' page"
        )
    endpoint = parts.get("blobendpoint")
    if endpoint is not None and not endpoint.lower().startswith(("http://", "https://")):
        raise ConfigurationError(
            f"{_CONN_FIELD}: BlobEndpoint={endpoint!r} must start with http:// or https://"
        )
    protocol = parts.get("defaultendpointsprotocol")
    if protocol is not None and protocol.lower() not in ("http", "https"):
        raise ConfigurationError(
            f"{_CONN_FIELD}: DefaultEndpointsProtocol={protocol!r} is not valid; valid: "
            "'https', 'http'"
        )
    key = parts.get("accountkey")
    if key is not None:
        if "accountname" not in parts:
            raise ConfigurationError(
                f"{_CONN_FIELD}: AccountKey is given without AccountName; add AccountName=..."
            )
        try:
            base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(
                f"{_CONN_FIELD}: AccountKey is not valid base64 (value redacted); was it cut "
                "short when copied? Copy key1 or key2 again from the portal"
            ) from None
    elif "sharedaccesssignature" not in parts:
        raise ConfigurationError(
            f"{_CONN_FIELD}: needs AccountKey or SharedAccessSignature (or use "
            "credential_type='default_azure_credential' with account_url)"
        )


def _etag(raw: str) -> str:
    # Listing returns ETags bare (0x8D...), responses quoted ("0x8D..."); the store compares
    # them as strings, so hand out one form: the quoted one HTTP headers use.
    return raw if raw.startswith(('"', "W/")) else f'"{raw}"'


def _metadata(raw: Mapping[str, str | None] | None) -> dict[str, str]:
    # Listing returns an empty metadata value (a released ownerid) as None; the SDK writes "".
    return {k: ("" if v is None else v) for k, v in (raw or {}).items()}


def _endpoint(client: Any) -> str:
    # The URL without any query string: a SAS token must never reach a message.
    return redact(str(client.url).split("?", 1)[0])


def container_client(settings: StoreSettings, **client_kwargs: Any) -> ContainerClient:
    """A ``ContainerClient`` for ``settings`` with the store's retry policy
    (:class:`~dagster_eventhub_ingest.resources.store.retry.StoreRetryPolicy`) and the timeouts
    above.

    No request is made; :meth:`AzureBlobBackend.from_settings` checks the container. Errors
    name the field, never the secret.
    """
    client: ContainerClient = _container_client(
        ContainerClient, StoreRetryPolicy, make_credential, settings, client_kwargs
    )
    return client


def aio_container_client(settings: StoreSettings, **client_kwargs: Any) -> AsyncContainerClient:
    """:func:`container_client` from ``azure.storage.blob.aio`` (needs aiohttp), for an event
    loop (Airflow's triggerer): the same checks, retries, timeouts and credential options."""
    from azure.storage.blob.aio import ContainerClient as AioContainerClient

    try:
        client: AsyncContainerClient = _container_client(
            AioContainerClient,
            AsyncStoreRetryPolicy,
            make_async_credential,
            settings,
            client_kwargs,
        )
    except ImportError as exc:  # the SDK builds its aiohttp transport here
        raise ConfigurationError(
            f"store: the async Blob client needs aiohttp ({exc}); install "
            "'dagster-eventhub-ingest[airflow]'"
        ) from exc
    return client


def _container_client(
    client_class: Any,
    retry_class: Any,
    credential: Callable[..., Any],
    settings: StoreSettings,
    client_kwargs: Mapping[str, Any],
) -> Any:
    # The sync and aio classes take the same arguments; only their retry policy and credential
    # are of their own kind.
    kwargs: dict[str, Any] = {
        "retry_policy": retry_class(),
        "connection_timeout": CONNECTION_TIMEOUT_SECONDS,
        "read_timeout": READ_TIMEOUT_SECONDS,
    }
    kwargs.update(client_kwargs)
    if settings.credential_type == "connection_string":
        assert settings.connection_string is not None  # StoreSettings checked it
        _validate_connection_string(settings.connection_string)
        try:
            return client_class.from_connection_string(
                settings.connection_string, settings.container, **kwargs
            )
        except ValueError as exc:
            # The SDK's messages hold no secret, but redact anyway: they may in a future one.
            raise ConfigurationError(f"{_CONN_FIELD}: {redact(str(exc))}") from exc
    assert settings.account_url is not None
    if not settings.account_url.lower().startswith(("http://", "https://")):
        raise ConfigurationError(
            f"account_url: {settings.account_url!r} must look like "
            "'https://<account>.blob.core.windows.net'"
        )
    return client_class(
        settings.account_url,
        settings.container,
        credential=credential(settings.credential_type, settings.credential_options),
        **kwargs,
    )


async def alist_blobs(settings: StoreSettings, prefix: str) -> list[BlobRecord]:
    """:meth:`AzureBlobBackend.list` read with ``azure.storage.blob.aio``, for an event loop
    (Airflow's triggerer). A container that does not exist yet holds no blob (no error).

    Raises:
        ConfigurationError: malformed connection string or rejected credentials.
        StoreUnavailableError: the endpoint did not answer after bounded retries.
    """
    client = aio_container_client(settings)
    endpoint = _endpoint(client)
    log = RetryLog()
    try:
        async with client:
            return [
                BlobRecord(b.name, _metadata(b.metadata), _etag(b.etag), b.last_modified)
                async for b in client.list_blobs(
                    name_starts_with=prefix, include=["metadata"], **call_options(log)
                )
            ]
    except ResourceNotFoundError:
        return []  # no container yet: nothing was ever checkpointed
    except AzureError as exc:
        raise _translate(exc, "list", prefix, settings.container, endpoint, log) from exc
    except Exception as exc:  # the aio transport's own errors: a poll loop retries them
        raise StoreUnavailableError(
            f"Blob Storage failed (list {prefix!r} in container {settings.container!r} at "
            f"{endpoint}): {type(exc).__name__}: {redact(str(exc))[:300]}"
        ) from exc


def _container_missing(exc: ResourceNotFoundError) -> bool:
    # error_code is a StorageErrorCode enum or a plain string depending on the call.
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code)) == "ContainerNotFound"


def _translate(
    exc: AzureError, action: str, name: str, container: str, endpoint: str, log: RetryLog
) -> EventHubIngestError:
    """One of our error types for an Azure error (sync or aio); the message names no secret
    and says how many retries the call really made (``log``)."""
    target = "" if name == container else f" {name!r} in"
    # "create container" + " container 'x'" would say it twice.
    verb = action.removesuffix(" container") if not target else action
    what = f"{verb}{target} container {container!r} at {endpoint}"
    status = getattr(exc, "status_code", None)
    code = getattr(exc, "error_code", None)
    code = str(getattr(code, "value", code) or type(exc).__name__)
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        reason = (str(exc.message or type(exc).__name__).splitlines() or ["?"])[0][:200]
        return StoreUnavailableError(
            f"Blob Storage did not answer ({what}) {log.describe()}: {reason}. "
            "Check that the account URL / BlobEndpoint is right, that the service is "
            "running, and that this machine can reach it (network, firewall, private "
            "endpoint, proxy)."
        )
    if isinstance(exc, ClientAuthenticationError) or status in (401, 403):
        return ConfigurationError(
            f"Blob Storage rejected the credentials ({what}): check AccountKey / "
            "SharedAccessSignature in the store connection_string, or that the identity "
            f"has the 'Storage Blob Data Contributor' role on the container (HTTP {status} "
            f"{code})"
        )
    if isinstance(exc, ResourceNotFoundError) and _container_missing(exc):
        return ConfigurationError(
            f"container {container!r} does not exist at {endpoint} ({action} "
            f"{name!r}); was it deleted? Create it again, or set create_container=True and "
            "rebuild the store (checkpoints in the old container are gone)"
        )
    if status is None or status >= 500 or status in (408, 429):
        return StoreUnavailableError(
            f"Blob Storage failed ({what}) {log.describe()}: HTTP {status} {code}. The "
            "service is busy or unhealthy; retry later."
        )
    return EventHubIngestError(f"Blob Storage refused to {what}: HTTP {status} {code}")


class AzureBlobBackend:
    """A :class:`~dagster_eventhub_ingest.resources.store.records.BlobBackend` over one Blob
    container (thread-safe).

    Args:
        container_client: an ``azure.storage.blob.ContainerClient`` (sync) for the container.
        clock_refresh_seconds: after this long without any response from the service,
            :meth:`now` asks the service for its time again (one HEAD request).

    ``operations`` counts HTTP responses received (retries included), ``conflicts`` the lost
    compare-and-set races, as
    :class:`~dagster_eventhub_ingest.resources.store.memory.InMemoryBackend` does. Build it with
    :meth:`from_settings`, which also checks (or creates) the container.
    """

    def __init__(
        self,
        container_client: ContainerClient,
        *,
        clock_refresh_seconds: float = CLOCK_REFRESH_SECONDS,
    ) -> None:
        self._client = container_client
        self.container = container_client.container_name
        self.endpoint = _endpoint(container_client)
        self._clock_refresh = clock_refresh_seconds
        self._lock = threading.Lock()
        self._tls = threading.local()  # per thread: did the last put's condition fail on a retry
        self._offset: float | None = None  # service epoch seconds minus time.monotonic()
        self._synced_at = 0.0
        self.operations = 0
        self.conflicts = 0

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: StoreSettings, **client_kwargs: Any) -> AzureBlobBackend:
        """Connect to ``settings.container`` and make sure it exists (see ``create_container``).

        Raises:
            ConfigurationError: malformed connection string, rejected credentials, or a missing
                container with ``create_container=False``.
            StoreUnavailableError: the endpoint did not answer after bounded retries.
        """
        backend = cls(container_client(settings, **client_kwargs))
        backend.ensure_container(create=settings.create_container)
        return backend

    def ensure_container(self, *, create: bool) -> None:
        """Check the container exists (and sync the clock); create it when ``create`` is True."""
        log = RetryLog()
        try:
            self._client.get_container_properties(**self._options(log))
            return
        except ResourceNotFoundError as exc:
            if not create:
                raise ConfigurationError(
                    f"container {self.container!r} does not exist at {self.endpoint}. Create "
                    "it (e.g. `az storage container create --name "
                    f"{self.container}`) or set create_container=True in the store settings"
                ) from exc
        except AzureError as exc:
            raise self._translate(exc, "check container", self.container, log) from exc
        log = RetryLog()
        try:
            self._client.create_container(**self._options(log))
            logger.info("created container %s at %s", self.container, self.endpoint)
        except ResourceExistsError:
            pass  # a peer created it between our check and our create
        except AzureError as exc:
            raise self._translate(exc, "create container", self.container, log) from exc

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def __enter__(self) -> AzureBlobBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the store's clock ---------------------------------------------------------------------
    def _on_response(self, response: PipelineResponse) -> None:
        # Called for every HTTP response (each retry too): count it and learn the service time.
        arrived = time.monotonic()
        headers = response.http_response.headers
        bounds = []
        for header in ("Date", "Last-Modified"):
            value = headers.get(header)
            if value:
                try:
                    bounds.append(parsedate_to_datetime(value).timestamp())
                except (TypeError, ValueError):
                    logger.debug("ignoring unparsable %s header %r", header, value)
        with self._lock:
            self.operations += 1
            if bounds:
                self._observe(max(bounds) - arrived, arrived)

    def _observe(self, offset: float, arrived: float) -> None:
        # HTTP dates have one-second resolution and arrive after they were stamped, so each
        # offset is a lower bound of the true one: keep the best (largest) bound, which makes
        # now() non-decreasing and behind the service by < 1 s. (Last-Modified is truncated
        # the same way, so a lease's age is judged within +-1 s.) After a quiet spell start
        # afresh, in case the service's clock was corrected.
        if self._offset is None or arrived - self._synced_at > self._clock_refresh:
            self._offset = offset
        else:
            self._offset = max(self._offset, offset)
        self._synced_at = arrived

    def now(self) -> datetime:
        """The service's current time: last seen ``Date`` advanced by the monotonic clock.

        Cheap: a HEAD request only when nothing was heard from the service for
        ``clock_refresh_seconds``.
        """
        with self._lock:
            stale = self._offset is None or time.monotonic() - self._synced_at > self._clock_refresh
        if stale:
            log = RetryLog()
            try:
                self._client.get_container_properties(**self._options(log))
            except AzureError as exc:
                raise self._translate(
                    exc, "read the service clock from", self.container, log
                ) from exc
        with self._lock:
            assert self._offset is not None
            return datetime.fromtimestamp(time.monotonic() + self._offset, timezone.utc)

    # -- BlobBackend ---------------------------------------------------------------------------
    def get(self, name: str) -> BlobRecord | None:
        """The blob with its metadata, or None if it does not exist."""
        log = RetryLog()
        try:
            props = self._client.get_blob_client(name).get_blob_properties(**self._options(log))
        except ResourceNotFoundError as exc:
            if _container_missing(exc):
                raise self._translate(exc, "read", name, log) from exc
            return None
        except AzureError as exc:
            raise self._translate(exc, "read", name, log) from exc
        return BlobRecord(name, _metadata(props.metadata), _etag(props.etag), props.last_modified)

    def list(self, prefix: str) -> list[BlobRecord]:
        """Every blob whose name starts with ``prefix``, with metadata (all pages)."""
        log = RetryLog()
        try:
            return [
                BlobRecord(b.name, _metadata(b.metadata), _etag(b.etag), b.last_modified)
                for b in self._client.list_blobs(
                    name_starts_with=prefix, include=["metadata"], **self._options(log)
                )
            ]
        except AzureError as exc:
            raise self._translate(exc, "list", prefix, log) from exc

    def put(
        self,
        name: str,
        metadata: Mapping[str, str],
        *,
        etag: str | None,
        deadline: datetime | None = None,
    ) -> BlobRecord | None:
        """Create-only (``etag=None``) or If-Match metadata write; None when the race was lost.

        ``deadline`` (store clock): retry no later than this (what is left of the lease the
        write is made on); at least one attempt is made.
        """
        blob = self._client.get_blob_client(name)
        log = RetryLog()
        options = self._options(log, deadline)
        self._tls.retried = False
        try:
            if etag is None:
                result = blob.upload_blob(
                    b"", metadata=dict(metadata), if_none_match="*", **options
                )
            else:
                result = blob.set_blob_metadata(dict(metadata), if_match=etag, **options)
        except (ResourceExistsError, ResourceModifiedError):
            self._conflict(log)
            return None
        except ResourceNotFoundError as exc:
            if _container_missing(exc):
                raise self._translate(exc, "write", name, log) from exc
            self._conflict(log)  # deleted meanwhile: the ETag we hold is gone
            return None
        except HttpResponseError as exc:
            if exc.status_code == 412:  # some service versions raise it as a plain error
                self._conflict(log)
                return None
            raise self._translate(exc, "write", name, log) from exc
        except AzureError as exc:
            raise self._translate(exc, "write", name, log) from exc
        return BlobRecord(name, dict(metadata), _etag(result["etag"]), result["last_modified"])

    def delete(self, name: str, *, etag: str | None = None) -> bool:
        """Delete a blob (If-Match when ``etag`` is given); False if the condition failed."""
        log = RetryLog()
        kwargs = self._options(log)
        if etag is not None:
            kwargs["if_match"] = etag
        try:
            self._client.get_blob_client(name).delete_blob(**kwargs)
        except ResourceModifiedError:
            self._conflict()
            return False
        except ResourceNotFoundError as exc:
            if _container_missing(exc):
                raise self._translate(exc, "delete", name, log) from exc
            self._conflict()
            return False
        except AzureError as exc:
            raise self._translate(exc, "delete", name, log) from exc
        return True

    # -- helpers -------------------------------------------------------------------------------
    def _options(self, log: RetryLog, deadline: datetime | None = None) -> dict[str, Any]:
        """Per-call options: the response hook (clock, counts), the retry log, the deadline."""
        until = None
        if deadline is not None:
            until = time.monotonic() + max(0.0, (deadline - self.now()).total_seconds())
        return {"raw_response_hook": self._on_response, **call_options(log, until)}

    def _conflict(self, put: RetryLog | None = None) -> None:
        # A put whose condition failed on a retry may have failed because the first attempt was
        # applied and only its response was lost: the store then reads the blob to tell.
        if put is not None:
            self._tls.retried = put.retries > 0
        with self._lock:
            self.conflicts += 1

    def last_put_retried(self) -> bool:
        """True when this thread's last ``put`` lost its condition on a retried attempt."""
        return bool(getattr(self._tls, "retried", False))

    def _translate(
        self, exc: AzureError, action: str, name: str, log: RetryLog
    ) -> EventHubIngestError:
        """One of our error types for an Azure error; the message names no secret."""
        return _translate(exc, action, name, self.container, self.endpoint, log)
