"""Where events come from and where state is kept: the Event Hub and the store."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import field_validator

from dagster_eventhub_ingest.resources.config._credentials import (
    EventHubConnectionStringCredential,
    EventHubIdentityCredential,
    StoreConnectionStringCredential,
    StoreIdentityCredential,
    _env_value,
    _pick_credential,
)
from dagster_eventhub_ingest.resources.config._model import StrictModel, setting
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.store.settings import StoreSettings, check_container_name


class EventHubConfig(StrictModel):
    """The Event Hub to read, the consumer group, and how to authenticate."""

    eventhub_name: str | None = setting(
        default=None,
        description="Name of the Event Hub; may be omitted when the connection string has "
        "EntityPath.",
    )
    consumer_group: str = setting(
        default="$Default",
        description="Consumer group to read as; checkpoints are kept per consumer group.",
    )
    credential: EventHubConnectionStringCredential | EventHubIdentityCredential = setting(
        default_factory=EventHubConnectionStringCredential,
        description="A connection string from an environment variable (default "
        "EVENTHUB_CONNECTION_STRING), or DefaultAzureCredential with its options.",
    )

    @field_validator("credential", mode="before")
    @classmethod
    def _tag(cls, value: Any) -> Any:
        return _pick_credential(
            value, EventHubConnectionStringCredential, EventHubIdentityCredential
        )

    @field_validator("eventhub_name", "consumer_group")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    def settings(
        self, env: Mapping[str, str] | None = None, *, connection_string: str | None = None
    ) -> EventHubSettings:
        """The frozen, picklable settings (reads the connection string's env var now)."""
        cred = self.credential
        if isinstance(cred, EventHubIdentityCredential):
            if not self.eventhub_name:
                raise ConfigurationError("eventhub.eventhub_name: required (the Event Hub to read)")
            return EventHubSettings(
                eventhub_name=self.eventhub_name,
                consumer_group=self.consumer_group,
                fully_qualified_namespace=cred.fully_qualified_namespace,
                credential_type="default_azure_credential",
                credential_options=cred.credential_options(),
            )
        conn = connection_string or _env_value(
            cred.connection_string_env, "eventhub", os.environ if env is None else env
        )
        try:
            return EventHubSettings(
                eventhub_name=self.eventhub_name or "",
                consumer_group=self.consumer_group,
                connection_string=conn,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"eventhub.{exc}") from None


class StoreConfig(StrictModel):
    """The Blob container for leases and checkpoints, and how to authenticate."""

    container: str = setting(description="Blob container name, e.g. 'ehingest-state'.")
    create_container: bool = setting(
        default=True, description="Create the container if missing (False: fail clearly)."
    )
    credential: StoreConnectionStringCredential | StoreIdentityCredential = setting(
        default_factory=StoreConnectionStringCredential,
        description="A connection string from an environment variable (default "
        "AZURE_STORAGE_CONNECTION_STRING), or DefaultAzureCredential with its options.",
    )

    @field_validator("credential", mode="before")
    @classmethod
    def _tag(cls, value: Any) -> Any:
        return _pick_credential(value, StoreConnectionStringCredential, StoreIdentityCredential)

    @field_validator("container")
    @classmethod
    def _container(cls, value: str) -> str:
        check_container_name(value)
        return value

    def settings(
        self, env: Mapping[str, str] | None = None, *, connection_string: str | None = None
    ) -> StoreSettings:
        """The frozen, picklable settings (reads the connection string's env var now)."""
        cred = self.credential
        if isinstance(cred, StoreIdentityCredential):
            return StoreSettings(
                container=self.container,
                account_url=cred.account_url,
                credential_type="default_azure_credential",
                credential_options=cred.credential_options(),
                create_container=self.create_container,
            )
        conn = connection_string or _env_value(
            cred.connection_string_env, "store", os.environ if env is None else env
        )
        try:
            return StoreSettings(
                container=self.container,
                connection_string=conn,
                create_container=self.create_container,
            )
        except ConfigurationError as exc:
            text = str(exc).removeprefix("store.").removeprefix("store ")
            raise ConfigurationError(f"store.{text}") from None
