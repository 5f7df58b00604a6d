"""The one management client's pure parts: partition id order, what properties become, and
the async twin's answers and errors (over a fake ``aio`` client), and how SDK errors are
classified."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.azure.hub_client import (
    EventHubClient,
    partition_info_from_properties,
    sort_partition_ids,
)
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubUnavailableError,
    RangeError,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from tests.support.raising import raised_from


def test_partition_ids_sort_numerically_then_by_name() -> None:
    assert sort_partition_ids(["10", "2", "b", "0", "a", "1"]) == ["0", "1", "2", "10", "a", "b"]


def test_properties_of_a_partition_with_events() -> None:
    info = partition_info_from_properties(
        "3",
        {
            "beginning_sequence_number": 5,
            "last_enqueued_sequence_number": 41,
            "last_enqueued_offset": "8192",
            "last_enqueued_time_utc": datetime(2024, 5, 1, 12),  # naive: the service's UTC
            "is_empty": False,
        },
    )
    assert (info.partition_id, info.begin_sequence_number) == ("3", 5)
    assert info.last_enqueued_sequence_number == 41 and info.last_enqueued_offset == "8192"
    assert info.last_enqueued_time == datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert not info.is_empty


def test_an_empty_partition_begins_after_its_last_event() -> None:
    """Nothing retained: the first readable event is last + 1, whatever beginning says."""
    info = partition_info_from_properties(
        "0",
        {
            "beginning_sequence_number": 0,
            "last_enqueued_sequence_number": 99,
            "last_enqueued_offset": "",
            "last_enqueued_time_utc": None,
            "is_empty": True,
        },
    )
    assert info.begin_sequence_number == 100 and info.is_empty
    assert info.last_enqueued_offset is None and info.last_enqueued_time is None


# -- the async twin (Airflow's lag trigger): the same answers and errors as the sync client ----

EH = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey=S3CRET"


class _AioClient:
    """What ``EventHubSettings.aio_consumer_client`` returns, over canned properties."""

    def __init__(self, ids: list[str], error: Exception | None = None) -> None:
        self.ids, self.error, self.asked, self.closed = ids, error, [], False

    async def __aenter__(self) -> _AioClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True

    async def get_eventhub_properties(self) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return {"partition_ids": self.ids, "created_at": datetime(2024, 5, 1)}

    async def get_partition_properties(self, pid: str) -> dict[str, Any]:
        self.asked.append(pid)
        return {
            "beginning_sequence_number": 0,
            "last_enqueued_sequence_number": int(pid) * 10,
            "last_enqueued_offset": "",
            "last_enqueued_time_utc": None,
            "is_empty": False,
        }


def _client(monkeypatch: pytest.MonkeyPatch, fake: _AioClient) -> tuple[EventHubClient, dict]:
    made: dict[str, Any] = {}

    def aio_consumer_client(self: EventHubSettings, **kwargs: Any) -> _AioClient:
        made.update(kwargs)
        return fake

    monkeypatch.setattr(EventHubSettings, "aio_consumer_client", aio_consumer_client)
    return EventHubClient(EventHubSettings("telemetry", connection_string=EH)), made


def test_async_snapshot_reads_ids_then_the_partitions_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _AioClient(["10", "2", "0"])
    client, made = _client(monkeypatch, fake)
    snap = asyncio.run(client.asnapshot())
    assert snap.partition_ids == ["0", "2", "10"] and sorted(fake.asked) == ["0", "10", "2"]
    assert snap.created_ms == int(datetime(2024, 5, 1, tzinfo=timezone.utc).timestamp() * 1000)
    assert list(snap.partitions) == ["0", "2", "10"]
    assert snap.partitions["10"].last_enqueued_sequence_number == 100
    assert fake.closed and made == client._client_kwargs()  # the sync client's retries

    fake.asked.clear()
    snap = asyncio.run(client.asnapshot(["2"]))
    assert fake.asked == ["2"] and list(snap.partitions) == ["2"]
    assert snap.partition_ids == ["0", "2", "10"]


def test_async_snapshot_names_unknown_partitions_as_the_sync_client_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _AioClient(["0", "1"])
    client, _ = _client(monkeypatch, fake)
    with pytest.raises(RangeError) as err:
        asyncio.run(client.asnapshot(["1", "7"]))
    assert str(err.value) == (
        "partition(s) 7 do not exist in hub 'telemetry'; valid partition ids: 0, 1"
    )
    assert fake.asked == []  # nothing is read for a request that names a missing partition


def _sdk_error(amqp: Exception) -> Exception:
    """The ``azure-eventhub`` error its transport raises for an AMQP error (it keeps it as
    ``details`` and raises while handling it)."""
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    try:
        try:
            raise amqp
        except Exception as caught:
            raise PyamqpTransport._create_eventhub_exception(caught)  # noqa: B904 (as the SDK)
    except Exception as err:
        return err


def _not_found(description: str) -> Exception:
    from azure.eventhub._pyamqp import error as amqp

    return _sdk_error(
        amqp.AMQPConnectionError(amqp.ErrorCondition.NotFound, description=description)
    )


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (
            _not_found("The messaging entity could not be found"),
            ConfigurationError,
            "eventhub.eventhub_name: Event Hubs ns.servicebus.windows.net/telemetry: the hub "
            "does not exist (reading the hub's properties: The messaging entity could not be "
            "found). Check eventhub_name and the namespace of the connection string.",
        ),
        (
            ConnectionError("refused SharedAccessKey=S3CRET;"),
            EventHubUnavailableError,
            "Event Hubs ns.servicebus.windows.net/telemetry: reading the hub's properties "
            "failed: ConnectionError: refused SharedAccessKey=***;. Check that the namespace is "
            "reachable from here; retrying later may help.",
        ),
    ],
)
def test_async_snapshot_errors_are_the_sync_clients(
    monkeypatch: pytest.MonkeyPatch, error: Exception, kind: type[Exception], message: str
) -> None:
    client, _ = _client(monkeypatch, _AioClient(["0"], error))
    with pytest.raises(kind) as err:
        asyncio.run(client.asnapshot())
    assert str(err.value) == message
    assert str(client._unavailable("reading the hub's properties", error)) == message


SECRET = "c2VjcmV0LWtleQ=="


def _sync_client(credential: str = "connection_string") -> EventHubClient:
    if credential == "connection_string":
        conn = (
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
            f"SharedAccessKey={SECRET}"
        )
        return EventHubClient(EventHubSettings(eventhub_name="hub", connection_string=conn))
    return EventHubClient(
        EventHubSettings(
            eventhub_name="hub",
            fully_qualified_namespace="ns.servicebus.windows.net",
            credential_type="default_azure_credential",
        )
    )


def test_a_refused_credential_is_a_configuration_error_by_type_and_status() -> None:
    """What the SDK raises when a credential is refused: told by type, status, AMQP condition."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
    from azure.eventhub._pyamqp import error as amqp
    from azure.eventhub.exceptions import EventHubError

    forbidden = HttpResponseError(message="Forbidden")
    forbidden.status_code = 403
    refusals = {
        # A wrong SAS key: the CBS handshake answers 401 (what the emulator and Azure say).
        "HTTP 401 AuthenticationError: InvalidSignature: The token has an invalid signature.": (
            _sdk_error(
                amqp.TokenAuthFailure(
                    401, b"InvalidSignature: The token has an invalid signature. TrackingId:abc"
                )
            )
        ),
        # A management request refused: the AMQP condition says so.
        "HTTP 401 AuthenticationError: 'Unauthorized'": _sdk_error(
            amqp.AuthenticationException(
                amqp.ErrorCondition.UnauthorizedAccess,
                description="Management authentication failed. Status code: 401, "
                "Description: 'Unauthorized'",
            )
        ),
        # No token at all (DefaultAzureCredential with nothing set up), wrapped by the SDK.
        "EventHubError: DefaultAzureCredential failed to retrieve a token": raised_from(
            EventHubError("DefaultAzureCredential failed to retrieve a token"),
            ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token"),
        ),
        "HTTP 403 HttpResponseError: Forbidden": forbidden,
    }
    for expected, exc in refusals.items():
        for credential in ("connection_string", "default_azure_credential"):
            err = _sync_client(credential)._unavailable("reading the hub's properties", exc)
            assert isinstance(err, ConfigurationError) and not err.retryable, (expected, err)
            msg = str(err)
            assert "refused the credential" in msg and expected in msg, msg
            assert "Retrying cannot help" in msg and SECRET not in msg
            if credential == "connection_string":
                assert "SharedAccessKeyName" in msg and "SharedAccessKey must be" in msg
            else:
                assert "'Azure Event Hubs Data Receiver' role" in msg


