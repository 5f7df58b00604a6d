"""Where events come from and where state is kept: the Event Hub and the store."""

from __future__ import annotations

import os
import warnings
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
from dagster_eventhub_ingest.resources.config._model import (
    ConfigDeprecationWarning,
    StrictModel,
    setting,
)
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

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Accept the old credential keys beside the section's keys (one release)."""
        return _move_legacy_credential(data, "eventhub", "fully_qualified_namespace")

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

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Accept the old credential keys beside the section's keys (one release)."""
        return _move_legacy_credential(data, "store", "account_url")

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


def _move_legacy_credential(data: dict[str, Any], section: str, where_key: str) -> dict[str, Any]:
    """Accept the old keys (``credential_type``/``connection_string_env``/... beside the
    section's other keys, and the CLI's ``credential: default_azure_credential``)."""
    legacy_keys = ("credential_type", "connection_string_env", where_key)
    for key in legacy_keys:
        if key in data and data[key] is None:
            del data[key]  # an unset legacy field (the Component declares them)
    legacy = [k for k in legacy_keys if k in data]
    old_cli = isinstance(data.get("credential"), str)
    if not legacy and not old_cli:
        return data
    data = dict(data)
    cred: dict[str, Any] = {"credential_type": None}
    if old_cli:
        cred["credential_type"] = data.pop("credential")
    elif isinstance(data.get("credential"), Mapping):
        raise ValueError(
            f"give the credential in one place: move {', '.join(legacy)} into {section}.credential"
        )
    for key in legacy:
        cred[key] = data.pop(key)
    if cred["credential_type"] is None:
        identity = where_key in cred
        cred["credential_type"] = "default_azure_credential" if identity else "connection_string"
    if cred["credential_type"] == "connection_string":
        cred.pop(where_key, None)
    else:
        cred.pop("connection_string_env", None)
    old_keys = ["credential", *legacy] if old_cli else legacy
    shown = ", ".join(f"{k}: {v}" for k, v in cred.items())
    warnings.warn(
        f"{section}: the old credential keys ({', '.join(old_keys)}) are deprecated; write "
        f"{section}.credential: {{{shown}}} (the old keys stop working in the next release)",
        ConfigDeprecationWarning,
        stacklevel=2,
    )
    data["credential"] = cred
    return data
