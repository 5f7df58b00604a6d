"""Object-store access for the ``deltalake`` sink: one set of options for delta-rs and pyarrow.

The driver creates, commits and verifies the Delta table with delta-rs (``storage_options``),
Spark tasks write the Parquet files with a pyarrow filesystem. Both are built here from the
sink's ``storage_options``, written with delta-rs's key names:

* ``account_name`` (or the account in an ``abfss://container@account.dfs.core.windows.net/``
  URI);
* an account key ``account_key``, or a SAS ``sas_token``, or a service principal
  ``client_id`` + ``client_secret`` + ``tenant_id``; none of them means Entra ID through the
  default chain (managed identity, workload identity; ``client_id`` alone picks a user-assigned
  managed identity);
* ``endpoint`` (e.g. Azurite's ``http://127.0.0.1:10000/devstoreaccount1``) with
  ``allow_http: "true"``, or ``use_emulator: "true"`` (``AZURITE_BLOB_STORAGE_URL`` or
  ``http://127.0.0.1:10000``).

Secrets in the options are never logged; errors name the keys, never their values.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.errors import ConfigurationError

if TYPE_CHECKING:
    from pyarrow import fs as pafs

__all__ = [
    "AZURE_SCHEMES",
    "SECRET_OPTION_KEYS",
    "arrow_filesystem",
    "delta_uri",
    "hidden_name",
    "is_azure_uri",
    "is_local_path",
]

#: URI schemes served by Azure Blob Storage / ADLS Gen2.
AZURE_SCHEMES = ("az", "abfs", "abfss", "azure")
#: Option keys whose values are secrets (must come from the environment in config files).
SECRET_OPTION_KEYS = ("account_key", "access_key", "sas_token", "sas_key", "client_secret")
_ALIASES = {
    "azure_storage_account_name": "account_name",
    "azure_storage_account_key": "account_key",
    "azure_storage_access_key": "account_key",
    "access_key": "account_key",
    "azure_storage_sas_token": "sas_token",
    "sas_key": "sas_token",
    "azure_client_id": "client_id",
    "azure_storage_client_id": "client_id",
    "azure_client_secret": "client_secret",
    "azure_storage_client_secret": "client_secret",
    "azure_tenant_id": "tenant_id",
    "azure_storage_tenant_id": "tenant_id",
    "azure_storage_endpoint": "endpoint",
    "azure_endpoint": "endpoint",
    "azure_storage_use_emulator": "use_emulator",
}


def hidden_name(name: str) -> bool:
    """Whether readers of a sink skip a file or directory of this name, as Spark's and
    pyarrow's datasets do: a leading ``_`` or ``.`` (staging, ``_SUCCESS``, checksums)."""
    return name.startswith(("_", "."))


def is_local_path(path: str) -> bool:
    """True for a path on this machine's file system (no scheme, or ``file:``)."""
    return "://" not in path or path.startswith("file:")


def delta_uri(path: str) -> str:
    """``path`` as a table URI: a local path made absolute, a URI as it is."""
    return path if "://" in path else os.path.abspath(path)


def is_azure_uri(uri: str) -> bool:
    """True for ``az://``, ``abfs[s]://`` and ``azure://`` locations."""
    return uri.split("://", 1)[0].lower() in AZURE_SCHEMES if "://" in uri else False


def _normalised(options: Mapping[str, str]) -> dict[str, str]:
    return {_ALIASES.get(k.lower(), k.lower()): str(v) for k, v in options.items()}


def _true(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes")


def arrow_filesystem(
    uri: str, options: Mapping[str, str] | None = None
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and root path for a table ``uri`` (local, or Azure by options).

    Raises:
        ConfigurationError: an Azure URI without an account name.
    """
    from pyarrow import fs as pafs

    if not is_azure_uri(uri):
        return pafs.FileSystem.from_uri(uri)
    opts = _normalised(options or {})
    parsed = urllib.parse.urlsplit(uri)
    container, _, account_host = parsed.netloc.partition("@")
    account = opts.get("account_name") or (account_host.split(".")[0] if account_host else "")
    if not account:
        raise ConfigurationError(
            f"sink path {uri!r}: no storage account; give storage_options account_name, or a "
            "URI like 'abfss://<container>@<account>.dfs.core.windows.net/<path>'"
        )
    kwargs: dict[str, str] = {"account_name": account}
    for key in ("account_key", "sas_token", "client_id", "client_secret", "tenant_id"):
        if opts.get(key):
            kwargs[key] = opts[key]
    endpoint = opts.get("endpoint")
    if _true(opts.get("use_emulator")):
        endpoint = os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000")
    if endpoint:
        ep = urllib.parse.urlsplit(endpoint)
        kwargs.update(
            blob_storage_authority=ep.netloc,
            blob_storage_scheme=ep.scheme or "https",
            dfs_storage_authority=ep.netloc,
            dfs_storage_scheme=ep.scheme or "https",
        )
    root = f"{container}/{parsed.path.strip('/')}".rstrip("/")
    return pafs.AzureFileSystem(**kwargs), root
