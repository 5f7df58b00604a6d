"""``EventHubIngestHook``: the Event Hubs, storage and sink connections as validated settings."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from dagster_eventhub_ingest.airflow_provider._config import conf
from dagster_eventhub_ingest.airflow_provider._connections import (
    DEFAULT_EVENTHUB_CONN_ID,
    DEFAULT_SINK_CONN_ID,
    DEFAULT_STORE_CONN_ID,
    ConnectionLike,
    connection_role,
    eventhub_settings,
    ingest_settings,
    sink_settings,
    spark_settings,
    store_settings,
)
from dagster_eventhub_ingest.airflow_provider._form import (
    CONN_TYPE,
    FORM_FIELDS,
    UI_FIELD_BEHAVIOUR,
)
from dagster_eventhub_ingest.ops.run.settings import IngestSettings
from dagster_eventhub_ingest.resources.errors import ConfigurationError, EventHubIngestError, redact
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = ["AZURE_LOGGERS", "AZURE_LOG_LEVEL", "EventHubIngestHook", "quiet_azure_logs"]

#: The Azure SDK loggers that write a record per HTTP request and response (Blob: leases,
#: checkpoints, the lag sensor's polls), per AMQP link (Event Hubs) and per token (identity) at
#: INFO: an idle lag sensor wrote ~2,500 lines every 4 minutes with them on.
AZURE_LOGGERS = (
    "azure.core.pipeline.policies.http_logging_policy",
    "azure.eventhub",
    "azure.identity",
)
#: The Airflow setting (section, option) of their level: ``[eventhub_ingest] azure_log_level``,
#: or the environment variable ``AIRFLOW__EVENTHUB_INGEST__AZURE_LOG_LEVEL``; default WARNING.
AZURE_LOG_LEVEL = ("eventhub_ingest", "azure_log_level")

_log = logging.getLogger(__name__)


def quiet_azure_logs() -> None:
    """Set :data:`AZURE_LOGGERS` to the level of :data:`AZURE_LOG_LEVEL` (WARNING unless set),
    as the Azure provider's ``WasbHook`` does for the HTTP logger."""
    raw = conf.get(*AZURE_LOG_LEVEL, fallback="WARNING") or "WARNING"
    level = logging.getLevelName(raw.strip().upper())
    if not isinstance(level, int):
        _log.warning(
            "[%s] %s = %r is not a log level; valid: DEBUG, INFO, WARNING, ERROR, CRITICAL "
            "(WARNING is used)",
            *AZURE_LOG_LEVEL,
            raw,
        )
        level = logging.WARNING
    for name in AZURE_LOGGERS:
        logging.getLogger(name).setLevel(level)


def _missing(conn_id: str, role: str) -> ConfigurationError:
    return ConfigurationError(
        f"Airflow connection {conn_id!r} ({role}) is not defined; create it in the UI, with "
        f"`airflow connections add {conn_id} ...` or as the environment variable "
        f"AIRFLOW_CONN_{conn_id.upper()} (docs/airflow.md lists its fields)"
    )


