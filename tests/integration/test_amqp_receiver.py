"""The reader's own AMQP receiver (resources/amqp/): what it says on the wire, and how it reads.

Its handshake, authorization and link are compared frame by frame, AMQP type by AMQP type, with
what the real azure-eventhub SDK sends for the same receive (recorded through a proxy in front of
the emulator): the SDK's frames are known to work against the service. Then its parts alone:
the transfer parser against the codec's decoder, SAS tokens against the SDK's credential, the
selector filter, the error conditions, token renewal, keep-alive frames, and the Entra ID path
against the emulator's JWT test mode.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagster_eventhub_ingest.resources.amqp import cbs as cbs_module
from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import (
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    decode,
    encode,
    split_list,
)
from dagster_eventhub_ingest.resources.amqp.connection import Endpoint
from dagster_eventhub_ingest.resources.amqp.errors import AmqpError, AuthorizationError
from dagster_eventhub_ingest.resources.amqp.receiver import _transfer, selector
from dagster_eventhub_ingest.resources.errors import EventHubUnavailableError
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range
from dagster_eventhub_ingest.resources.eventhubs_source.receiver import (
    _PartitionPull,
    first_event_at,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from tests.support.faultproxy import FaultProxy

# -- the wire, typed ----------------------------------------------------------------------------

_TYPES = {
    0x40: "null",
    0x41: "boolean",
    0x42: "boolean",
    0x56: "boolean",
    0x43: "uint",
    0x52: "uint",
    0x70: "uint",
    0x44: "ulong",
    0x53: "ulong",
    0x80: "ulong",
    0x50: "ubyte",
    0x60: "ushort",
    0x54: "int",
    0x71: "int",
    0x55: "long",
    0x81: "long",
    0x83: "timestamp",
    0x98: "uuid",
    0xA0: "binary",
    0xB0: "binary",
    0xA1: "string",
    0xB1: "string",
    0xA3: "symbol",
    0xB3: "symbol",
}


def typed(data: bytes, pos: int = 0) -> tuple[Any, int]:
    """The AMQP value at ``pos`` as (type, value), compounds element by element; its end."""
    c = data[pos]
    if c == 0x00:
        descriptor, p = typed(data, pos + 1)
        value, p = typed(data, p)
        return ("described", descriptor, value), p
    if c in (0x45, 0xC0, 0xD0, 0xC1, 0xD1):
        spans, end = split_list(data, pos)
        items = [typed(data, a)[0] for a, _ in spans]
        if c in (0xC1, 0xD1):
            return ("map", dict(zip(items[::2], items[1::2], strict=True))), end
        return ("list", items), end
    if c in (0xE0, 0xF0):
        element = data[pos + 3] if c == 0xE0 else data[pos + 9]
        value, end = decode(data, pos)
        return (f"array of {_TYPES[element]}", tuple(value)), end
    value, end = decode(data, pos)
    return (_TYPES[c], value), end


def performatives(stream: bytes) -> list[tuple[int, list[Any], bytes]]:
    """A client's bytes as (performative code, typed fields, payload), headers skipped."""
    out = []
    i = 0
    while i < len(stream):
        if stream[i : i + 4] == b"AMQP":
            i += 8
            continue
        size = struct.unpack_from(">I", stream, i)[0]
        body = stream[i + 4 * stream[i + 4] : i + size]
        i += size
        if body:
            (_, (_, code), (_, fields)), at = typed(body)
            out.append((code, fields, body[at:]))
    return out


def sections(payload: bytes) -> dict[int, Any]:
    """A message's sections, typed, by section code."""
    out = {}
    i = 0
    while i < len(payload):
        (_, (_, code), value), i = typed(payload, i)
        out[code] = value
    return out


def first(frames: list[tuple[int, list[Any], bytes]], code: int, where: Callable[..., bool]):
    return next(f for f in frames if f[0] == code and where(f[1]))


def _receiver_connection(sent: list[bytearray]) -> list[tuple[int, list[Any], bytes]]:
    for stream in sent:
        frames = performatives(bytes(stream))
        if any(code == 0x12 and "Partitions" in repr(fields[5]) for code, fields, _ in frames):
            return frames
    raise AssertionError("no connection attached a partition receiver")


