"""Small frozen, picklable settings shared by the store, the Spark source, the run and Dagster.

These travel to Spark executors and into subprocesses, so they hold plain values only; clients
are built from them where they are used (``consumer_client()``, its ``aio`` twin, and
``StoreSettings.backend()``), never pickled. Secrets are kept out of ``repr`` and every error
message is redacted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from dagster_eventhub_ingest.resources.credentials import (
    CredentialOptions,
    CredentialType,
    make_async_credential,
    make_credential,
    parse_connection_string,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, did_you_mean, redact
from dagster_eventhub_ingest.resources.store import HubRef

#: Column names as in azure-event-hubs-spark, so existing queries keep working, and ``amqpBody``
#: (a body that is not data sections, as received).
EVENT_COLUMNS = (
    "body",
    "partition",
    "offset",
    "sequenceNumber",
    "enqueuedTime",
    "publisher",
    "partitionKey",
    "properties",
    "systemProperties",
    "amqpBody",
)

#: Sink format for Delta tables written by delta-rs (``deltalake``), without Spark jars.
DELTALAKE_FORMAT = "deltalake"
#: Spark formats that can hold the event schema (binary body, map columns). Other data sources
#: are named by their fully qualified class name (anything with a dot).
SPARK_FORMATS: tuple[str, ...] = ("parquet", "delta", "orc", "avro", "json", "iceberg", "hudi")
#: Whose events a sink holds: one source's (a namespace, hub and consumer group), refusing any
#: other, or several sources', each batch key and row naming its own (``SinkConfig.sources``).
SinkSources = Literal["one", "many"]
SINK_SOURCES: tuple[str, ...] = get_args(SinkSources)
#: The output columns a sink may be partitioned by (scalars; not the body or the maps).
PARTITION_COLUMNS: tuple[str, ...] = tuple(
    c for c in EVENT_COLUMNS if c not in ("body", "properties", "systemProperties", "amqpBody")
)

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.eventhub import (
        EventHubConnectionStringProperties,
        EventHubConsumerClient,
        EventHubProducerClient,
    )
    from azure.eventhub.aio import EventHubConsumerClient as AsyncEventHubConsumerClient

    from dagster_eventhub_ingest.resources.store import BlobBackend

__all__ = [
    "SINK_SOURCES",
    "CredentialOptions",
    "CredentialType",
    "EventHubSettings",
    "SinkSettings",
    "SinkSources",
    "StoreSettings",
    "check_container_name",
    "entity_path",
    "make_credential",
    "parse_connection_string",
]


def check_container_name(name: str) -> None:
    """Raise ConfigurationError unless ``name`` is a valid Blob container name."""
    valid = (
        3 <= len(name) <= 63
        and name.replace("-", "").isalnum()
        and name == name.lower()
        and name[0].isalnum()
        and "--" not in name
    )
    if not valid:
        raise ConfigurationError(
            f"container: {name!r} is not a valid Blob container name (3-63 lower-case "
            "letters, digits and single hyphens, starting with a letter or digit)"
        )


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
        assert self.connection_string is not None
        # The SDK's EventProcessor names blobs by the endpoint host as given (port included, as
        # with the emulator's "127.0.0.1:5673"), without scheme or path.
        return parse_eventhub_connection_string(self.connection_string).fully_qualified_namespace

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
        frame (:mod:`dagster_eventhub_ingest.resources.eventhubs_transport`) unless ``kwargs`` name
        a transport.
        """
        from azure.eventhub import EventHubConsumerClient

        from dagster_eventhub_ingest.resources.eventhubs_transport import prompt_transport

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


@dataclass(frozen=True)
class StoreSettings:
    """Where leases and checkpoints live: a Blob container, by connection string or account URL.

    ``create_container=True`` creates a missing container; False raises a clear error instead.
    """

    container: str
    connection_string: str | None = field(default=None, repr=False)
    account_url: str | None = None
    credential_type: CredentialType = "connection_string"
    create_container: bool = True
    credential_options: CredentialOptions = ()

    def __post_init__(self) -> None:
        check_container_name(self.container)
        if self.credential_type == "connection_string":
            if not self.connection_string:
                raise ConfigurationError(
                    "store connection_string: required when credential_type='connection_string' "
                    "(or set credential_type='default_azure_credential' and account_url)"
                )
            parse_connection_string(self.connection_string, "store connection_string")
        elif not self.account_url:
            raise ConfigurationError(
                "account_url: required with credential_type='default_azure_credential', e.g. "
                "'https://myaccount.blob.core.windows.net'"
            )

    def backend(self) -> BlobBackend:
        """An Azure Blob backend for this container (see
        ``dagster_eventhub_ingest.resources.blob_store``)."""
        from dagster_eventhub_ingest.resources.blob_store import AzureBlobBackend

        return AzureBlobBackend.from_settings(self)


# The sink's rules, once: SinkSettings (built in Python) and
# dagster_eventhub_ingest.resources.config's SinkConfig (YAML, defs.yaml, resources) both ask these.
# Each returns what is wrong, or None.


