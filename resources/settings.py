"""The Event Hub's frozen, picklable settings, and the columns every event becomes.

:class:`EventHubSettings` travels to Spark executors and into subprocesses, so it holds plain
values only; clients are built from it where they are used (``consumer_client()``, its ``aio``
twin, ``producer_client()``), never pickled. The connection string is kept out of ``repr`` and
every error message is redacted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dagster_eventhub_ingest.resources.azure.credentials import (
    CredentialOptions,
    CredentialType,
    make_async_credential,
    make_credential,
    parse_connection_string,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, redact
from dagster_eventhub_ingest.resources.store.records import HubRef

#: The columns every event becomes, with their Spark SQL types (the ``eventhubs`` source's schema,
#: ``dagster_eventhub_ingest.resources.eventhubs_source.schema``, is built from it). Names as in
#: azure-event-hubs-spark, so existing queries keep working, and ``amqpBody``: an amqp-value /
#: amqp-sequence body (``body`` is null then), or a message that is not valid AMQP, as received
#: (docs/spark_source.md). Plain strings, so what only describes the columns (a Dagster
#: materialization's column schema) needs no pyspark.
EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("body", "binary"),
    ("partition", "string"),
    ("offset", "string"),
    ("sequenceNumber", "bigint"),
    ("enqueuedTime", "timestamp"),
    ("publisher", "string"),
    ("partitionKey", "string"),
    ("properties", "map<string,string>"),
    ("systemProperties", "map<string,string>"),
    ("amqpBody", "binary"),
)
#: The column names of :data:`EVENT_FIELDS`.
EVENT_COLUMNS = tuple(name for name, _ in EVENT_FIELDS)

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.eventhub import (
        EventHubConnectionStringProperties,
        EventHubConsumerClient,
        EventHubProducerClient,
    )
    from azure.eventhub.aio import EventHubConsumerClient as AsyncEventHubConsumerClient

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_FIELDS",
    "ConnectionParts",
    "EventHubSettings",
    "entity_path",
    "parse_eventhub_connection_string",
]


def parse_eventhub_connection_string(conn_str: str) -> EventHubConnectionStringProperties:
    """Parse with the SDK's own parser; the error says what is wrong, never the value."""
    from azure.eventhub import parse_connection_string as sdk_parse

    try:
        return sdk_parse(conn_str)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"connection_string: {redact(str(exc)).rstrip('.')} (the value is not shown, it may "
            "hold a secret); copy it from the Azure portal (Event Hubs namespace or hub > "
            "Shared access policies > Connection string-primary key)"
        ) from None


def entity_path(conn_str: str | None) -> str | None:
    """The hub a connection string names (``EntityPath``), read by the SDK's parser; None if
    it names none."""
    if not conn_str:
        return None
    return parse_eventhub_connection_string(conn_str).eventhub_name or None


class ConnectionParts(NamedTuple):
    """What a connection string says, as the SDK's parser read it: plain values, so a settings
    object carries them to Spark's Python workers without importing the SDK there (the reader
    in a worker talks AMQP itself)."""

    fully_qualified_namespace: str
    shared_access_signature: str | None
    shared_access_key_name: str | None
    shared_access_key: str | None

    @classmethod
    def of(cls, sdk: EventHubConnectionStringProperties) -> ConnectionParts:
        """The parts the SDK's parser read."""
        return cls(
            sdk.fully_qualified_namespace,
            sdk.shared_access_signature,
            sdk.shared_access_key_name,
            sdk.shared_access_key,
        )