def _sdk_receives_once(connection_string: str, hub: str, position: Any, inclusive: bool) -> None:
    """The SDK's public receive of partition 0 at ``position``, until its first event."""
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(
        connection_string, consumer_group="$Default", eventhub_name=hub
    )
    got = threading.Event()
    thread = threading.Thread(
        target=client.receive,
        kwargs={
            "on_event": lambda _ctx, _event: got.set(),
            "partition_id": "0",
            "starting_position": position,
            "starting_position_inclusive": inclusive,
            "prefetch": 7,
        },
        daemon=True,
    )
    thread.start()
    got.wait(20)
    client.close()
    thread.join(10)
    assert got.is_set(), "the SDK received nothing"


@pytest.fixture
def recorded_hub(eventhub_emulator: Any) -> Iterator[tuple[EventHubSettings, FaultProxy]]:
    """A hub of three events, and a recording proxy in front of the emulator; the settings
    reach the hub through the proxy."""
    hub = eventhub_emulator.create_hub(partitions=1)
    hub.send("0", [b"a", b"b", b"c"])
    with FaultProxy(("127.0.0.1", eventhub_emulator.port)) as proxy:
        cs = hub.connection_string.replace(f":{eventhub_emulator.port}", f":{proxy.port}")
        yield EventHubSettings(eventhub_name=hub.name, connection_string=cs), proxy


def _without(fields: list[Any], *drop: int) -> list[Any]:
    return [f for i, f in enumerate(fields) if i not in drop]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("position", "inclusive"),
    [
        (1, True),
        (1, False),
        ("-1", False),
        (datetime(2020, 1, 2, 3, 4, 5, 678000, timezone.utc), True),
    ],
)
def test_the_handshake_and_the_link_are_the_sdks(
    recorded_hub: tuple[EventHubSettings, FaultProxy], position: Any, inclusive: bool
) -> None:
    """SASL, open, begin, the $cbs links, the put-token request and the partition's attach:
    every field of the same AMQP type and value as the SDK's (names, ids and the token aside)."""
    settings, proxy = recorded_hub
    assert settings.connection_string is not None
    _sdk_receives_once(settings.connection_string, settings.eventhub_name, position, inclusive)
    theirs = _receiver_connection(proxy.sent)
    del proxy.sent[:]
    pull = _PartitionPull(
        settings, "0", starting_position=position, prefetch=7, wait_seconds=10, inclusive=inclusive
    )
    with pull:
        assert next(iter(pull))
    ours = _receiver_connection(proxy.sent)

    def one(frames: list[Any], code: int, where: Callable[..., bool] = lambda _f: True) -> Any:
        return first(frames, code, where)

    # SASL init: ANONYMOUS, no initial response, the host name.
    assert one(ours, 0x41)[1] == one(theirs, 0x41)[1]
    # open: everything but the container id and the user agent's values.
    open_ours, open_theirs = one(ours, 0x10)[1], one(theirs, 0x10)[1]
    assert _without(open_ours, 0, 9) == _without(open_theirs, 0, 9)
    assert open_ours[9][1].keys() == open_theirs[9][1].keys()
    assert one(ours, 0x11)[1] == one(theirs, 0x11)[1]  # begin
    # The $cbs links: role, settle modes, source, target, delivery count (handles may differ).
    for role in (("boolean", True), ("boolean", False)):
        mine = one(ours, 0x12, lambda f, r=role: f[2] == r and "$cbs" in repr(f[5]))[1]
        sdk = one(theirs, 0x12, lambda f, r=role: f[2] == r and "$cbs" in repr(f[5]))[1]
        assert _without(mine, 0, 1) == _without(sdk, 0, 1), role
    # put-token: the same properties (a fresh message id), application properties and body type.
    put_ours, put_theirs = one(ours, 0x14)[2], one(theirs, 0x14)[2]
    mine, sdk = sections(put_ours), sections(put_theirs)
    assert mine[0x73][0] == sdk[0x73][0] == "list"
    # A message id of any of AMQP's four kinds (the SDK's is a ulong up to 5.12, a uuid later).
    assert {mine[0x73][1][0][0], sdk[0x73][1][0][0]} <= {"uuid", "ulong", "string", "binary"}
    assert [t for t, _ in mine[0x73][1][1:]] == [t for t, _ in sdk[0x73][1][1:]]
    app_ours = {k: v for k, v in mine[0x74][1].items() if k[1] not in ("expiration", "name")}
    app_theirs = {k: v for k, v in sdk[0x74][1].items() if k[1] not in ("expiration", "name")}
    assert app_ours == app_theirs
    # The audience: the consumer group, as the SDK's consumers put it (up to 5.12: the hub).
    audience = mine[0x74][1][("string", "name")]
    assert audience[1].endswith(f"/{settings.eventhub_name}/consumergroups/$Default")
    assert audience[1].startswith(sdk[0x74][1][("string", "name")][1])
    expiry = [v for k, v in mine[0x74][1].items() if k[1] == "expiration"]
    assert [t for t, _ in expiry] == [
        t for k, (t, _v) in sdk[0x74][1].items() if k[1] == "expiration"
    ]
    assert mine[0x77][0] == sdk[0x77][0] == "string"
    assert mine[0x77][1].startswith("SharedAccessSignature sr=")
    # The partition's attach: all but its name, handle and target's name (the SDK's shape).
    attach_ours = one(ours, 0x12, lambda f: "Partitions" in repr(f[5]))[1]
    attach_theirs = one(theirs, 0x12, lambda f: "Partitions" in repr(f[5]))[1]
    assert _without(attach_ours, 0, 1, 6, 12) == _without(attach_theirs, 0, 1, 6, 12)
    # Desired capabilities: the SDK's since 5.13 (5.12 asks for none; the service accepts both).
    georeplication = ("array of symbol", ("com.microsoft:georeplication",))
    assert attach_ours[12] == georeplication
    assert attach_theirs[12] in (georeplication, ("null", None))
    target_ours, target_theirs = attach_ours[6], attach_theirs[6]
    assert target_ours[2][1][0][1].startswith("receiver-link-")
    assert _without(target_ours[2][1], 0) == _without(target_theirs[2][1], 0)
    # Credit: the prefetch, in one flow naming the link.
    flows = [f for code, f, _ in ours if code == 0x13 and f[6] != ("null", None)]
    assert flows[-1][6] == ("uint", 7)


