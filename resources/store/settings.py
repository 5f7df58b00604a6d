"""Where leases and checkpoints live: the store's frozen, picklable settings.

Plain values (a container and how to reach it); the Blob backend is built from them where it is
used (:meth:`dagster_eventhub_ingest.resources.store.azure_blob.AzureBlobBackend.from_settings`),
never pickled. The connection string is kept out of ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dagster_eventhub_ingest.resources.azure.credentials import (
    CredentialOptions,
    CredentialType,
    parse_connection_string,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError

__all__ = ["StoreSettings", "check_container_name"]


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
