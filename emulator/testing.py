"""Run the emulator in-process on a background thread, for tests, benchmarks, scripts and demos.

Example::

    from dagster_eventhub_ingest.emulator.testing import running_emulator

    with running_emulator(hubs={"telemetry": 4}) as emu:
        hub = emu.create_hub(partitions=2)            # uuid-named, created at runtime
        hub.send("0", [b"hello"])                     # through the real SDK producer
        print(hub.connection_string)

The emulator always stops when the ``with`` block ends, even on error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.emulator.auth import DEFAULT_KEY_NAME, DEFAULT_KEY_VALUE, Authenticator
from dagster_eventhub_ingest.emulator.hub import Namespace
from dagster_eventhub_ingest.emulator.server import (
    DEFAULT_IDLE_TIMEOUT,
    EmulatorServer,
    server_ssl_context,
)

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

__all__ = [
    "EmulatedHub",
    "EmulatorHandle",
    "TestCertificates",
    "connection_string",
    "emulator_subprocess",
    "make_test_certificates",
    "running_emulator",
]

# The emulator's default shared access key (the Microsoft emulator's well-known pair; not a
# secret): every emulator started without --key accepts tokens signed with it.
KEY_NAME = DEFAULT_KEY_NAME
KEY_VALUE = DEFAULT_KEY_VALUE


def connection_string(
    host: str, port: int, key_name: str = KEY_NAME, key: str = KEY_VALUE, tls: bool = False
) -> str:
    """Connection string for an emulator on ``host:port`` (no EntityPath).

    Without TLS it carries ``UseDevelopmentEmulator=true`` (the SDK then speaks plain AMQP to
    that port). With TLS the SDK always dials port 5671 (443 for WebSockets) of the Endpoint's
    host, so pass ``custom_endpoint_address=f"sb://{host}:{port}"`` and ``connection_verify``.
    """
    base = f"Endpoint=sb://{host}:{port};SharedAccessKeyName={key_name};SharedAccessKey={key}"
    return base if tls else base + ";UseDevelopmentEmulator=true"


@dataclass(frozen=True)
class EmulatedHub:
    """A hub on a running emulator, with what a test needs to reach it."""

    name: str
    connection_string: str = field(repr=False)
    partition_ids: tuple[str, ...]
    consumer_groups: tuple[str, ...] = ("$Default",)

    def settings(self, consumer_group: str = "$Default") -> EventHubSettings:
        """``EventHubSettings`` for this hub and ``consumer_group``."""
        from dagster_eventhub_ingest.resources.settings import EventHubSettings

        return EventHubSettings(
            eventhub_name=self.name,
            consumer_group=consumer_group,
            connection_string=self.connection_string,
        )

    def producer(self, **kwargs: Any) -> Any:
        """A new real ``EventHubProducerClient`` for this hub (close it when done)."""
        from azure.eventhub import EventHubProducerClient

        return EventHubProducerClient.from_connection_string(
            self.connection_string, eventhub_name=self.name, **kwargs
        )

    def consumer(self, consumer_group: str = "$Default", **kwargs: Any) -> Any:
        """A new real ``EventHubConsumerClient`` for this hub (close it when done)."""
        from azure.eventhub import EventHubConsumerClient

        return EventHubConsumerClient.from_connection_string(
            self.connection_string,
            consumer_group=consumer_group,
            eventhub_name=self.name,
            **kwargs,
        )

    def send(
        self,
        partition_id: str | None,
        bodies: Iterable[bytes | str],
        properties: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        partition_key: str | None = None,
    ) -> int:
        """Send ``bodies`` with the real SDK producer, in as few batches as fit; return the count.

        ``partition_id`` targets one partition; ``None`` sends to the hub (routed by
        ``partition_key`` if given, else round-robin). ``properties`` is one mapping for every
        event or one mapping (or None) per event.
        """
        from azure.eventhub import EventData

        items = list(bodies)
        if properties is None or isinstance(properties, Mapping):
            per_event: list[Mapping[str, Any] | None] = [properties] * len(items)
        else:
            per_event = list(properties)
            if len(per_event) != len(items):
                raise ValueError(
                    f"properties: {len(per_event)} mappings for {len(items)} bodies; give one "
                    "per body or a single mapping for all"
                )
        options: dict[str, Any] = {}
        if partition_id is not None:
            options["partition_id"] = partition_id
        if partition_key is not None:
            options["partition_key"] = partition_key
        producer = self.producer()
        try:
            batch = producer.create_batch(**options)
            for body, props in zip(items, per_event, strict=True):
                event = EventData(body)
                if props:
                    event_props: dict[str | bytes, Any] = {k: v for k, v in props.items()}
                    event.properties = event_props
                try:
                    batch.add(event)
                except ValueError:  # batch full: send it and start the next
                    producer.send_batch(batch)
                    batch = producer.create_batch(**options)
                    batch.add(event)
            if len(batch):
                producer.send_batch(batch)
        finally:
            producer.close()
        return len(items)

    def receive(
        self,
        partition_id: str,
        starting_position: Any = "-1",
        expected: int = 0,
        *,
        inclusive: bool = False,
        consumer_group: str = "$Default",
        timeout: float = 15.0,
        settle: float = 0.3,
        **receive_kwargs: Any,
    ) -> list[Any]:
        """Read one partition with the real SDK consumer; return the ``EventData`` received.

        Stops ``settle`` seconds after ``expected`` events arrived (so extras would show up), or
        after ``timeout``. ``starting_position`` is what the SDK takes: ``"-1"``, ``"@latest"``,
        an offset string, a sequence number (int) or a datetime.
        """
        import threading
        import time

        got: list[Any] = []
        errors: list[BaseException] = []
        done = threading.Event()
        client_kwargs = receive_kwargs.pop("client_kwargs", {})
        consumer = self.consumer(consumer_group, **client_kwargs)

        def on_event(_ctx: Any, event: Any) -> None:
            if event is not None:
                got.append(event)
                if expected and len(got) >= expected:
                    done.set()

        def on_error(_ctx: Any, error: BaseException) -> None:
            errors.append(error)
            done.set()

        thread = threading.Thread(
            target=consumer.receive,
            kwargs={
                "on_event": on_event,
                "on_error": on_error,
                "partition_id": partition_id,
                "starting_position": starting_position,
                "starting_position_inclusive": inclusive,
                "max_wait_time": 0.2,
                **receive_kwargs,
            },
            daemon=True,
        )
        thread.start()
        try:
            done.wait(timeout if expected else settle)
            if not errors:
                time.sleep(settle)
        finally:
            consumer.close()
            thread.join(10)
        if errors:
            raise errors[0]
        return got


class EmulatorHandle:
    """A running emulator: its address, and thread-safe hub creation."""

    def __init__(self, server: EmulatorServer, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop

    @property
    def host(self) -> str:
        """The bound host (127.0.0.1)."""
        return self.server.host

    @property
    def port(self) -> int:
        """The bound port."""
        return self.server.port

    @property
    def ws_port(self) -> int | None:
        """The AMQP-over-WebSockets port, if that listener is on."""
        return self.server.ws_port

    @property
    def connection_string(self) -> str:
        """Connection string for this emulator with its first key (no EntityPath).

        ``UseDevelopmentEmulator=true`` unless TLS is on (see :func:`connection_string`).
        """
        key_name, key = next(iter(self.server.auth.keys.items()), (KEY_NAME, KEY_VALUE))
        return connection_string(
            self.host, self.port, key_name, key, tls=self.server.ssl_context is not None
        )

    def create_hub(
        self,
        name: str | None = None,
        partitions: int = 4,
        consumer_groups: Iterable[str] = (),
        retention_seconds: float | None = None,
    ) -> EmulatedHub:
        """Create a hub now (``name`` defaults to a fresh uuid-based one); safe from any thread."""
        name = name or f"hub-{uuid.uuid4().hex[:16]}"
        groups = tuple(consumer_groups)
        hub = self.server.namespace.create_hub(name, partitions, groups, retention_seconds)
        return EmulatedHub(
            name=hub.name,
            connection_string=self.connection_string,
            partition_ids=tuple(hub.partition_ids),
            consumer_groups=tuple(sorted(hub.consumer_groups)),
        )

    def delete_hub(self, name: str) -> None:
        """Delete a hub and its events now (``create_hub(name)`` then makes a new, empty one)."""
        self.server.namespace.delete_hub(name)

    def hub(self, name: str) -> EmulatedHub:
        """An existing hub by name."""
        hub = self.server.namespace.get(name)
        if hub is None:
            raise KeyError(f"no hub named {name!r} on this emulator")
        return EmulatedHub(
            name=hub.name,
            connection_string=self.connection_string,
            partition_ids=tuple(hub.partition_ids),
            consumer_groups=tuple(sorted(hub.consumer_groups)),
        )

    def enqueue(self, hub: str, partition_id: str, messages: Iterable[bytes]) -> None:
        """Store AMQP-encoded messages in a partition as one send, as the service stores what
        any AMQP client sends: for sections the Python SDK cannot encode (chars, decimal32/64,
        described values, arrays), which Java and .NET clients send. Readers see them like any
        other event (the service's annotations added)."""
        target = self.server.namespace.get(hub)
        partition = None if target is None else target.partition(partition_id)
        if partition is None:
            raise KeyError(f"no partition {partition_id!r} of a hub named {hub!r}")
        self.call(partition.append, [bytes(m) for m in messages], None)

    def reader_count(self, hub: str, partition_id: str, consumer_group: str = "$Default") -> int:
        """How many readers are attached to a partition in a consumer group right now."""

        def count() -> int:
            readers = self.server.readers.get((hub, consumer_group.lower(), partition_id), [])
            return sum(1 for r in readers if not r.closed)

        return int(self.call(count))

    def wait_for_readers(
        self,
        hub: str,
        partition_id: str,
        count: int,
        consumer_group: str = "$Default",
        timeout: float = 15.0,
    ) -> None:
        """Block until exactly ``count`` readers are attached (e.g. before sending to @latest)."""
        import time

        deadline = time.monotonic() + timeout
        while self.reader_count(hub, partition_id, consumer_group) != count:
            if time.monotonic() > deadline:
                have = self.reader_count(hub, partition_id, consumer_group)
                raise TimeoutError(
                    f"hub {hub!r} partition {partition_id!r} consumer group {consumer_group!r}: "
                    f"{have} readers attached after {timeout}s, expected {count}"
                )
            time.sleep(0.05)

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the emulator's loop thread and return its result."""

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)