def test_a_time_without_a_zone_is_utc_in_the_selector() -> None:
    """(The handshake test compares each kind of position with the SDK's filter.)"""
    naive = selector(datetime(2024, 5, 6, 7, 8, 9, 123456), inclusive=True)
    assert naive == selector(datetime(2024, 5, 6, 7, 8, 9, 123456, timezone.utc), inclusive=True)
    assert naive == "amqp.annotation.x-opt-enqueued-time >= '1714979289123'"


def test_a_sas_token_is_the_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.eventhub import EventHubSharedKeyCredential

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.25)
    audience = "sb://ns.servicebus.windows.net/hub/consumergroups/$Default"
    theirs = EventHubSharedKeyCredential("policy name", "k3y=").get_token(audience)
    source = cbs_module._SharedKey("policy name", "k3y=")
    token = source.token(audience)
    assert token.value == theirs.token
    assert token.expires_on == theirs.expires_on == 1_700_003_600
    assert token.type == "servicebus.windows.net:sastoken"
    assert "k3y" not in repr(token)


def test_a_signature_in_the_connection_string_is_put_as_it_is() -> None:
    signature = "SharedAccessSignature sr=sb%3a%2f%2fns%2fhub&sig=abc%3d&se=1700000000&skn=p"
    settings = EventHubSettings(
        eventhub_name="hub",
        connection_string=f"Endpoint=sb://ns/;SharedAccessSignature={signature}",
    )
    token = cbs_module.token_source(settings).token("sb://ns/hub/consumergroups/$Default")
    assert (token.value, token.expires_on) == (signature, 1_700_000_000)