@dataclass(frozen=True)
class EventHubSettings:
    """Where to read events: a connection string, or a namespace plus an Entra ID credential.

    Example::

        EventHubSettings(eventhub_name="telemetry", connection_string=os.environ["EH_CONN"])
        EventHubSettings(eventhub_name="telemetry",
                         fully_qualified_namespace="myns.servicebus.windows.net",
                         credential_type="default_azure_credential")
    """

    eventhub_name: str
    consumer_group: str = "$Default"
    connection_string: str | None = field(default=None, repr=False)
    fully_qualified_namespace: str | None = None
    credential_type: CredentialType = "connection_string"
    credential_options: CredentialOptions = ()

    def __post_init__(self) -> None:
        if not self.eventhub_name and self.credential_type == "connection_string":
            # The connection string may name the hub (EntityPath), as the portal copies it.
            entity = entity_path(self.connection_string)
            if entity:
                object.__setattr__(self, "eventhub_name", entity)
        if not self.eventhub_name:
            raise ConfigurationError(
                "eventhub_name: required (the Event Hub to read); give it, or a connection "
                "string that names the hub with EntityPath=<hub>"
            )
        if not self.consumer_group:
            raise ConfigurationError(
                "consumer_group: must not be empty ('$Default' is the default)"
            )
        if self.credential_type == "connection_string":
            if not self.connection_string:
                raise ConfigurationError(
                    "connection_string: required when credential_type='connection_string' "
                    "(or set credential_type='default_azure_credential' and "
                    "fully_qualified_namespace)"
                )
            parts = parse_eventhub_connection_string(self.connection_string)
            entity = parts.eventhub_name
            if entity and entity != self.eventhub_name:
                raise ConfigurationError(
                    f"connection_string: EntityPath={entity!r} differs from "
                    f"eventhub_name={self.eventhub_name!r}"
                )
            # Not a field (equality, repr and replace() keep to the fields); pickled with the
            # instance, which is not re-validated where it is unpickled.
            object.__setattr__(self, "_parts", ConnectionParts.of(parts))
        elif self.credential_type == "default_azure_credential":
            if not self.fully_qualified_namespace:
                raise ConfigurationError(
                    "fully_qualified_namespace: required with "
                    "credential_type='default_azure_credential', e.g. "
                    "'myns.servicebus.windows.net'"
                )
        else:
            raise ConfigurationError(
                f"credential_type: {self.credential_type!r} is not valid; valid: "
                "'connection_string', 'default_azure_credential'"
            )

    @property
    def namespace(self) -> str:
        """The fully qualified namespace the Azure SDK reports (names checkpoint blobs)."""
        if self.fully_qualified_namespace:
            return self.fully_qualified_namespace
        # The SDK's EventProcessor names blobs by the endpoint host as given (port included, as
        # with the emulator's "127.0.0.1:5673"), without scheme or path.
        return self.connection_parts().fully_qualified_namespace

    def connection_parts(self) -> ConnectionParts:
        """The connection string's parts, as the SDK's parser read them when these settings
        were made (a ``credential_type='connection_string'`` settings only)."""
        parts: ConnectionParts | None = self.__dict__.get("_parts")
        if parts is None:  # made without __post_init__ (e.g. unpickled from a bare __dict__)
            assert self.connection_string is not None
            parts = ConnectionParts.of(parse_eventhub_connection_string(self.connection_string))
        return parts

    @property
    def is_emulator(self) -> bool:
        """True for a connection string with ``UseDevelopmentEmulator=true``."""
        if not self.connection_string:
            return False
        parts = parse_connection_string(self.connection_string, "connection_string")
        return parts.get("UseDevelopmentEmulator", "").lower() == "true"

    def hub_ref(self) -> HubRef:
        """The store key (namespace, hub, consumer group) for this hub."""
        return HubRef(self.namespace, self.eventhub_name, self.consumer_group)

    def consumer_client(self, **kwargs: Any) -> EventHubConsumerClient:
        """A new ``EventHubConsumerClient``; create it where it is used (e.g. in ``read()``).

        Its management calls and receivers open without the SDK's 50 ms poll per handshake
        frame (:mod:`dagster_eventhub_ingest.resources.azure.transport`) unless ``kwargs`` name
        a transport.
        """
        from azure.eventhub import EventHubConsumerClient

        from dagster_eventhub_ingest.resources.azure.transport import prompt_transport

        transport = prompt_transport()
        if transport is not None and not {"amqp_transport", "uamqp_transport"} & kwargs.keys():
            kwargs = {**kwargs, "amqp_transport": transport}
        client: EventHubConsumerClient = self._consumer(
            EventHubConsumerClient, make_credential, kwargs
        )
        return client

    def credential(self) -> TokenCredential:
        """The Entra ID credential of ``credential_type`` (created where it is used), for a
        namespace without a connection string."""
        return make_credential(self.credential_type, self.credential_options)

    def aio_consumer_client(self, **kwargs: Any) -> AsyncEventHubConsumerClient:
        """:meth:`consumer_client` from ``azure.eventhub.aio``, for an event loop (Airflow's
        triggerer); the credential is ``azure.identity.aio``'s, with the same options."""
        from azure.eventhub.aio import EventHubConsumerClient

        client: AsyncEventHubConsumerClient = self._consumer(
            EventHubConsumerClient, make_async_credential, kwargs
        )
        return client

    def _consumer(
        self,
        client_class: Any,
        credential: Callable[[CredentialType, CredentialOptions], Any],
        kwargs: Mapping[str, Any],
    ) -> Any:
        # The sync and aio classes take the same arguments; only the credential's kind differs.
        if self.credential_type == "connection_string":
            assert self.connection_string is not None
            return client_class.from_connection_string(
                self.connection_string,
                consumer_group=self.consumer_group,
                eventhub_name=self.eventhub_name,
                **kwargs,
            )
        assert self.fully_qualified_namespace is not None
        return client_class(
            self.fully_qualified_namespace,
            self.eventhub_name,
            self.consumer_group,
            credential(self.credential_type, self.credential_options),
            **kwargs,
        )

    def producer_client(self, **kwargs: Any) -> EventHubProducerClient:
        """A new ``EventHubProducerClient`` (demos, benchmarks, tests)."""
        from azure.eventhub import EventHubProducerClient

        if self.credential_type == "connection_string":
            assert self.connection_string is not None
            return EventHubProducerClient.from_connection_string(
                self.connection_string, eventhub_name=self.eventhub_name, **kwargs
            )
        assert self.fully_qualified_namespace is not None
        return EventHubProducerClient(
            self.fully_qualified_namespace,
            self.eventhub_name,
            make_credential(self.credential_type, self.credential_options),
            **kwargs,
        )