def sink_format_problem(fmt: str) -> str | None:
    """Unless ``fmt`` is a known format or a data source class name: what is wrong."""
    valid = (*SPARK_FORMATS, DELTALAKE_FORMAT)
    if fmt in valid or ("." in fmt and fmt.strip(".") == fmt and " " not in fmt):
        return None
    return (
        f"{redact(repr(fmt))} is not a known format; {did_you_mean(fmt, valid)}valid: "
        f"{', '.join(valid)}, or a data source's fully qualified class name"
    )


def partition_by_problem(columns: Sequence[str]) -> str | None:
    """Unless every one of ``columns`` is an output column a sink can be partitioned by."""
    for column in columns:
        if column not in PARTITION_COLUMNS:
            return (
                f"{column!r} is not a column of the output; "
                f"{did_you_mean(column, PARTITION_COLUMNS)}valid: {', '.join(PARTITION_COLUMNS)}"
            )
    if len(set(columns)) != len(columns):
        return f"{list(columns)} names a column twice"
    return None


#: Characters Spark and Hadoop read as a glob pattern in a path (``*``, ``?``, ``[...]``,
#: ``{a,b}``, ``\`` escapes): the batch would be written under the literal name, then never
#: found when the run reads it back to verify it.
GLOB_CHARACTERS = "*?[]{}\\"


def sink_path_problem(path: str) -> str | None:
    """What is wrong with a sink path on its own (empty, the file system's root, a glob), or
    None. Paths are refused rather than escaped: Spark's writers and readers do not agree on
    escapes, and a folder name needs none of these characters."""
    if not path.strip():
        return f"{path!r} is empty; give the folder or URI events land in"
    bare = path.strip().rstrip("/")
    if bare in ("", "file:", "file://") or re.fullmatch(r"[A-Za-z]:\\?", bare):
        return (
            f"{path!r} is the root of the file system; give a folder of its own (was it "
            "built from an empty variable?)"
        )
    found = sorted({c for c in path if c in GLOB_CHARACTERS})
    if found:
        return (
            f"{path!r} holds {' '.join(repr(c) for c in found)}, which Spark reads as a glob "
            "pattern: the batch would be written, then never found when verified. Name the "
            "folder without " + ", ".join(repr(c) for c in GLOB_CHARACTERS)
        )
    return None


def sink_place_problem(
    fmt: str, path: str | None, table: str | None, storage_options: Mapping[str, str]
) -> str | None:
    """What is wrong with where a sink writes (``key: what`` names the key), or None."""
    if (path is None) == (table is None):
        return f"give exactly one of path or table (got path={path!r}, table={table!r})"
    if path is not None:
        problem = sink_path_problem(path)
        if problem:
            return f"path: {problem}"
    if fmt == DELTALAKE_FORMAT and path is None:
        return (
            f"format {DELTALAKE_FORMAT!r} needs a path (a Delta table location), not "
            f"table={table!r}; or use format 'delta' with a Spark catalog that has Delta"
        )
    if storage_options and fmt != DELTALAKE_FORMAT:
        return (
            f"storage_options: only for format {DELTALAKE_FORMAT!r} (got {fmt!r}); Spark "
            "formats reach abfss:// through the cluster's hadoop-azure settings (fs.azure.*)"
        )
    return None


@dataclass(frozen=True)
class SinkSettings:
    """Where events land: a Spark format and a path or table, or a Delta table via delta-rs.

    ``format``: any format the Spark session can write (``parquet`` by default, ``delta`` on a
    cluster with Delta) or ``deltalake`` for Delta written from Arrow without Spark jars.
    ``shared``: declare a local ``path`` shared by every node (a mount); a local path is
    otherwise refused when Spark is not local, since executors on other machines would write to
    their own disks.
    """

    format: str = "parquet"
    path: str | None = None
    table: str | None = None
    partition_by: tuple[str, ...] = ()
    #: The local ``path`` is a volume every executor and the driver see at the same place (an
    #: NFS or DBFS-style mount). Without it a local path is refused on a non-local Spark.
    shared: bool = False
    #: ``deltalake`` on ``abfss://`` / ``az://``: delta-rs storage options (account, key or SAS
    #: or service principal, endpoint); see resources/sink_storage.py. Hidden from repr.
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: ``one`` or ``many`` (``dagster_eventhub_ingest.resources.config.SinkConfig.sources``).
    sources: SinkSources = "one"

    def __post_init__(self) -> None:
        format_problem = sink_format_problem(self.format)
        if format_problem:
            raise ConfigurationError(f"sink.format: {format_problem}")
        if self.sources not in SINK_SOURCES:
            raise ConfigurationError(
                f"sink.sources: {self.sources!r} is not valid; valid: {', '.join(SINK_SOURCES)}"
            )
        columns_problem = partition_by_problem(self.partition_by)
        if columns_problem:
            raise ConfigurationError(f"sink.partition_by: {columns_problem}")
        place_problem = sink_place_problem(self.format, self.path, self.table, self.storage_options)
        if place_problem:
            head, sep, rest = place_problem.partition(": ")
            keyed = sep and head.isidentifier()
            raise ConfigurationError(f"sink.{head}: {rest}" if keyed else f"sink: {place_problem}")
