"""The one management client's pure parts: partition id order, what properties become, and
how SDK errors are classified."""

from __future__ import annotations

from datetime import UTC, datetime

from resources.errors import ConfigurationError, EventHubUnavailableError
from resources.hub_client import (
    EventHubClient,
    partition_info_from_properties,
    sort_partition_ids,
)
from resources.settings import EventHubSettings


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
    assert info.last_enqueued_time == datetime(2024, 5, 1, 12, tzinfo=UTC)
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


SECRET = "c2VjcmV0LWtleQ=="


def _client(credential: str = "connection_string") -> EventHubClient:
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


def _raised_from(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as cause:
            raise outer from cause
    except Exception as err:
        return err


def test_a_refused_credential_is_a_configuration_error_by_type_and_status() -> None:
    """What the SDK raises when a credential is refused, as types and statuses, not only text."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
    from azure.eventhub.exceptions import AuthenticationError, EventHubError

    forbidden = HttpResponseError(message="Forbidden")
    forbidden.status_code = 403
    refusals = {
        # A wrong SAS key: the CBS handshake answers 401 (what the emulator and Azure say).
        "HTTP 401 AuthenticationError: InvalidSignature: The token has an invalid signature.": (
            AuthenticationError(
                "CBS Token authentication failed.\nStatus code: 401\nDescription: "
                "InvalidSignature: The token has an invalid signature. TrackingId:abc"
            )
        ),
        # An SDK authentication error without any status or known text: refused by its type.
        "AuthenticationError: Management authentication failed.": AuthenticationError(
            "Management authentication failed."
        ),
        # No token at all (DefaultAzureCredential with nothing set up), wrapped by the SDK.
        "EventHubError: DefaultAzureCredential failed to retrieve a token": _raised_from(
            EventHubError("DefaultAzureCredential failed to retrieve a token"),
            ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token"),
        ),
        "HTTP 403 HttpResponseError: Forbidden": forbidden,
    }
    for expected, exc in refusals.items():
        for credential in ("connection_string", "default_azure_credential"):
            err = _client(credential)._unavailable("reading the hub's properties", exc)
            assert isinstance(err, ConfigurationError) and not err.retryable, (expected, err)
            msg = str(err)
            assert "refused the credential" in msg and expected in msg, msg
            assert "Retrying cannot help" in msg and SECRET not in msg
            if credential == "connection_string":
                assert "SharedAccessKeyName" in msg and "SharedAccessKey must be" in msg
            else:
                assert "'Azure Event Hubs Data Receiver' role" in msg


def test_an_authentication_timeout_or_5xx_stays_retryable() -> None:
    from azure.eventhub.exceptions import AuthenticationError

    for exc in (
        AuthenticationError("Authorization timeout."),
        AuthenticationError("CBS Token authentication failed.\nStatus code: 503\nDescription: x"),
        ConnectionRefusedError(111, "Connection refused"),
    ):
        err = _client()._unavailable("reading the hub's properties", exc)
        assert isinstance(err, EventHubUnavailableError) and err.retryable, exc
