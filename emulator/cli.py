"""The emulator's own command line: ``python -m dagster_eventhub_ingest.emulator`` and ``ehingest
emulator``.

The emulator owns its argument parsing; the ``ehingest`` CLI mounts this group as its
``emulator`` subcommand.

Examples::

    ehingest emulator serve --port 5673 --hub telemetry:4 --hub audit:1 --consumer-group spark
    ehingest emulator send --connection-string "$CS" --hub telemetry --count 10000 --size 1024
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from typing import Any

import click

__all__ = ["emulator", "main"]

logger = logging.getLogger(__name__)


def _parse_hub(spec: str) -> tuple[str, int]:
    name, sep, count = spec.rpartition(":")
    if not sep or not name:
        raise click.BadParameter(
            f"{spec!r} is not NAME:PARTITIONS (e.g. 'telemetry:4')", param_hint="--hub"
        )
    try:
        partitions = int(count)
    except ValueError:
        raise click.BadParameter(
            f"{spec!r}: partition count {count!r} is not a number (e.g. 'telemetry:4')",
            param_hint="--hub",
        ) from None
    if not 1 <= partitions <= 1024:
        raise click.BadParameter(
            f"{spec!r}: partition count must be in 1..1024", param_hint="--hub"
        )
    return name, partitions


@click.group()
def emulator() -> None:
    """Local Event Hubs emulator (AMQP 1.0) that the real azure-eventhub SDK talks to."""


@emulator.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=5673, show_default=True, type=int, help="Port (0 = any free).")
@click.option(
    "--hub",
    "hubs",
    multiple=True,
    metavar="NAME:PARTITIONS",
    help="A hub to serve (repeatable), e.g. --hub telemetry:4.",
)
@click.option(
    "--consumer-group",
    "consumer_groups",
    multiple=True,
    metavar="NAME",
    help="A consumer group every hub gets besides $Default (repeatable).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Persist hubs and events here, so a later emulator process sees them.",
)
@click.option(
    "--retention",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Events older than this are no longer readable (default: kept forever).",
)
@click.option(
    "--max-message-size",
    type=int,
    default=1024 * 1024,
    show_default=True,
    help="Largest message (or batch) accepted, in bytes.",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="NAME=VALUE",
    help="A shared access key SAS tokens may be signed with (repeatable). Default: the "
    "well-known RootManageSharedAccessKey=SAS_KEY_VALUE. The first is put in the printed "
    "connection string.",
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="HOST",
    help="Host name the emulator answers for (repeatable); tokens for other hosts get 404. "
    "Default: any host.",
)
@click.option(
    "--jwt-test-secret",
    envvar="EHINGEST_EMULATOR_JWT_TEST_SECRET",
    default=None,
    metavar="SECRET",
    help="Entra ID test mode: accept HS256 JWTs signed with SECRET "
    "(dagster_eventhub_ingest.emulator.auth.TestTokenCredential issues them). "
    "Default: every JWT is refused.",
)
@click.option(
    "--ws-port",
    type=int,
    default=None,
    help="Also serve AMQP over WebSockets (/$servicebus/websocket) on this port (0 = any free).",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Serve TLS with this PEM certificate (chain) on both ports.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="The certificate's PEM private key (if not inside --tls-cert).",
)
@click.option(
    "--idle-timeout",
    type=float,
    default=240.0,
    show_default=True,
    metavar="SECONDS",
    help="Advertised idle time-out; a connection silent this long is closed (0 = never).",
)
def serve(
    host: str,
    port: int,
    hubs: tuple[str, ...],
    consumer_groups: tuple[str, ...],
    data_dir: str | None,
    retention: float | None,
    max_message_size: int,
    keys: tuple[str, ...],
    namespaces: tuple[str, ...],
    jwt_test_secret: str | None,
    ws_port: int | None,
    tls_cert: str | None,
    tls_key: str | None,
    idle_timeout: float,
) -> None:
    """Serve hubs until interrupted (SIGINT/SIGTERM stop it cleanly)."""
    from dagster_eventhub_ingest.emulator.auth import Authenticator, parse_key
    from dagster_eventhub_ingest.emulator.hub import EmulatorError, Namespace
    from dagster_eventhub_ingest.emulator.server import EmulatorServer, server_ssl_context
    from dagster_eventhub_ingest.emulator.testing import connection_string

    if retention is not None and retention <= 0:
        raise click.BadParameter(f"{retention} must be > 0 seconds", param_hint="--retention")
    if idle_timeout < 0:
        raise click.BadParameter(
            f"{idle_timeout} must be >= 0 seconds", param_hint="--idle-timeout"
        )
    key_map: dict[str, str] | None = None
    if keys:
        key_map = {}
        for spec in keys:
            try:
                name, value = parse_key(spec)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--key") from None
            key_map[name] = value
    try:
        ssl_context = server_ssl_context(tls_cert, tls_key)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tls-cert/--tls-key") from None
    auth = Authenticator(key_map, jwt_test_secret, namespaces)
    parsed = [_parse_hub(h) for h in hubs]
    try:
        namespace = Namespace(data_dir, retention_seconds=retention)
        for name, partitions in parsed:
            namespace.create_hub(name, partitions, consumer_groups)
    except EmulatorError as exc:
        raise click.UsageError(str(exc)) from exc
    if not namespace.hubs:
        raise click.UsageError("no hub to serve: give at least one --hub NAME:PARTITIONS")

    async def run() -> None:
        server = EmulatorServer(
            namespace,
            host=host,
            port=port,
            max_message_size=max_message_size,
            auth=auth,
            ws_port=ws_port,
            ssl_context=ssl_context,
            idle_timeout=idle_timeout or None,
        )
        try:
            await server.start()
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from exc
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        key_name, key = next(iter(auth.keys.items()))
        tls = ssl_context is not None
        click.echo(connection_string(host, server.port, key_name, key, tls=tls))
        for hub in namespace.hubs.values():
            groups = ", ".join(sorted(hub.consumer_groups))
            click.echo(
                f"hub {hub.name}: {len(hub.partitions)} partitions, consumer groups: {groups}",
                err=True,
            )
        scheme = "amqps" if tls else "amqp"
        click.echo(f"listening on {scheme}://{host}:{server.port}; Ctrl-C to stop", err=True)
        if server.ws_port is not None:
            ws = "wss" if tls else "ws"
            click.echo(
                f"AMQP over WebSockets on {ws}://{host}:{server.ws_port}/$servicebus/websocket",
                err=True,
            )
        if tls:
            click.echo(
                "TLS on: the SDK dials port 5671 (443 for WebSockets) of the Endpoint host, so "
                f"pass custom_endpoint_address='sb://{host}:<port>' and connection_verify="
                "'<your CA .pem>' to the client",
                err=True,
            )
        if jwt_test_secret:
            click.echo("Entra ID test mode: HS256 JWTs signed with the test secret", err=True)
        sys.stdout.flush()
        try:
            await stop.wait()
        finally:
            await server.stop()
            click.echo("emulator stopped", err=True)

    asyncio.run(run())


@emulator.command()
@click.option(
    "--connection-string",
    envvar="EVENTHUB_CONNECTION_STRING",
    required=True,
    help="Event Hubs connection string (or $EVENTHUB_CONNECTION_STRING).",
)
@click.option("--hub", required=True, help="Event hub name.")
@click.option("--count", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--size", default=1024, show_default=True, type=click.IntRange(min=1), help="Body bytes."
)
@click.option("--partition", "partition_id", default=None, help="Send to this partition id.")
@click.option("--partition-key", default=None, help="Route every event by this key.")
@click.option(
    "--rate",
    type=float,
    default=None,
    metavar="EVENTS_PER_S",
    help="Throttle to this many events per second (default: as fast as possible).",
)
def send(
    connection_string: str,
    hub: str,
    count: int,
    size: int,
    partition_id: str | None,
    partition_key: str | None,
    rate: float | None,
) -> None:
    """Send COUNT events of SIZE bytes with the real SDK producer; print the rate achieved."""
    from azure.eventhub import EventData, EventHubProducerClient

    from dagster_eventhub_ingest.resources.errors import redact

    if partition_id is not None and partition_key is not None:
        raise click.UsageError("give --partition or --partition-key, not both")
    if rate is not None and rate <= 0:
        raise click.BadParameter(f"{rate} must be > 0", param_hint="--rate")
    options: dict[str, Any] = {}
    if partition_id is not None:
        options["partition_id"] = partition_id
    if partition_key is not None:
        options["partition_key"] = partition_key
    try:
        producer = EventHubProducerClient.from_connection_string(
            connection_string, eventhub_name=hub
        )
    except ValueError as exc:
        raise click.BadParameter(redact(str(exc)), param_hint="--connection-string") from exc
    pad = os.urandom(max(size, 16)).hex().encode()[:size]
    sent = 0
    start = time.perf_counter()
    try:
        with producer:
            while sent < count:
                batch = producer.create_batch(**options)
                while sent < count:
                    body = f"{sent:012d}".encode()[:size] + pad[: max(size - 12, 0)]
                    try:
                        batch.add(EventData(body))
                    except ValueError:
                        break
                    sent += 1
                    if rate is not None and len(batch) >= max(1, int(rate / 10)):
                        break
                producer.send_batch(batch)
                if rate is not None:
                    ahead = sent / rate - (time.perf_counter() - start)
                    if ahead > 0:
                        time.sleep(ahead)
    except Exception as exc:  # the SDK's errors carry the endpoint, never the key
        raise click.ClickException(f"send to hub {hub!r} failed: {redact(str(exc))}") from exc
    elapsed = time.perf_counter() - start
    click.echo(
        f"sent {sent} events of {size} bytes to {hub} in {elapsed:.2f}s "
        f"({sent / elapsed if elapsed else 0:.0f} events/s)"
    )


def main() -> None:  # pragma: no cover - ``python -m dagster_eventhub_ingest.emulator``
    """Entry point for ``python -m dagster_eventhub_ingest.emulator``."""
    with contextlib.suppress(KeyboardInterrupt):
        emulator()
