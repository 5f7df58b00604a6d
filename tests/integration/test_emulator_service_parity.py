"""The emulator behaves like Event Hubs where the SDK's own live tests look: credentials, keyed
routing, delivery annotations, WebSockets, TLS, idle time-out (real SDK, sync and aio)."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.eventhub import (
    EventData,
    EventHubProducerClient,
    EventHubSharedKeyCredential,
    TransportType,
)
from azure.eventhub._buffered_producer._partition_resolver import PartitionResolver
from azure.eventhub._client_base import EventHubSASTokenCredential
from azure.eventhub.aio import EventHubProducerClient as AsyncProducer
from azure.eventhub.exceptions import AuthenticationError

from dagster_eventhub_ingest.emulator.auth import (
    AsyncTestTokenCredential,
    TestTokenCredential,
    make_test_jwt,
)
from dagster_eventhub_ingest.emulator.partition_key import partition_for_key
from dagster_eventhub_ingest.emulator.testing import (
    KEY_NAME,
    KEY_VALUE,
    EmulatedHub,
    EmulatorHandle,
    TestCertificates,
    make_test_certificates,
    running_emulator,
)
from dagster_eventhub_ingest.resources.amqp import framing

MakeHub = Callable[..., EmulatedHub]
SECRET = "jwt-test-secret-for-tests"


def test_key_hashing_equals_the_sdk_resolver_for_every_partition_count() -> None:
    rng = random.Random(7)
    keys = ["", "a", "ab", "abc", "x" * 12, "x" * 13, "héllo", "日本語", "😀emoji", "k" * 100]
    for _ in range(1500):
        alphabet = [rng.randint(32, 126), rng.randint(0x80, 0x7FF), rng.randint(0x800, 0x2FFFF)]
        keys.append("".join(chr(rng.choice(alphabet)) for _ in range(rng.randint(1, 40))))
    for count in range(1, 33):
        resolver = PartitionResolver([str(i) for i in range(count)])
        for key in keys:
            expected = resolver.get_partition_id_by_partition_key(key)
            assert str(partition_for_key(key, count)) == expected, (key, count)


# -- credentials ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_emulator() -> Iterator[EmulatorHandle]:
    """An emulator with a second key and Entra ID test mode."""
    keys = {KEY_NAME: KEY_VALUE, "send-only": "c2Vjb25kLWtleQ=="}
    with running_emulator(keys=keys, jwt_secret=SECRET) as emu:
        yield emu


def _producer(emu: EmulatorHandle, hub: EmulatedHub, credential: object) -> EventHubProducerClient:
    return EventHubProducerClient(
        fully_qualified_namespace=f"127.0.0.1:{emu.port}",
        eventhub_name=hub.name,
        credential=credential,  # type: ignore[arg-type]
        use_tls=False,
        retry_total=0,
    )


@pytest.mark.integration
def test_sas_keys_are_validated(auth_emulator: EmulatorHandle) -> None:
    hub = auth_emulator.create_hub(partitions=1)
    with hub.producer() as ok:  # the default key in the connection string
        assert ok.get_partition_ids() == ["0"]
    good = _producer(
        auth_emulator, hub, EventHubSharedKeyCredential("send-only", "c2Vjb25kLWtleQ==")
    )
    with good:
        good.send_event(EventData(b"x"), partition_id="0")
    for name, key, why in [
        (KEY_NAME, "wrong", "InvalidSignature"),
        ("nobody", KEY_VALUE, "no shared access key named 'nobody'"),
    ]:
        bad = _producer(auth_emulator, hub, EventHubSharedKeyCredential(name, key))
        with bad, pytest.raises(AuthenticationError, match=why):
            bad.get_eventhub_properties()


@pytest.mark.integration
def test_sas_expiry_and_audience(auth_emulator: EmulatorHandle) -> None:
    hub = auth_emulator.create_hub(partitions=1)
    other = auth_emulator.create_hub(partitions=1)
    host = f"127.0.0.1:{auth_emulator.port}"
    signer = EventHubSharedKeyCredential(KEY_NAME, KEY_VALUE)
    for_other = signer.get_token(f"sb://{host}/{other.name}").token
    client = _producer(auth_emulator, hub, EventHubSASTokenCredential(for_other, time.time() + 600))
    with client, pytest.raises(AuthenticationError, match="InvalidAudience"):
        client.get_eventhub_properties()
    namespace_wide = signer.get_token(f"sb://{host}/").token
    client = _producer(
        auth_emulator, hub, EventHubSASTokenCredential(namespace_wide, time.time() + 600)
    )
    with client:
        assert client.get_partition_ids() == ["0"]
    for_hub = signer.get_token(f"sb://{host}/{hub.name}").token
    client = _producer(auth_emulator, hub, EventHubSASTokenCredential(for_hub, time.time() - 5))
    with client, pytest.raises(AuthenticationError, match="xpired"):
        client.get_eventhub_properties()


@pytest.mark.integration
def test_put_token_for_a_missing_hub_is_404(auth_emulator: EmulatorHandle) -> None:
    hub = EmulatedHub("no-such-hub", auth_emulator.connection_string, ("0",))
    with hub.producer(retry_total=0) as client, pytest.raises(AuthenticationError) as info:
        client.get_eventhub_properties()
    assert "404" in str(info.value) and "no-such-hub' could not be found" in str(info.value)


@pytest.mark.integration
def test_entra_id_test_mode(auth_emulator: EmulatorHandle) -> None:
    hub = auth_emulator.create_hub(partitions=2)
    with _producer(auth_emulator, hub, TestTokenCredential(SECRET)) as client:
        client.send_event(EventData(b"jwt"), partition_id="1")
    got = hub.receive("1", "-1", expected=1)
    assert [e.body_as_str() for e in got] == ["jwt"]

    async def run_async() -> list[str]:
        client = AsyncProducer(
            fully_qualified_namespace=f"127.0.0.1:{auth_emulator.port}",
            eventhub_name=hub.name,
            credential=AsyncTestTokenCredential(SECRET),  # type: ignore[arg-type]
            use_tls=False,
        )
        async with client:
            return list(await client.get_partition_ids())

    assert asyncio.run(run_async()) == ["0", "1"]

    class Fixed:
        def __init__(self, token: str) -> None:
            self.token = token

        def get_token(self, *scopes: str, **kw: object) -> object:
            from azure.core.credentials import AccessToken

            return AccessToken(self.token, int(time.time()) + 600)

    _header, claims, _ = make_test_jwt(SECRET).split(".")
    unsigned = Fixed(f"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{claims}.")
    wrong_secret = Fixed(make_test_jwt("not-the-secret"))
    for credential, why in [(unsigned, "'none' is not accepted"), (wrong_secret, "signature")]:
        client = _producer(auth_emulator, hub, credential)
        with client, pytest.raises(AuthenticationError, match=why):
            client.get_partition_ids()


@pytest.mark.integration
def test_jwt_refused_outside_test_mode(
    make_eventhub: MakeHub, eventhub_emulator: EmulatorHandle
) -> None:
    hub = make_eventhub(partitions=1)
    client = _producer(eventhub_emulator, hub, TestTokenCredential(SECRET))
    with client, pytest.raises(AuthenticationError, match="not in Entra ID test mode"):
        client.get_partition_ids()


# -- routing and annotations ---------------------------------------------------------------------


@pytest.mark.integration
def test_single_keyed_events_are_routed_like_the_sdk_resolver(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=5)
    keys = [f"device-{i}" for i in range(12)]
    with hub.producer() as producer:
        for key in keys:
            producer.send_event(EventData(key), partition_key=key)
    resolver = PartitionResolver(list(hub.partition_ids))
    for pid in hub.partition_ids:
        expected = sorted(k for k in keys if resolver.get_partition_id_by_partition_key(k) == pid)
        got = hub.receive(pid, "-1", expected=len(expected), timeout=10) if expected else []
        assert sorted(e.body_as_str() for e in got) == expected
        keys_seen = [e.partition_key for e in got]
        assert [k.decode() if isinstance(k, bytes) else k for k in keys_seen] == [
            e.body_as_str() for e in got
        ]


@pytest.mark.integration
def test_delivery_annotations_are_kept(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1)
    event = EventData(b"annotated")
    event.raw_amqp_message.delivery_annotations = {b"trace": b"abc", b"hop": 3}
    with hub.producer() as producer:
        producer.send_event(event, partition_id="0")
    (plain,) = hub.receive("0", "-1", expected=1)
    annotations = plain.raw_amqp_message.delivery_annotations
    assert annotations[b"trace"] == b"abc" and annotations[b"hop"] == 3
    (tracked,) = hub.receive("0", "-1", expected=1, track_last_enqueued_event_properties=True)
    merged = tracked.raw_amqp_message.delivery_annotations
    assert merged[b"trace"] == b"abc" and merged[b"last_enqueued_sequence_number"] == 0


# -- transports ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return make_test_certificates(tmp_path_factory.mktemp("certs"))


def _roundtrip(emu: EmulatorHandle, port: int, transport: TransportType, **tls: object) -> None:
    hub = emu.create_hub(partitions=2)
    client = EventHubProducerClient.from_connection_string(
        emu.connection_string,
        eventhub_name=hub.name,
        transport_type=transport,
        custom_endpoint_address=f"sb://127.0.0.1:{port}",
        retry_total=0,
        **tls,  # type: ignore[arg-type]
    )
    with client:
        assert client.get_partition_ids() == ["0", "1"]
        batch = client.create_batch(partition_id="1")
        batch.add(EventData(b"over " + transport.name.encode()))
        client.send_batch(batch)
        props = client.get_partition_properties("1")
    assert props["last_enqueued_sequence_number"] == 0 and not props["is_empty"]
    stored = emu.call(lambda: emu.server.namespace.get(hub.name).partitions[1].events[0].payload)
    assert b"over " + transport.name.encode() in stored


@pytest.mark.integration
def test_amqp_over_websockets() -> None:
    with running_emulator(ws_port=0) as emu:
        assert emu.ws_port
        _roundtrip(emu, emu.ws_port, TransportType.AmqpOverWebsocket)
        with socket.create_connection(("127.0.0.1", emu.ws_port), timeout=5) as raw:
            raw.sendall(b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n")
            assert raw.recv(200).startswith(b"HTTP/1.1 404")


@pytest.mark.integration
def test_tls_with_a_private_ca(certificates: TestCertificates) -> None:
    with running_emulator(ws_port=0, tls_cert=certificates.cert, tls_key=certificates.key) as emu:
        assert "UseDevelopmentEmulator" not in emu.connection_string
        verify = {"connection_verify": certificates.ca}
        _roundtrip(emu, emu.port, TransportType.Amqp, **verify)
        assert emu.ws_port
        _roundtrip(emu, emu.ws_port, TransportType.AmqpOverWebsocket, **verify)
        hub = emu.create_hub(partitions=1)
        untrusted = EventHubProducerClient.from_connection_string(
            emu.connection_string,
            eventhub_name=hub.name,
            transport_type=TransportType.Amqp,
            custom_endpoint_address=f"sb://127.0.0.1:{emu.port}",
            retry_total=0,
        )
        with untrusted, pytest.raises(Exception, match=r"(?i)certificate"):
            untrusted.get_partition_ids()


@pytest.mark.integration
def test_idle_timeout_is_advertised_and_enforced() -> None:
    with running_emulator(idle_timeout=1.0) as emu:
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as raw:
            raw.sendall(framing.AMQP_HEADER + framing.open_("idle-client", 65536, None))
            data = b""
            started = time.monotonic()
            while chunk := raw.recv(65536):
                data += chunk
            elapsed = time.monotonic() - started
        frames = data[8:]
        _code, fields, _ = framing.parse_performative(frames[8 : int.from_bytes(frames[:4])])
        assert fields[4] == 1000  # idle-time-out advertised, in ms
        assert b"local-idle-timeout expired" in data
        assert 0.9 < elapsed < 5
        # The SDK reconnects by itself after the emulator closed its idle connection.
        hub = emu.create_hub(partitions=1)
        with hub.producer() as producer:
            producer.send_event(EventData(b"one"), partition_id="0")
            time.sleep(2.5)
            producer.send_event(EventData(b"two"), partition_id="0")
        assert [e.body_as_str() for e in hub.receive("0", "-1", expected=2)] == ["one", "two"]


def test_certificates_are_pem(certificates: TestCertificates) -> None:
    for path in (certificates.ca, certificates.cert, certificates.key):
        assert Path(path).read_bytes().startswith(b"-----BEGIN")