def test_where_a_connection_goes() -> None:
    emulator = EventHubSettings(
        eventhub_name="h",
        connection_string="Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=k;SharedAccessKey=v;"
        "UseDevelopmentEmulator=true",
    )
    assert Endpoint.of(emulator) == Endpoint("127.0.0.1", 5673, False, "127.0.0.1")
    service = EventHubSettings(
        eventhub_name="h",
        connection_string="Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
        "SharedAccessKey=v",
    )
    assert Endpoint.of(service) == Endpoint(
        "ns.servicebus.windows.net", 5671, True, "ns.servicebus.windows.net"
    )
    entra = EventHubSettings(
        eventhub_name="h",
        fully_qualified_namespace="ns.servicebus.windows.net",
        credential_type="default_azure_credential",
    )
    assert Endpoint.of(entra).tls and Endpoint.of(entra).port == 5671
    assert (
        cbs_module.audience_of(entra) == "sb://ns.servicebus.windows.net/h/consumergroups/$Default"
    )


# -- transfers ----------------------------------------------------------------------------------


def _transfer_frame(fields: list[Any], wide: bool = False) -> bytes:
    body = b"".join(encode(f) for f in fields)
    if wide:
        head = struct.pack(">BII", 0xD0, len(body) + 4, len(fields))
    else:
        head = struct.pack(">BBB", 0xC0, len(body) + 1, len(fields))
    return b"\x00\x53\x14" + head + body + b"\x00\x53\x75\xa0\x01x"


uints = st.one_of(st.just(0), st.integers(0, 255), st.integers(0, 2**32 - 1)).map(UInt)


@given(
    handle=uints,
    delivery=st.one_of(st.none(), uints),
    tag=st.one_of(st.none(), st.binary(max_size=300)),
    fmt=st.one_of(st.none(), uints),
    settled=st.one_of(st.none(), st.booleans()),
    more=st.one_of(st.none(), st.booleans()),
    tail=st.integers(0, 5),
    wide=st.booleans(),
)
def test_the_transfer_parser_reads_what_the_codec_decodes(
    handle: int,
    delivery: Any,
    tag: Any,
    fmt: Any,
    settled: Any,
    more: Any,
    tail: int,
    wide: bool,
) -> None:
    """Handle, ``more`` and where the message starts, for every encoding of those fields the
    codec writes; None (the codec's turn) only for what it does not read."""
    rest = [UByte(0), None, False, False, False][:tail]
    fields = [handle, delivery, tag, fmt, settled, more, *rest]
    data = _transfer_frame(fields, wide)
    _, decoded, at = framing.parse_performative(data)
    got = _transfer(bytearray(data), 3, len(data))
    assert got is not None
    assert got == (decoded[0], bool(len(decoded) > 5 and decoded[5]), at)


def test_the_transfer_parser_leaves_odd_encodings_to_the_codec() -> None:
    odd_handle = _transfer_frame([ULong(1), UInt(0), b"t", UInt(0), True, False])
    assert _transfer(bytearray(odd_handle), 3, len(odd_handle)) is None
    described_tag = _transfer_frame(
        [UInt(1), UInt(0), Described(ULong(1), b"t"), None, True, False]
    )
    assert _transfer(bytearray(described_tag), 3, len(described_tag)) is None
    truncated = _transfer_frame([UInt(1), UInt(0), b"t"])
    assert _transfer(bytearray(truncated), 3, 9) is None


# -- errors -------------------------------------------------------------------------------------


def _read_error(settings: EventHubSettings, pid: str = "0") -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(EventHubUnavailableError) as err:
        list(read_range(settings, PartitionRange(pid, 0, 9), receive_timeout=10))
    return str(err.value), time.monotonic() - started


