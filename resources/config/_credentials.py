"""Credentials: one shape for the Event Hub and the store, in YAML, resources and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from dagster_eventhub_ingest.resources.config._model import (
    StrictModel,
    _show,
    _suggest,
    format_validation_error,
    setting,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError


class IdentityOptions(StrictModel):
    """Options of azure-identity's ``DefaultAzureCredential`` (Entra ID, no secret in config)."""

    managed_identity_client_id: str | None = setting(
        default=None,
        description="Client id of a user-assigned managed identity (unset: system-assigned).",
    )
    tenant_id: str | None = setting(
        default=None,
        description="Entra tenant for the credentials that take one (workload identity, "
        "Visual Studio Code, shared cache, interactive browser).",
    )
    exclude_environment_credential: bool = setting(default=False, description="Skip AZURE_* env.")
    exclude_workload_identity_credential: bool = setting(
        default=False, description="Skip workload identity (Kubernetes)."
    )
    exclude_managed_identity_credential: bool = setting(
        default=False, description="Skip managed identity."
    )
    exclude_shared_token_cache_credential: bool = setting(
        default=False, description="Skip the shared token cache."
    )
    exclude_cli_credential: bool = setting(default=False, description="Skip the Azure CLI login.")
    exclude_developer_cli_credential: bool = setting(
        default=False, description="Skip the Azure Developer CLI login."
    )
    exclude_powershell_credential: bool = setting(
        default=False, description="Skip Azure PowerShell."
    )
    exclude_visual_studio_code_credential: bool = setting(
        default=False, description="Skip Visual Studio Code."
    )
    exclude_broker_credential: bool = setting(
        default=False, description="Skip the broker (WAM) login."
    )
    exclude_interactive_browser_credential: bool = setting(
        default=True, description="Skip the interactive browser login (skipped by default)."
    )

    def credential_options(self) -> tuple[tuple[str, Any], ...]:
        """The options as plain, picklable pairs (what the settings carry to executors)."""
        out: list[tuple[str, Any]] = []
        for name in IdentityOptions.model_fields:
            value = getattr(self, name)
            if value != IdentityOptions.model_fields[name].default:
                out.append((name, value))
        return tuple(out)


class EventHubConnectionStringCredential(StrictModel):
    """An Event Hubs connection string, read from an environment variable (never from a file)."""

    credential_type: Literal["connection_string"] = setting(
        default="connection_string", description="Selects connection-string authentication."
    )
    connection_string_env: str = setting(
        default="EVENTHUB_CONNECTION_STRING",
        description="Name of the environment variable holding the connection string "
        "('Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...[;EntityPath=hub]').",
    )


class EventHubIdentityCredential(IdentityOptions):
    """DefaultAzureCredential for a namespace (managed identity, workload identity, CLI)."""

    credential_type: Literal["default_azure_credential"] = setting(
        default="default_azure_credential", description="Selects DefaultAzureCredential."
    )
    fully_qualified_namespace: str = setting(
        description="The namespace host, e.g. 'myns.servicebus.windows.net'."
    )


class StoreConnectionStringCredential(StrictModel):
    """A Blob Storage connection string, read from an environment variable."""

    credential_type: Literal["connection_string"] = setting(
        default="connection_string", description="Selects connection-string authentication."
    )
    connection_string_env: str = setting(
        default="AZURE_STORAGE_CONNECTION_STRING",
        description="Name of the environment variable holding the connection string.",
    )


class StoreIdentityCredential(IdentityOptions):
    """DefaultAzureCredential for a storage account."""

    credential_type: Literal["default_azure_credential"] = setting(
        default="default_azure_credential", description="Selects DefaultAzureCredential."
    )
    account_url: str = setting(
        description="The Blob service URL, e.g. 'https://myaccount.blob.core.windows.net'."
    )


def _pick_credential(
    value: Any, by_string: type[StrictModel], by_identity: type[StrictModel]
) -> Any:
    """Validate a credential mapping as the class its ``credential_type`` names.

    ``credential_type`` defaults to ``connection_string``. (A pydantic discriminator would do
    this, but Dagster's component schema cannot carry one.)
    """
    classes = {"connection_string": by_string, "default_azure_credential": by_identity}
    if isinstance(value, str):
        shown = value if value in classes else "connection_string"
        raise ValueError(
            f"{_show(value)} must be a mapping; write credential: {{credential_type: {shown}, "
            "...} (valid credential_type: connection_string, default_azure_credential)"
        )
    if not isinstance(value, Mapping):
        return value
    if "credential_type" not in value:
        # Keys only DefaultAzureCredential takes, without the type that selects it.
        identity_only = sorted(
            set(value) - set(by_string.model_fields) & set(by_identity.model_fields)
        )
        if identity_only:
            raise ValueError(
                f"{', '.join(identity_only)}: a key of credential_type default_azure_credential; "
                "add credential_type: default_azure_credential (the default is connection_string)"
            )
    kind = value.get("credential_type", "connection_string")
    if kind not in classes:
        raise ValueError(
            f"credential_type {_show(kind)} is not valid; {_suggest(str(kind), list(classes))}"
            "valid: connection_string, default_azure_credential"
        )
    try:
        return classes[kind].model_validate(value)
    except ValidationError as exc:
        raise ValueError(format_validation_error(exc)) from None


def _env_value(env_name: str, where: str, env: Mapping[str, str]) -> str:
    value = env.get(env_name)
    if not value:
        raise ConfigurationError(
            f"{where}.credential.connection_string_env: environment variable {env_name} is not "
            "set (or empty); export the connection string in it before running"
        )
    return value
