"""Dagster resources: the Event Hub, the partition store, the sink, and a local Spark default.

Each resource is a typed ``ConfigurableResource`` whose fields are described in the UI. Secrets
(connection strings) are meant to arrive through ``dg.EnvVar``: Dagster then shows the variable's
name, never its value, in the launchpad and run config. Credentials are a union told apart by a
literal ``credential_type``, as dagster-azure does::

    import dagster as dg
    from dagster_eventhub_ingest.dagster_project.resources import (
        EventHubConnectionString, EventHubResource, PartitionStoreResource, SinkResource,
        StoreConnectionString, local_pyspark_resource,
    )

    defs = dg.Definitions(
        assets=[...],
        resources={
            "eventhub": EventHubResource(
                eventhub_name="telemetry",
                credential=EventHubConnectionString(
                    connection_string=dg.EnvVar("EVENTHUB_CONNECTION_STRING")
                ),
            ),
            "partition_store": PartitionStoreResource(
                container="eventhub-checkpoints",
                credential=StoreConnectionString(
                    connection_string=dg.EnvVar("AZURE_STORAGE_CONNECTION_STRING")
                ),
            ),
            "sink": SinkResource(path="/data/telemetry"),
            "pyspark": local_pyspark_resource(),
        },
    )
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr, ValidatorFunctionWrapHandler, field_validator

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient
from dagster_eventhub_ingest.resources.config import (
    EventHubConfig,
    EventHubConnectionStringCredential,
    EventHubIdentityCredential,
    OneLineErrors,
    SinkConfig,
    SparkConfig,
    StoreConfig,
    StoreConnectionStringCredential,
    StoreIdentityCredential,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.spark.kind import DEFAULT_SPARK_MASTER
from dagster_eventhub_ingest.resources.spark.owned import OwnedSession
from dagster_eventhub_ingest.resources.spark.session import LOCAL_PINS, session_defaults
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import HubRef
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = [
    "LOCAL_SPARK_CONFIG",
    "REMOTE_SPARK_CONFIG",
    "EventHubConnectionString",
    "EventHubIdentity",
    "EventHubResource",
    "LocalPySparkResource",
    "PartitionStoreResource",
    "SinkResource",
    "StoreConnectionString",
    "StoreIdentity",
    "local_pyspark_resource",
    "session_or_factory",
    "spark_resource",
]


class _EnvVarsCheckedWhenSet(BaseModel):
    """A ``dg.EnvVar`` value is checked when Dagster sets the variable's value, at run time.

    The checks of resources/config/ would otherwise judge the variable's name (a container
    given as ``dg.EnvVar("CONTAINER")`` is not a container name).
    """

    @field_validator("*", mode="wrap")
    @classmethod
    def _later(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return value if isinstance(value, dg.EnvVar) else handler(value)


class EventHubConnectionString(dg.Config, EventHubConnectionStringCredential):
    """Authenticate to Event Hubs with a connection string (SAS key or the local emulator).

    Give either connection_string, the value itself, passed as
    dg.EnvVar("EVENTHUB_CONNECTION_STRING") so the UI shows the variable's name and never the
    secret, or connection_string_env, the name of the variable read when the resource is used
    (default EVENTHUB_CONNECTION_STRING). The same fields as the credential block of defs.yaml.
    """

    connection_string: str | None = Field(
        default=None,
        description="The connection string ('Endpoint=sb://...;SharedAccessKeyName=...;"
        "SharedAccessKey=...'); pass dg.EnvVar('EVENTHUB_CONNECTION_STRING'). Unset: read from "
        "the variable connection_string_env names.",
    )


class EventHubIdentity(dg.Config, EventHubIdentityCredential):
    """Authenticate to Event Hubs with azure-identity's DefaultAzureCredential (Entra ID).

    Fields: fully_qualified_namespace (e.g. myns.servicebus.windows.net), an optional managed
    identity client id and tenant, and exclude_* switches for the credential chain; the same as
    in defs.yaml.
    """


class StoreConnectionString(dg.Config, StoreConnectionStringCredential):
    """Authenticate to Blob Storage with a connection string (account key, SAS or Azurite).

    Give either connection_string, passed as dg.EnvVar("AZURE_STORAGE_CONNECTION_STRING") so the
    UI shows the variable's name, or connection_string_env, the name of the variable read when
    the resource is used (default AZURE_STORAGE_CONNECTION_STRING).
    """

    connection_string: str | None = Field(
        default=None,
        description="Blob Storage connection string; pass dg.EnvVar("
        "'AZURE_STORAGE_CONNECTION_STRING'). Unset: read from the variable "
        "connection_string_env names.",
    )


class StoreIdentity(dg.Config, StoreIdentityCredential):
    """Authenticate to Blob Storage with azure-identity's DefaultAzureCredential (Entra ID).

    Fields: account_url (e.g. https://myaccount.blob.core.windows.net), an optional managed
    identity client id and tenant, and exclude_* switches; the same as in defs.yaml.
    """


class EventHubResource(
    dg.ConfigurableResource, _EnvVarsCheckedWhenSet, OneLineErrors, EventHubConfig
):
    """The Event Hub to read, and the consumer group whose checkpoints this pipeline owns.

    The same fields and checks as the eventhub block of defs.yaml and of the ehingest config
    file: eventhub_name, consumer_group (default $Default) and credential (a connection string,
    which may be given as dg.EnvVar, or DefaultAzureCredential). For example:
    EventHubResource(eventhub_name="telemetry",
    credential=EventHubConnectionString(connection_string=dg.EnvVar("EVENTHUB_CONNECTION_STRING"))).
    """

    credential: EventHubConnectionString | EventHubIdentity = Field(
        discriminator="credential_type",
        description="How to authenticate: a connection string, or DefaultAzureCredential.",
    )

    @field_validator("credential", mode="before")
    @classmethod
    def _tag(cls, value: Any) -> Any:
        return value  # the discriminator picks the class (the YAML's picker would pick its own)

    @classmethod
    def from_config(cls, config: EventHubConfig) -> EventHubResource:
        """The resource for a YAML-shaped
        :class:`dagster_eventhub_ingest.resources.config.EventHubConfig`.

        A connection string is referenced as ``dg.EnvVar``: the UI shows the variable's name.
        """
        cred = config.credential
        credential: EventHubConnectionString | EventHubIdentity
        if isinstance(cred, EventHubIdentityCredential):
            credential = EventHubIdentity(**_credential_fields(cred))
        else:
            credential = EventHubConnectionString(
                **_credential_fields(cred), connection_string=dg.EnvVar(cred.connection_string_env)
            )
        return cls(
            eventhub_name=config.eventhub_name,
            consumer_group=config.consumer_group,
            credential=credential,
        )

    def settings(
        self, env: Mapping[str, str] | None = None, *, connection_string: str | None = None
    ) -> EventHubSettings:
        """The frozen, picklable settings the run and Spark executors use (validated here)."""
        secret = connection_string or _secret(self.credential)
        return super().settings(env, connection_string=secret)

    def partition_ids(self) -> list[str]:
        """The hub's current partition ids, in numeric order (a hub can gain partitions)."""
        return EventHubClient(self.settings(), retry_total=None).partition_ids()


class PartitionStoreResource(
    dg.ConfigurableResource, _EnvVarsCheckedWhenSet, OneLineErrors, StoreConfig
):
    """The Blob container holding leases and checkpoints (the Azure SDK's layout).

    The same fields and checks as the store block of defs.yaml: container, create_container
    (default true) and credential (a connection string or DefaultAzureCredential). For example:
    PartitionStoreResource(container="eventhub-state",
    credential=StoreConnectionString(connection_string=dg.EnvVar("AZURE_STORAGE_CONNECTION_STRING"))).
    """

    credential: StoreConnectionString | StoreIdentity = Field(
        discriminator="credential_type",
        description="How to authenticate: a connection string, or DefaultAzureCredential.",
    )

    @field_validator("credential", mode="before")
    @classmethod
    def _tag(cls, value: Any) -> Any:
        return value  # the discriminator picks the class

    @classmethod
    def from_config(cls, config: StoreConfig) -> PartitionStoreResource:
        """The resource for a YAML-shaped
        :class:`dagster_eventhub_ingest.resources.config.StoreConfig`."""
        cred = config.credential
        credential: StoreConnectionString | StoreIdentity
        if isinstance(cred, StoreIdentityCredential):
            credential = StoreIdentity(**_credential_fields(cred))
        else:
            credential = StoreConnectionString(
                **_credential_fields(cred), connection_string=dg.EnvVar(cred.connection_string_env)
            )
        return cls(
            container=config.container,
            create_container=config.create_container,
            credential=credential,
        )

    def settings(
        self, env: Mapping[str, str] | None = None, *, connection_string: str | None = None
    ) -> StoreSettings:
        """The frozen, picklable store settings (validated here)."""
        secret = connection_string or _secret(self.credential)
        return super().settings(env, connection_string=secret)

    def store(self, hub: HubRef) -> PartitionStore:
        """A :class:`PartitionStore` over this container for ``hub``."""
        from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend

        return PartitionStore(AzureBlobBackend.from_settings(self.settings()), hub)


class SinkResource(dg.ConfigurableResource, _EnvVarsCheckedWhenSet, OneLineErrors, SinkConfig):
    """Where events land: a path or a table, in a Spark format (or deltalake).

    The same fields and checks as the sink block of defs.yaml and of the ehingest config file
    (format, default parquet; path or table; partition_by; ...), so a bad format or partition_by
    column fails when the resource is built. For example:
    SinkResource(path="/data/telemetry", partition_by=["partition"]).
    """

    @classmethod
    def from_config(cls, config: SinkConfig) -> SinkResource:
        """The resource for a YAML-shaped
        :class:`dagster_eventhub_ingest.resources.config.SinkConfig`."""
        return cls(**{name: getattr(config, name) for name in SinkConfig.model_fields})


# The session defaults of resources/spark/session.py (one list for the CLI and Dagster) on
# every local core.
LOCAL_SPARK_CONFIG: dict[str, str] = {
    "spark.master": DEFAULT_SPARK_MASTER,
    **session_defaults(DEFAULT_SPARK_MASTER),
}
# What a Spark Connect client may set on its session (the server owns master, driver, UI).
REMOTE_SPARK_CONFIG: dict[str, str] = session_defaults(None, remote="sc://")


class LocalPySparkResource(dg.ConfigurableResource):
    """A PySpark resource whose Spark session starts at first use.

    The session starts only when a run has something to read, so a schedule tick on a quiet hub
    starts no JVM. spark_config holds Spark settings (spark.master, default local[*] with
    loopback pins; or spark.remote for Spark Connect, e.g. sc://host:15002); log_level (default
    WARN) is set on a classic session. A local driver's JVM gets its own environment
    (SPARK_LOCAL_IP, PYSPARK_PYTHON, a quiet log4j2 config); the process's environment is left
    alone. When the run's step ends, the session it started is stopped with its JVM. Build it
    with local_pyspark_resource({"spark.master": "local[2]"}).

    It has dagster-pyspark's PySparkResource interface (spark_config, spark_session,
    spark_context), so an asset of yours whose pyspark parameter is annotated PySparkResource
    gets it by its key. It is not a subclass, as dagster-pyspark's own LazyPySparkResource is
    not: dagster-pyspark imports pyspark at its top, and loading the definitions (a code server,
    every run's start) would too.
    """

    spark_config: dict[str, Any] = Field(
        description="Spark settings of the session, e.g. {'spark.master': 'local[2]'} or "
        "{'spark.remote': 'sc://host:15002'}; local_pyspark_resource() fills quiet defaults "
        "(local[*] with loopback pins) under the ones given.",
    )
    log_level: str = Field(
        default="WARN",
        description="Spark log level set on a classic session (e.g. WARN, INFO); Spark Connect "
        "sessions keep the server's.",
    )

    _spark_session: Any = PrivateAttr(default=None)
    _owned: OwnedSession | None = PrivateAttr(default=None)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.stop_session()

    def stop_session(self, *, keep_archive: bool = True) -> None:
        """Stop what this resource started (idempotent); ``keep_archive=False`` when in a hurry
        (a terminated run: the JVM does not finish writing its class-data archive)."""
        owned, self._owned = self._owned, None
        self._spark_session = None
        if owned is not None:
            owned.close(keep_archive=keep_archive)

    def engine(self) -> SparkConfig:
        """Where this resource's executors run, from its config alone (no session started)."""
        return _engine(self.spark_config)

    @property
    def spark_session(self) -> Any:
        """The session, started (``getOrCreate``) on first use, and again when the driver JVM
        it started has exited meanwhile (a retry in the run worker's process after the JVM was
        killed gets a live session, not the dead one)."""
        from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

        exited = None if self._owned is None else self._owned.driver_exited()
        if exited is not None:
            dg.get_dagster_logger().warning(
                f"the Spark driver JVM this run started has exited (code {exited}): starting a "
                "new one"
            )
            self.stop_session()
        if self._spark_session is None:
            if self._owned is None:
                self._owned = OwnedSession(self._start)
            session = self._owned.get()
            # Spark Connect has no SparkContext (and refuses any JVM access).
            if not is_connect_session(session):
                session.sparkContext.setLogLevel(self.log_level)
            self._spark_session = session
        return self._spark_session

    @property
    def spark_context(self) -> Any:
        """The classic session's SparkContext (starting the session); Spark Connect has none."""
        return self.spark_session.sparkContext

    def _start(self) -> Any:
        """``getOrCreate`` as dagster-pyspark does; a classic driver's JVM launched by
        :func:`dagster_eventhub_ingest.resources.spark.session.start_classic_driver` (a local one
        from the class-data archive); on Spark Connect the server session runs of the same code
        and settings share
        (:func:`dagster_eventhub_ingest.resources.spark.connect_session.connect_session`)."""
        from dagster_spark.utils import flatten_dict

        from dagster_eventhub_ingest.resources.spark.connect_session import connect_session
        from dagster_eventhub_ingest.resources.spark.session import start_classic_driver

        settings = {key: str(value) for key, value in flatten_dict(self.spark_config)}
        remote = settings.pop("spark.remote", None)
        if remote:
            return connect_session(remote, settings)
        return start_classic_driver(settings)


def _engine(spark_config: Mapping[str, Any]) -> SparkConfig:
    """The master or Spark Connect URL of a PySpark resource's config, checked by SparkConfig."""
    return SparkConfig.from_dict(
        {"master": spark_config.get("spark.master"), "remote": spark_config.get("spark.remote")},
        where="spark",
    )


def local_pyspark_resource(
    spark_config: dict[str, Any] | None = None, remote: str | None = None
) -> LocalPySparkResource:
    """A PySpark resource with quiet defaults; ``spark_config`` entries override them.

    Local masters get loopback pins; a cluster master (``spark://``, ``yarn``) keeps its own
    driver host; ``remote`` (or ``spark.remote`` in ``spark_config``), a Spark Connect URL, gets
    only the session settings a Connect client may set.

    Example: ``local_pyspark_resource({"spark.master": "local[2]"})`` or
    ``local_pyspark_resource(remote="sc://spark.example:15002")``.
    """
    from dagster_eventhub_ingest.resources.spark.kind import is_local_master

    user = dict(spark_config or {})
    if remote is not None:
        user["spark.remote"] = remote
    _engine(user)  # the master/remote rules are SparkConfig's (the CLI's and defs.yaml's)
    if user.get("spark.remote"):
        return LocalPySparkResource(spark_config={**REMOTE_SPARK_CONFIG, **user})
    config = {**LOCAL_SPARK_CONFIG, **user}
    if not is_local_master(config.get("spark.master")):
        for key in LOCAL_PINS:
            if key not in user:
                config.pop(key, None)
    return LocalPySparkResource(spark_config=config)


def session_or_factory(
    pyspark: Any, sink: SinkSettings
) -> tuple[Any | None, Callable[[], Any] | None]:
    """What ``run_ingestion`` gets from a run's PySpark resource: ``(session, None)`` or
    ``(None, factory)``.

    This package's resource gives a factory, so the session starts only when there is something
    to read; the check that needs its engine (a local sink path executors on other machines
    cannot share) is made from its config, before anything is claimed, as the CLI does. Any
    other resource (``dagster_pyspark.PySparkResource``, which started its session when the
    run's resources were set up) gives its session, which the run asks.
    """
    if isinstance(pyspark, LocalPySparkResource):
        from dagster_eventhub_ingest.ops.sinks.checks import check_sink_reachable

        engine = pyspark.engine()
        check_sink_reachable(sink, local=engine.is_local, engine=engine.engine)
        return None, lambda: pyspark.spark_session
    return pyspark.spark_session, None


def spark_resource(config: SparkConfig) -> LocalPySparkResource:
    """The PySpark resource for a :class:`dagster_eventhub_ingest.resources.config.SparkConfig` (the
    CLI's ``spark:``).

    Unset ``master`` keeps the local default (``local[*]`` with loopback pins); ``app_name``
    is set only when given; ``ship_code: false`` tells the source the cluster has the package.
    """
    from dagster_eventhub_ingest.resources.spark.code_shipping import SHIP_CODE_CONF

    conf: dict[str, Any] = dict(config.conf)
    if config.master is not None:
        conf["spark.master"] = config.master
    if "app_name" in config.model_fields_set:
        conf["spark.app.name"] = config.app_name
    if not config.ship_code:
        conf[SHIP_CODE_CONF] = "false"
    return local_pyspark_resource(conf, remote=config.remote)


def _secret(cred: Any) -> str | None:
    """The connection string a resource was given as a value (None: read the named variable)."""
    return getattr(cred, "connection_string", None)


def _credential_fields(cred: Any) -> dict[str, Any]:
    """The fields a credential model was given (so defaults stay defaults)."""
    return {name: getattr(cred, name) for name in cred.model_fields_set | {"credential_type"}}
