"""Unknown hubs, partitions and consumer groups, and malformed CBS requests, seen from the SDK."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from azure.eventhub import EventData
from azure.eventhub._pyamqp import AMQPClient
from azure.eventhub._pyamqp.authentication import SASLPlainAuth
from azure.eventhub._pyamqp.message import Message
from azure.eventhub._pyamqp.utils import generate_sas_token
from azure.eventhub.exceptions import ConnectError, ConnectionLostError, EventHubError

from dagster_eventhub_ingest.emulator.testing import (
    KEY_NAME,
    KEY_VALUE,
    EmulatedHub,
    EmulatorHandle,
)

pytestmark = pytest.mark.integration

MakeHub = Callable[..., EmulatedHub]


def _missing_hub(hub: EmulatedHub) -> EmulatedHub:
    return EmulatedHub("no-such-hub", hub.connection_string, ("0",))


def test_unknown_hub_management(make_eventhub: MakeHub) -> None:
    missing = _missing_hub(make_eventhub(partitions=1))
    with missing.producer(retry_total=0) as producer, pytest.raises(ConnectError) as info:
        producer.get_eventhub_properties()
    assert "404" in str(info.value)
    assert "'sb://127.0.0.1:" in str(info.value) and "no-such-hub' could not be found" in str(
        info.value
    )


def test_unknown_hub_send_and_receive(make_eventhub: MakeHub) -> None:
    missing = _missing_hub(make_eventhub(partitions=1))
    with missing.producer(retry_total=0) as producer, pytest.raises(EventHubError) as info:
        producer.send_event(EventData(b"x"), partition_id="0")
    assert "no-such-hub' could not be found" in str(info.value)
    with pytest.raises(EventHubError, match="no-such-hub' could not be found"):
        missing.receive("0", "-1", 1, timeout=10, client_kwargs={"retry_total": 0})


def test_unknown_partition(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=2)
    with hub.producer(retry_total=0) as producer:
        with pytest.raises(ConnectError, match="It should be between 0 and 1"):
            producer.get_partition_properties("7")
        with pytest.raises(ConnectError, match="Invalid partition"):
            producer.send_event(EventData(b"x"), partition_id="7")
    # The SDK checks a reader's id against the hub's partition ids (read from the emulator)...
    with pytest.raises(ValueError, match=r"Wrong partition id:7. The eventhub has partitions"):
        hub.receive("7", "-1", 1, timeout=10, client_kwargs={"retry_total": 0})
    # ...and a link that gets past that check is refused by the emulator itself.
    with hub.consumer(retry_total=0) as client:
        consumer = client._create_consumer("$Default", "7", "-1", on_event_received=print)
        deadline = time.monotonic() + 10
        with pytest.raises(ConnectError, match="It should be between 0 and 1"):
            while time.monotonic() < deadline:
                consumer.receive(max_wait_time=0.2)
        consumer.close()


def test_unknown_consumer_group(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1, consumer_groups=("analytics",))
    hub.send("0", [b"hello"])
    assert [e.body_as_str() for e in hub.receive("0", "-1", 1, consumer_group="analytics")] == [
        "hello"
    ]
    assert [e.body_as_str() for e in hub.receive("0", "-1", 1, consumer_group="ANALYTICS")] == [
        "hello"
    ]
    with pytest.raises(ConnectionLostError) as info:
        hub.receive("0", "-1", 1, consumer_group="nope", client_kwargs={"retry_total": 0})
    assert f"{hub.name}/consumergroups/nope' could not be found" in str(info.value)


def _raw_cbs(
    emulator: EmulatorHandle, body: object, app: dict[str, object], token_type: str
) -> tuple[int, bytes]:
    """Send one put-token on $cbs with the SDK's own AMQP client (no CBS auth of its own)."""
    client = AMQPClient(
        f"127.0.0.1:{emulator.port}", auth=SASLPlainAuth("user", "password"), use_tls=False
    )
    client.open()
    try:
        status, description, _ = client.mgmt_request(
            Message(value=body, application_properties=app),
            operation="put-token",
            operation_type=token_type,
            node="$cbs",
            status_code_field=b"status-code",
            description_fields=b"status-description",
        )
    finally:
        client.close()
    return int(status), description


def test_cbs_put_token(eventhub_emulator: EmulatorHandle, make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1)
    audience = f"sb://127.0.0.1:{eventhub_emulator.port}/{hub.name}"
    good = generate_sas_token(audience, KEY_NAME, KEY_VALUE, int(time.time()) + 600)
    app = {"name": audience, "expiration": int(time.time()) + 600}
    sastoken = "servicebus.windows.net:sastoken"
    assert _raw_cbs(eventhub_emulator, good, app, sastoken) == (202, b"Accepted")

    status, why = _raw_cbs(eventhub_emulator, good, app, "bogus-type")
    assert status == 400 and b"'bogus-type' is not supported" in why
    status, why = _raw_cbs(eventhub_emulator, good, {"expiration": 1}, sastoken)
    assert status == 400 and b"'name'" in why
    status, why = _raw_cbs(eventhub_emulator, None, app, sastoken)
    assert status == 400 and b"body must be the token" in why
    status, why = _raw_cbs(eventhub_emulator, "not a sas token", app, sastoken)
    assert status == 401 and b"InvalidSignature" in why