@pytest.mark.integration
def test_what_a_new_connection_cannot_cure_fails_at_once_naming_the_cause(
    make_eventhub: Callable[..., Any],
) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [b"x"] * 10)
    base = hub.settings()
    cases = {
        "an unknown hub": (
            EventHubSettings(eventhub_name="nope", connection_string=hub.connection_string),
            "0",
            "put-token status 404",
        ),
        "an unknown consumer group": (
            EventHubSettings(
                eventhub_name=hub.name,
                consumer_group="nobody",
                connection_string=hub.connection_string,
            ),
            "0",
            "amqp:not-found: The messaging entity",
        ),
        "an unknown partition": (base, "7", "com.microsoft:argument-out-of-range"),
        "a wrong key": (
            EventHubSettings(
                eventhub_name=hub.name,
                connection_string=hub.connection_string.replace(
                    "SharedAccessKey=", "SharedAccessKey=wrong"
                ),
            ),
            "0",
            "put-token status 401",
        ),
    }
    for case, (settings, pid, expected) in cases.items():
        text, seconds = _read_error(settings, pid)
        assert expected in text, (case, text)
        assert f"Event Hub {settings.eventhub_name!r}" in text and f"partition {pid}" in text
        assert seconds < 3, (case, seconds)  # no reconnects
        assert "SharedAccessKey=" not in text and "sig=" not in text


@pytest.mark.integration
def test_a_stolen_link_is_an_unavailable_hub_naming_it(
    make_eventhub: Callable[..., Any],
) -> None:
    """An epoch reader arrives mid-read: the reader's link is detached with amqp:link:stolen,
    which no reconnect cures (a non-epoch reader is refused while the epoch reader is there)."""
    from azure.eventhub import EventHubConsumerClient

    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 5)
    client = EventHubConsumerClient.from_connection_string(
        hub.connection_string, consumer_group="$Default", eventhub_name=hub.name
    )

    def steal() -> None:
        time.sleep(1.0)
        client.receive(
            on_event=lambda *_: None, partition_id="0", owner_level=3, starting_position="@latest"
        )

    thread = threading.Thread(target=steal, daemon=True)
    thread.start()
    try:
        with pytest.raises(EventHubUnavailableError, match="amqp:link:stolen"):
            list(read_range(hub.settings(), PartitionRange("0", 0, 9), receive_timeout=20))
    finally:
        client.close()
        thread.join(10)


# -- connection life ------------------------------------------------------------------------------