def test_an_authentication_timeout_or_5xx_stays_retryable() -> None:
    from azure.eventhub._pyamqp import error as amqp

    for exc in (
        # What the transport raises when the CBS handshake times out, and a 503 answer; the
        # text says "unauthorized" to show that it is not read.
        _sdk_error(
            amqp.AuthenticationException(
                amqp.ErrorCondition.InternalError, description="Authorization timeout."
            )
        ),
        _sdk_error(amqp.TokenAuthFailure(503, b"unauthorized, busy")),
        ConnectionRefusedError(111, "Connection refused"),
    ):
        err = _sync_client()._unavailable("reading the hub's properties", exc)
        assert isinstance(err, EventHubUnavailableError) and err.retryable, exc


def test_a_missing_hub_is_told_by_its_amqp_condition() -> None:
    from azure.eventhub._pyamqp import error as amqp

    missing = _sdk_error(
        amqp.AMQPConnectionError(
            amqp.ErrorCondition.NotFound,
            description="Management connection failed. Status code: 404, Description: 'x'",
        )
    )
    err = _sync_client()._unavailable("reading the hub's properties", missing)
    assert isinstance(err, ConfigurationError) and "the hub does not exist" in str(err)
    busy = _sdk_error(
        amqp.AMQPConnectionError(
            amqp.ErrorCondition.ResourceLimitExceeded, description="could not be found, NotFound"
        )
    )
    assert isinstance(_sync_client()._unavailable("x", busy), EventHubUnavailableError)