def _parse_hubs(hubs: Mapping[str, int] | Iterable[str] | None) -> list[tuple[str, int]]:
    if hubs is None:
        return []
    if isinstance(hubs, Mapping):
        return [(name, int(count)) for name, count in hubs.items()]
    out = []
    for spec in hubs:
        name, sep, count = spec.partition(":")
        out.append((name, int(count) if sep else 1))
    return out


@contextlib.contextmanager
def running_emulator(
    hubs: Mapping[str, int] | Iterable[str] | None = None,
    consumer_groups: Iterable[str] = (),
    data_dir: str | os.PathLike[str] | None = None,
    retention: float | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    max_message_size: int | None = None,
    keys: Mapping[str, str] | None = None,
    jwt_secret: str | None = None,
    namespaces: Iterable[str] = (),
    ws_port: int | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
) -> Iterator[EmulatorHandle]:
    """Start an emulator on a background thread; yield its handle; always stop it.

    ``hubs`` maps names to partition counts (or lists ``"name:partitions"`` specs); every hub
    gets the ``consumer_groups`` besides ``$Default``. ``data_dir`` persists events across
    restarts; ``retention`` (seconds) makes older events unreadable. ``port=0`` picks a free port.
    ``keys`` (name -> value; default the well-known pair), ``jwt_secret`` (Entra ID test mode)
    and ``namespaces`` (host names served; default any) are
    :class:`dagster_eventhub_ingest.emulator.auth.Authenticator`'s. ``ws_port`` (0 = free) turns on
    AMQP over WebSockets; ``tls_cert``/``tls_key`` (PEM files) serve TLS on both ports;
    ``idle_timeout`` (seconds, None = off) is advertised and enforced.
    """
    namespace = Namespace(data_dir, retention_seconds=retention)
    groups = tuple(consumer_groups)
    for name, count in _parse_hubs(hubs):
        namespace.create_hub(name, count, groups)
    kwargs: dict[str, Any] = {}
    if max_message_size is not None:
        kwargs["max_message_size"] = max_message_size
    server = EmulatorServer(
        namespace,
        host=host,
        port=port,
        auth=Authenticator(keys, jwt_secret, namespaces),
        ws_port=ws_port,
        ssl_context=server_ssl_context(tls_cert, tls_key),
        idle_timeout=idle_timeout,
        **kwargs,
    )
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []
    stop_event: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop_event
        stop_event = asyncio.Event()
        try:
            await server.start()
        except BaseException as exc:
            failure.append(exc)
            started.set()
            return
        started.set()
        try:
            await stop_event.wait()
        finally:
            await server.stop()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=f"eventhubs-emulator-{port}", daemon=True)
    thread.start()
    started.wait(30)
    if failure:
        thread.join(5)
        error = failure[0]
        raise RuntimeError(f"emulator failed to start on {host}:{port}: {error}") from error
    try:
        yield EmulatorHandle(server, loop)
    finally:
        if stop_event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop_event.set)
        thread.join(15)