@pytest.mark.integration
def test_tokens_are_put_again_before_they_lapse(
    make_eventhub: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a 2-second SAS lifetime the reader puts a fresh token on the same connection every
    ~1.8 s while it waits, and the read goes on: events sent 4 s later arrive on the link."""
    monkeypatch.setattr(cbs_module, "SAS_LIFETIME_SECONDS", 2)
    puts: list[float] = []
    authorize = cbs_module.Cbs.authorize

    def counted(self: Any) -> None:
        puts.append(time.monotonic())
        authorize(self)

    monkeypatch.setattr(cbs_module.Cbs, "authorize", counted)
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"first"])
    timer = threading.Timer(4.0, lambda: hub.send("0", [b"late"]))
    timer.start()
    try:
        pull = _PartitionPull(hub.settings(), "0", starting_position=0, prefetch=10, wait_seconds=1)
        seen: list[int] = []
        with pull:
            for events in pull:
                seen += [e.seq for e in events]
                if len(seen) == 2:
                    break
    finally:
        timer.cancel()
    assert seen == [0, 1]
    assert len(puts) >= 3  # the first, then renewals while waiting


@pytest.mark.integration
def test_keep_alive_frames_hold_an_idle_connection_open() -> None:
    """The emulator closes a connection silent for 1 s; a reader waiting 3 s for the rest of its
    range writes empty frames and keeps its one connection."""
    from dagster_eventhub_ingest.emulator.testing import running_emulator

    with running_emulator(hubs={"h": 1}, idle_timeout=1.0) as emu:
        hub = emu.hub("h")
        hub.send("0", [b"a"])
        timer = threading.Timer(3.0, lambda: hub.send("0", [b"b"]))
        timer.start()
        opened: list[Any] = []
        from dagster_eventhub_ingest.resources.amqp import connection

        open_ = connection.Connection.open

        def counted(self: Any) -> None:
            opened.append(self)
            open_(self)

        with contextlib.ExitStack() as stack:
            mp = stack.enter_context(pytest.MonkeyPatch.context())
            mp.setattr(connection.Connection, "open", counted)
            rows = list(read_range(hub.settings(), PartitionRange("0", 0, 1), receive_timeout=10))
        timer.cancel()
    assert sum(b.num_rows for b in rows) == 2
    assert len(opened) == 1


@pytest.mark.integration
def test_a_finished_read_leaves_no_reader_and_no_thread(
    eventhub_emulator: Any, make_eventhub: Callable[..., Any]
) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 50)
    threads = set(threading.enumerate())
    assert sum(b.num_rows for b in read_range(hub.settings(), PartitionRange("0", 0, 49))) == 50
    eventhub_emulator.wait_for_readers(hub.name, "0", 0)
    assert set(threading.enumerate()) <= threads


# -- Entra ID -----------------------------------------------------------------------------------

SECRET = "receiver-test-secret"


@pytest.fixture(scope="module")
def jwt_tls_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """An emulator in Entra ID test mode serving TLS (a namespace is always dialled with TLS)."""
    from dagster_eventhub_ingest.emulator.testing import make_test_certificates, running_emulator

    certificates = make_test_certificates(tmp_path_factory.mktemp("certs"))
    with running_emulator(
        jwt_secret=SECRET, tls_cert=certificates.cert, tls_key=certificates.key
    ) as emu:
        yield emu, str(certificates.ca)


def _entra_settings(
    emu: Any, ca: str, hub: str, secret: str, monkeypatch: pytest.MonkeyPatch
) -> EventHubSettings:
    from dagster_eventhub_ingest.emulator.auth import TestTokenCredential
    from dagster_eventhub_ingest.resources import settings as settings_module

    monkeypatch.setattr(settings_module, "make_credential", lambda *_a: TestTokenCredential(secret))
    monkeypatch.setattr(
        Endpoint,
        "of",
        classmethod(lambda _cls, _s: Endpoint("127.0.0.1", emu.port, True, "localhost", ca)),
    )
    return EventHubSettings(
        eventhub_name=hub,
        fully_qualified_namespace=f"localhost:{emu.port}",
        credential_type="default_azure_credential",
    )


@pytest.mark.integration
def test_an_entra_id_credential_reads_with_its_jwt(
    jwt_tls_emulator: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    emu, ca = jwt_tls_emulator
    hub = emu.create_hub(partitions=1)
    emu.enqueue(hub.name, "0", [framing.encode_section(0x75, f"e{n}".encode()) for n in range(20)])
    settings = _entra_settings(emu, ca, hub.name, SECRET, monkeypatch)
    rows = [r for b in read_range(settings, PartitionRange("0", 5, 19)) for r in b.to_pylist()]
    assert [r["body"] for r in rows] == [f"e{n}".encode() for n in range(5, 20)]
    assert first_event_at(settings, "0", "-1", inclusive=False, wait_seconds=10) == (0, "0")


@pytest.mark.integration
def test_an_entra_id_token_the_service_refuses_fails_at_once(
    jwt_tls_emulator: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    emu, ca = jwt_tls_emulator
    hub = emu.create_hub(partitions=1)
    settings = _entra_settings(emu, ca, hub.name, "another secret", monkeypatch)
    text, seconds = _read_error(settings)
    assert "put-token status 401" in text and seconds < 3


def test_a_credential_that_gives_no_token_is_an_authorization_error() -> None:
    class Broken:
        def get_token(self, *_scopes: str) -> Any:
            raise RuntimeError("no managed identity here")

    source = cbs_module._Credential(Broken())
    with pytest.raises(AuthorizationError, match="no managed identity here") as err:
        source.token("sb://ns/h/consumergroups/$Default")
    assert not err.value.retryable


def test_which_conditions_a_reconnect_may_cure() -> None:
    assert AmqpError("amqp:connection:forced").retryable
    assert AmqpError("com.microsoft:server-busy").retryable
    for condition in ("amqp:not-found", "amqp:link:stolen", "com.microsoft:argument-out-of-range"):
        assert not AmqpError(condition).retryable
    assert AuthorizationError(503, "busy").retryable and not AuthorizationError(404, "").retryable
    assert str(AmqpError(Symbol("amqp:not-found"), b"gone")) == "amqp:not-found: gone"
