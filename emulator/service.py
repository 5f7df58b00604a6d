"""What the emulator answers as Event Hubs: entities, authorization, readers, CBS, management.

One :class:`Service` per server holds the namespace, the authenticator and the readers of each
partition and consumer group, and what every connection shares (the event loop, the limits).
It knows links and connections only by what it asks of them: an audience set per connection,
and a :class:`Reader` per partition reader.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from dagster_eventhub_ingest.emulator.auth import Authenticator
from dagster_eventhub_ingest.emulator.hub import Hub, Namespace, Partition
from dagster_eventhub_ingest.emulator.wire import (
    EPOCH,
    MAX_CONCURRENT_READERS,
    SELECTOR,
    SELECTOR_FILTER,
    SELECTOR_FILTER_CODE,
    LinkRefused,
    path_of,
    response,
    text_of,
)
from dagster_eventhub_ingest.resources.amqp.codec import (
    Described,
)

logger = logging.getLogger(__name__)

R = TypeVar("R", bound="Reader")


class Reader(Protocol):
    """A partition reader as the service tracks it (quota, owner level, new-event wake-ups)."""

    @property
    def key(self) -> tuple[str, str, str]: ...
    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def hub(self) -> Hub: ...
    @property
    def consumer_group(self) -> str: ...
    @property
    def partition(self) -> Partition: ...
    @property
    def epoch(self) -> int | None: ...
    @property
    def cursor(self) -> int: ...
    @property
    def pump(self) -> Callable[[], None]: ...

    def stolen(self, description: str) -> None: ...


class Service:
    """The Event Hubs side of one emulator: what its connections ask and share."""

    def __init__(
        self,
        namespace: Namespace,
        auth: Authenticator,
        host: str,
        max_message_size: int,
        max_frame_size: int,
        idle_timeout: float | None,
    ) -> None:
        self.namespace = namespace
        self.auth = auth
        self.host = host
        self.port = 0  # set once the server is bound (entity names carry it)
        self.max_message_size = max_message_size
        self.max_frame_size = max_frame_size
        self.idle_timeout = idle_timeout
        self.container_id = f"eventhubs-emulator-{uuid.uuid4().hex[:8]}"
        self.connections: set[Any] = set()
        self.readers: dict[tuple[str, str, str], list[Reader]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on (set when it starts)."""
        assert self._loop is not None, "EmulatorServer.start() has not run"
        return self._loop

    @loop.setter
    def loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    # -- entity lookup ------------------------------------------------------------------------

    def _entity(self, hub_name: str) -> str:
        return f"sb://{self.host}:{self.port}/{hub_name}"

    def _hub(self, name: str) -> Hub:
        hub = self.namespace.get(name)
        if hub is None:
            raise LinkRefused(
                "amqp:not-found",
                f"The messaging entity '{self._entity(name)}' could not be found. To know more "
                "visit https://aka.ms/sbResourceMgrExceptions.",
            )
        return hub

    def _partition(self, hub: Hub, partition_id: str) -> Partition:
        partition = hub.partition(partition_id)
        if partition is None:
            raise LinkRefused(
                "com.microsoft:argument-out-of-range",
                "The specified partition is invalid for an EventHub partition sender or receiver."
                f" It should be between 0 and {len(hub.partitions) - 1}.",
            )
        return partition

    def _check_authorized(self, authorized: set[str], hub: Hub, consumer_group: str | None) -> None:
        wanted = {f"/{hub.name.lower()}", "/"}
        if consumer_group is not None:
            wanted.add(f"/{hub.name.lower()}/consumergroups/{consumer_group.lower()}")
        for audience in authorized:
            path = "/" + "/".join(path_of(audience)).lower()
            if path in wanted:
                return
        raise LinkRefused(
            "amqp:unauthorized-access",
            f"Unauthorized access. No CBS token was put for '{self._entity(hub.name)}'; the "
            "client must authenticate over $cbs first.",
        )

    def open_producer(self, authorized: set[str], address: str) -> tuple[Hub, Partition | None]:
        """Resolve a sender target ``<hub>`` or ``<hub>/Partitions/<id>``, or refuse."""
        parts = path_of(address)
        if not parts:
            raise LinkRefused("amqp:not-found", f"link target {address!r} names no event hub")
        hub = self._hub(parts[0])
        self._check_authorized(authorized, hub, None)
        if len(parts) == 1:
            return hub, None
        if len(parts) == 3 and parts[1].lower() == "partitions":
            return hub, self._partition(hub, parts[2])
        raise LinkRefused(
            "amqp:not-found",
            f"link target {address!r} is not '<hub>' or '<hub>/Partitions/<id>'",
        )

    def open_consumer(
        self,
        authorized: set[str],
        address: str,
        source: list[Any] | None,
        properties: dict[Any, Any],
        make_reader: Callable[[Hub, str, Partition, int, int | None], R],
    ) -> R:
        """Resolve ``<hub>/ConsumerGroups/<cg>/Partitions/<id>`` and the start filter, or refuse;
        ``make_reader(hub, consumer_group, partition, start, owner_level)`` makes the reader
        admitted (or refused) here."""
        parts = path_of(address)
        if (
            len(parts) != 5
            or parts[1].lower() != "consumergroups"
            or parts[3].lower() != "partitions"
        ):
            raise LinkRefused(
                "amqp:not-found",
                f"link source {address!r} is not '<hub>/ConsumerGroups/<cg>/Partitions/<id>'",
            )
        hub = self._hub(parts[0])
        cg = next((g for g in hub.consumer_groups if g.lower() == parts[2].lower()), None)
        if cg is None:
            raise LinkRefused(
                "amqp:not-found",
                f"The messaging entity '{self._entity(hub.name)}/consumergroups/{parts[2]}' could "
                "not be found. To know more visit https://aka.ms/sbResourceMgrExceptions.",
            )
        partition = self._partition(hub, parts[4])
        self._check_authorized(authorized, hub, cg)
        start = self._start_sequence(partition, source)
        epoch = None
        for key, value in properties.items():
            if (key.encode() if isinstance(key, str) else key) == EPOCH and value is not None:
                epoch = int(value)
        reader = make_reader(hub, cg, partition, start, epoch)
        self._admit_reader(reader)
        return reader

    def _start_sequence(self, partition: Partition, source: list[Any] | None) -> int:
        filters = source[7] if source and len(source) > 7 and isinstance(source[7], dict) else {}
        expression = None
        for value in filters.values():
            if isinstance(value, Described):
                descriptor = value.descriptor
                if isinstance(descriptor, str):
                    descriptor = descriptor.encode()
                if descriptor in (SELECTOR_FILTER, SELECTOR_FILTER_CODE):
                    expression = text_of(value.value)
        if expression is None:
            return partition.begin_sequence_number
        match = SELECTOR.match(expression)
        if match is None:
            raise LinkRefused(
                "amqp:invalid-field",
                f"selector filter {expression!r} is not supported; expected "
                "\"amqp.annotation.x-opt-(offset|sequence-number|enqueued-time) >[=] '<value>'\"",
            )
        kind, op, value = match.group(1).lower(), match.group(2), match.group(3)
        if not (value in ("-1", "@latest") and kind == "offset"):
            try:
                int(value)
            except ValueError:
                raise LinkRefused(
                    "amqp:invalid-field",
                    f"selector filter {expression!r}: {value!r} is not a number",
                ) from None
        return partition.start_sequence(kind, value, op == ">=")

    def _admit_reader(self, link: Reader) -> None:
        readers = [r for r in self.readers.get(link.key, []) if not r.closed]
        epochs = [r.epoch for r in readers if r.epoch is not None]
        where = (
            f"hub '{link.hub.name}', consumer group '{link.consumer_group}', "
            f"partition '{link.partition.id}'"
        )
        if link.epoch is None:
            if epochs:
                raise LinkRefused(
                    "amqp:link:stolen",
                    f"At least one receiver for the endpoint is created with epoch of "
                    f"'{max(epochs)}', and so non-epoch receiver is not allowed. Either reconnect "
                    f"with a higher epoch, or make sure all epoch receivers are closed or "
                    f"disconnected. ({where})",
                )
            if len(readers) >= MAX_CONCURRENT_READERS:
                raise LinkRefused(
                    "amqp:resource-limit-exceeded",
                    f"Exceeded the maximum number of allowed receivers per partition in a consumer "
                    f"group which is {MAX_CONCURRENT_READERS}. ({where})",
                )
            return
        if epochs and max(epochs) > link.epoch:
            raise LinkRefused(
                "amqp:link:stolen",
                f"Receiver '{link.name}' with epoch '{link.epoch}' cannot be created because a "
                f"receiver with a higher epoch '{max(epochs)}' already exists. ({where})",
            )
        for old in readers:
            old_epoch = old.epoch if old.epoch is not None else 0
            old.stolen(
                f"New receiver '{link.name}' with higher epoch of '{link.epoch}' is created hence "
                f"current receiver '{old.name}' with epoch '{old_epoch}'"
                f" is getting disconnected. If you are recreating the receiver, make sure a higher "
                f"epoch is used. ({where})"
            )

    def register_reader(self, link: Reader) -> None:
        """Track a reader (quota, epoch) and wake it on new events."""
        readers = [r for r in self.readers.get(link.key, []) if not r.closed]
        readers.append(link)
        self.readers[link.key] = readers
        link.partition.listeners.add(link.pump)
        logger.info(
            "reader %s attached: hub %s, consumer group %s, partition %s, owner level %s, from "
            "sequence number %d",
            link.name,
            link.hub.name,
            link.consumer_group,
            link.partition.id,
            link.epoch,
            link.cursor,
        )

    def unregister_reader(self, link: Reader) -> None:
        """Forget a detached reader."""
        readers = self.readers.get(link.key)
        if readers and link in readers:
            readers.remove(link)

    # -- CBS and management -------------------------------------------------------------------

    def handle_cbs(self, authorized: set[str], request: dict[str, Any]) -> bytes:
        """Answer a put-token as the service does.

        202 for a valid token; 400 for a malformed request; 401 for a wrong key, a bad or
        expired signature, or a token that does not cover the audience; 404 when the audience
        names a hub (or consumer group, or namespace host) that does not exist. An accepted
        audience is added to ``authorized`` (the connection's).
        """
        app = request["app"]
        operation, token_type = text_of(app.get("operation")), text_of(app.get("type"))
        name, token = text_of(app.get("name")), text_of(request["body"])
        mid = request["message_id"]
        problem = None
        if operation != "put-token":
            problem = f"operation {operation!r} is not supported; expected 'put-token'"
        elif not name:
            problem = "the 'name' application property (the token audience) is missing"
        elif not token:
            problem = "the message body must be the token string"
        if problem is not None:
            logger.info("CBS put-token rejected: %s", problem)
            return response(mid, 400, problem)
        assert name is not None and token is not None
        missing = self._missing_entity(name)
        if missing is not None:
            logger.info("CBS put-token for %s: 404 (%s)", name, missing)
            return response(mid, 404, missing)
        status, reason = self.auth.check(token_type or "", token, name, app.get("expiration"))
        if status >= 300:
            logger.info("CBS put-token for %s refused: %d %s", name, status, reason)
            description = reason if status != 401 else f"{reason} TrackingId:{uuid.uuid4()}"
            return response(mid, status, description)
        authorized.add(name)
        return response(mid, 202, "Accepted")

    def _missing_entity(self, audience: str) -> str | None:
        """The service's 404 text if ``audience`` names something this namespace lacks."""
        if not self.auth.serves_host(audience):
            return (
                f"The messaging entity '{audience}' could not be found (this emulator serves "
                f"{', '.join(sorted(self.auth.namespaces))}). To know more visit "
                "https://aka.ms/sbResourceMgrExceptions."
            )
        parts = path_of(audience) if "://" in audience else path_of("sb://" + audience)
        if not parts:
            return None  # the namespace itself
        if self.namespace.get(parts[0]) is None:
            return (
                f"The messaging entity '{self._entity(parts[0])}' could not be found. To know "
                "more visit https://aka.ms/sbResourceMgrExceptions."
            )
        return None  # an unknown consumer group is refused at attach, as the service does

    def handle_management(self, authorized: set[str], request: dict[str, Any]) -> bytes:
        """Answer a management READ of a hub or a partition."""
        app = request["app"]
        mid = request["message_id"]
        operation, entity_type = text_of(app.get("operation")), text_of(app.get("type"))
        name = text_of(app.get("name")) or ""
        if not app.get("security_token") and not authorized:
            return response(mid, 401, "Unauthorized: the request carries no security_token")
        if operation != "READ":
            return response(mid, 400, f"operation {operation!r} is not supported; use 'READ'")
        hub = self.namespace.get(name)
        if hub is None:
            return response(
                mid,
                404,
                f"The messaging entity '{self._entity(name)}' could not be found. To know more "
                "visit https://aka.ms/sbResourceMgrExceptions.",
            )
        if entity_type == "com.microsoft:eventhub":
            return response(mid, 200, "OK", hub.properties())
        if entity_type == "com.microsoft:partition":
            pid = text_of(app.get("partition")) or ""
            partition = hub.partition(pid)
            if partition is None:
                return response(
                    mid,
                    400,
                    "The specified partition is invalid for an EventHub partition sender or "
                    f"receiver. It should be between 0 and {len(hub.partitions) - 1}.",
                )
            return response(mid, 200, "OK", partition.properties())
        return response(mid, 400, f"type {entity_type!r} is not supported")