class EventHubIngestHook(BaseHook):
    """Reads the three connections of an ingestion and builds the run's ``IngestSettings``.

    The configuration is the one the ``ehingest`` CLI and the Dagster resources build (the same
    settings classes, the same validation); secrets come only from the connections' password
    fields and never appear in a message.

    Args:
        eventhub_conn_id: the Event Hubs connection (namespace connection string in password).
        store_conn_id: the Blob Storage connection for leases and checkpoints: this package's
            type, or an existing ``wasb`` connection of the Azure provider.
        sink_conn_id: where events land (format, path or table; optional Spark settings).
        store_container: the Blob container of the store (required with a ``wasb``
            connection, which has no such field; else ``extra.container`` may name it).

    Constructing it sets the Azure SDK's loggers to WARNING (:func:`quiet_azure_logs`;
    ``[eventhub_ingest] azure_log_level`` raises them).

    Example::

        hook = EventHubIngestHook()
        config = hook.get_ingest_settings({"max_events_per_partition": 50_000})
    """

    conn_name_attr = "eventhub_conn_id"
    default_conn_name = DEFAULT_EVENTHUB_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Azure Event Hubs ingestion"

    def __init__(
        self,
        eventhub_conn_id: str = DEFAULT_EVENTHUB_CONN_ID,
        store_conn_id: str = DEFAULT_STORE_CONN_ID,
        sink_conn_id: str = DEFAULT_SINK_CONN_ID,
        store_container: str | None = None,
    ) -> None:
        super().__init__()
        self.eventhub_conn_id = eventhub_conn_id
        self.store_conn_id = store_conn_id
        self.sink_conn_id = sink_conn_id
        self.store_container = store_container
        quiet_azure_logs()

    @classmethod
    def _connection(cls, conn_id: str, role: str) -> ConnectionLike:
        try:
            return cls.get_connection(conn_id)
        except AirflowNotFoundException:
            raise _missing(conn_id, role) from None

    @classmethod
    async def _aconnection(cls, conn_id: str, role: str) -> ConnectionLike:
        try:
            return await cls.aget_connection(conn_id)
        except AirflowNotFoundException:
            raise _missing(conn_id, role) from None

    def get_conn(self) -> IngestSettings:
        """The validated run configuration with default run options."""
        return self.get_ingest_settings()

    def get_eventhub_settings(self) -> EventHubSettings:
        """Where to read events."""
        return eventhub_settings(self._connection(self.eventhub_conn_id, "Event Hubs"))

    def get_store_settings(self) -> StoreSettings:
        """Where leases and checkpoints live."""
        return store_settings(self._connection(self.store_conn_id, "storage"), self.store_container)

    def get_sink_settings(self) -> SinkSettings:
        """Where events land."""
        return sink_settings(self._connection(self.sink_conn_id, "sink"))

    def get_spark_factory(self) -> Callable[[], Any]:
        """Starts the SparkSession the sink connection asks for (local[2] by default)."""
        return spark_settings(self._connection(self.sink_conn_id, "sink")).session_factory()

    def get_ingest_settings(self, options: Mapping[str, Any] | None = None) -> IngestSettings:
        """The run configuration: the three connections plus the operator's run options."""
        return ingest_settings(
            self.get_eventhub_settings(),
            self.get_store_settings(),
            self.get_sink_settings(),
            options,
        )

    async def aget_lag_settings(self) -> tuple[EventHubSettings, StoreSettings]:
        """Event Hubs and store settings, read without blocking the triggerer's event loop."""
        eventhub = eventhub_settings(await self._aconnection(self.eventhub_conn_id, "Event Hubs"))
        store = store_settings(
            await self._aconnection(self.store_conn_id, "storage"), self.store_container
        )
        return eventhub, store

    def test_connection(self) -> tuple[bool, str]:
        """Check the connection (the Airflow UI's Test button, ``airflow connections test``).

        The connection's fields say which of the three it is: an Event Hubs connection lists the
        hub's partitions, a store connection checks its container (creating nothing), a sink
        connection checks its settings (no Spark is started). The message never holds a secret.
        """
        conn = self._connection(self.eventhub_conn_id, "tested")
        role = connection_role(conn)
        try:
            if role == "Event Hubs":
                from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient

                settings = eventhub_settings(conn)
                partitions = EventHubClient(settings).partition_ids()
                return True, (
                    f"Event Hub {settings.eventhub_name!r} answered: {len(partitions)} "
                    f"partitions (consumer group {settings.consumer_group!r})"
                )
            if role == "storage":
                from dagster_eventhub_ingest.resources.store.azure_blob import container_client

                store = store_settings(conn, self.store_container)
                with container_client(store) as client:
                    exists = client.exists()
                state = "exists" if exists else "does not exist yet"
                if not exists:
                    state += (
                        " (the first run creates it)"
                        if store.create_container
                        else " and create_container is false: create it first"
                    )
                return exists or store.create_container, (
                    f"storage answered: container {store.container!r} {state}"
                )
            sink = sink_settings(conn)
            where = f"path {sink.path!r}" if sink.path else f"table {sink.table!r}"
            return True, f"sink settings are valid: {sink.format} at {where}"
        except (ConfigurationError, EventHubIngestError) as exc:
            return False, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # any SDK error still leaves without a secret
            return False, f"{type(exc).__name__}: {redact(str(exc))[:2000]}"

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extra fields of the connection form (Airflow 3.1; later versions read the same
        fields from the provider info's ``conn-fields``)."""
        from wtforms import StringField

        return {f.name: StringField(f.label, description=f.description) for f in FORM_FIELDS}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Labels for the connection form of the Airflow UI (Airflow 3.1; later versions read
        them from the provider info)."""
        return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}
