"""``EventHubIngestHook``: the Event Hubs, storage and sink connections as validated settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from dagster_eventhub_ingest.airflow_provider._connections import (
    DEFAULT_EVENTHUB_CONN_ID,
    DEFAULT_SINK_CONN_ID,
    DEFAULT_STORE_CONN_ID,
    ConnectionLike,
    eventhub_settings,
    ingest_config,
    sink_settings,
    spark_settings,
    store_settings,
)
from dagster_eventhub_ingest.ops.run import IngestConfig
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.settings import EventHubSettings, SinkSettings, StoreSettings

__all__ = ["EventHubIngestHook"]


def _missing(conn_id: str, role: str) -> ConfigurationError:
    return ConfigurationError(
        f"Airflow connection {conn_id!r} ({role}) is not defined; create it in the UI, with "
        f"`airflow connections add {conn_id} ...` or as the environment variable "
        f"AIRFLOW_CONN_{conn_id.upper()} (docs/airflow.md lists its fields)"
    )


class EventHubIngestHook(BaseHook):
    """Reads the three connections of an ingestion and builds the run's ``IngestConfig``.

    The configuration is the one the ``ehingest`` CLI and the Dagster resources build (the same
    settings classes, the same validation); secrets come only from the connections' password
    fields and never appear in a message.

    Args:
        eventhub_conn_id: the Event Hubs connection (namespace connection string in password).
        store_conn_id: the Blob Storage connection for leases and checkpoints.
        sink_conn_id: where events land (format, path or table; optional Spark settings).

    Example::

        hook = EventHubIngestHook()
        config = hook.get_ingest_config({"max_events_per_partition": 50_000})
    """

    conn_name_attr = "eventhub_conn_id"
    default_conn_name = DEFAULT_EVENTHUB_CONN_ID
    conn_type = "azure_eventhub_ingest"
    hook_name = "Azure Event Hubs ingestion"

    def __init__(
        self,
        eventhub_conn_id: str = DEFAULT_EVENTHUB_CONN_ID,
        store_conn_id: str = DEFAULT_STORE_CONN_ID,
        sink_conn_id: str = DEFAULT_SINK_CONN_ID,
    ) -> None:
        super().__init__()
        self.eventhub_conn_id = eventhub_conn_id
        self.store_conn_id = store_conn_id
        self.sink_conn_id = sink_conn_id

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

    def get_conn(self) -> IngestConfig:
        """The validated run configuration with default run options."""
        return self.get_ingest_config()

    def get_eventhub_settings(self) -> EventHubSettings:
        """Where to read events."""
        return eventhub_settings(self._connection(self.eventhub_conn_id, "Event Hubs"))

    def get_store_settings(self) -> StoreSettings:
        """Where leases and checkpoints live."""
        return store_settings(self._connection(self.store_conn_id, "storage"))

    def get_sink_settings(self) -> SinkSettings:
        """Where events land."""
        return sink_settings(self._connection(self.sink_conn_id, "sink"))

    def get_spark_factory(self) -> Callable[[], Any]:
        """Starts the SparkSession the sink connection asks for (local[2] by default)."""
        return spark_settings(self._connection(self.sink_conn_id, "sink")).session_factory()

    def get_ingest_config(self, options: Mapping[str, Any] | None = None) -> IngestConfig:
        """The run configuration: the three connections plus the operator's run options."""
        return ingest_config(
            self.get_eventhub_settings(),
            self.get_store_settings(),
            self.get_sink_settings(),
            options,
        )

    async def aget_lag_settings(self) -> tuple[EventHubSettings, StoreSettings]:
        """Event Hubs and store settings, read without blocking the triggerer's event loop."""
        eventhub = eventhub_settings(await self._aconnection(self.eventhub_conn_id, "Event Hubs"))
        store = store_settings(await self._aconnection(self.store_conn_id, "storage"))
        return eventhub, store

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Labels for the connection form of the Airflow UI."""
        return {
            "hidden_fields": ["port", "login"],
            "relabeling": {
                "password": "Connection string (secret)",
                "schema": "Event Hub name",
                "host": "Fully qualified namespace (with extra.credential)",
            },
            "placeholders": {
                "extra": '{"consumer_group": "$Default"}',
                "schema": "telemetry",
                "host": "myns.servicebus.windows.net",
            },
        }