@contextlib.contextmanager
def emulator_subprocess(hubs: Mapping[str, int]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run ``python -m dagster_eventhub_ingest.emulator serve`` on a free loopback port in its own
    process.

    For benchmarks that must not share the GIL with the emulator. Yields (connection string,
    process); the process is always stopped (SIGINT, then kill).
    """
    cmd = [sys.executable, "-m", "dagster_eventhub_ingest.emulator", "serve", "--port", "0"]
    for name, parts in hubs.items():
        cmd += ["--hub", f"{name}:{parts}"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        cmd,
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        conn = proc.stdout.readline().strip()
        if not conn.startswith("Endpoint="):
            raise RuntimeError(f"emulator did not start (said {conn!r})")
        yield conn, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class TestCertificates:
    """PEM files of a throwaway CA and a server certificate it signed (127.0.0.1, localhost)."""

    __test__ = False  # not a pytest test class

    ca: str  # pass as the SDK's connection_verify
    cert: str  # --tls-cert
    key: str  # --tls-key


def make_test_certificates(
    directory: str | os.PathLike[str], hosts: Sequence[str] = ("127.0.0.1", "localhost")
) -> TestCertificates:
    """Write a self-signed CA and a server certificate for ``hosts`` (IPs or DNS names)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    out = os.fspath(directory)
    os.makedirs(out, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ehingest emulator test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = TestCertificates(
        ca=os.path.join(out, "ca.pem"),
        cert=os.path.join(out, "server.pem"),
        key=os.path.join(out, "server-key.pem"),
    )
    with open(paths.ca, "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths.cert, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths.key, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return paths
