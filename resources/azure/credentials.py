"""Credentials, in one place: ``DefaultAzureCredential`` with options, connection-string parsing.

Imported by ``dagster_eventhub_ingest.resources.settings`` (the plain settings values) and
``dagster_eventhub_ingest.resources.store.azure_blob`` (the Azure Blob backend), which therefore no
longer import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from dagster_eventhub_ingest.resources.errors import ConfigurationError

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.core.credentials_async import AsyncTokenCredential

__all__ = [
    "CredentialOptions",
    "CredentialType",
    "identity_kwargs",
    "make_async_credential",
    "make_credential",
    "parse_connection_string",
]

CredentialType = Literal["connection_string", "default_azure_credential"]
#: ``DefaultAzureCredential`` options as plain pairs
#: (``dagster_eventhub_ingest.resources.config.IdentityOptions``).
CredentialOptions = tuple[tuple[str, Any], ...]

# DefaultAzureCredential has no single tenant option; these are the credentials that take one.
_TENANT_KWARGS = (
    "workload_identity_tenant_id",
    "interactive_browser_tenant_id",
    "visual_studio_code_tenant_id",
    "shared_cache_tenant_id",
)


def identity_kwargs(options: CredentialOptions) -> dict[str, Any]:
    """``DefaultAzureCredential`` keyword arguments for ``options`` (sync or ``aio`` alike):
    ``tenant_id`` becomes the tenant of every credential that takes one."""
    kwargs = dict(options)
    tenant = kwargs.pop("tenant_id", None)
    if tenant:
        for name in _TENANT_KWARGS:
            kwargs.setdefault(name, tenant)
    return kwargs


def make_credential(
    credential_type: CredentialType, options: CredentialOptions = ()
) -> TokenCredential:
    """Build an azure-identity credential for ``credential_type`` (inside the process using it).

    ``options``: ``DefaultAzureCredential`` keyword arguments (``managed_identity_client_id``,
    ``exclude_*_credential``); ``tenant_id`` sets the tenant of every credential that takes one.
    """
    _check_token_credential(credential_type)
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential(**identity_kwargs(options))


def make_async_credential(
    credential_type: CredentialType, options: CredentialOptions = ()
) -> AsyncTokenCredential:
    """:func:`make_credential` for the ``aio`` clients (``azure.identity.aio``, same options)."""
    _check_token_credential(credential_type)
    from azure.identity.aio import DefaultAzureCredential

    return DefaultAzureCredential(**identity_kwargs(options))


def _check_token_credential(credential_type: CredentialType) -> None:
    if credential_type != "default_azure_credential":
        raise ConfigurationError(
            f"credential_type={credential_type!r} has no token credential; valid: "
            "'default_azure_credential' (or give a connection string)"
        )


def parse_connection_string(conn_str: str, field_name: str) -> dict[str, str]:
    """Split ``Key=Value;...`` into a dict; the error names ``field_name`` and never the secret."""
    parts: dict[str, str] = {}
    chunks = conn_str.strip().strip(";").split(";")
    for number, chunk in enumerate(chunks, start=1):
        if not chunk.strip():
            continue
        key, sep, value = chunk.partition("=")
        if not sep or not key.strip():
            # The segment itself is not shown: a mangled segment is often the key itself.
            raise ConfigurationError(
                f"{field_name}: malformed connection string: segment {number} of {len(chunks)} "
                "is not 'Key=Value' (its text is not shown, it may hold a secret); expected "
                "'Key=Value;Key=Value;...' as copied from the Azure portal"
            )
        parts[key.strip()] = value.strip()
    return parts
