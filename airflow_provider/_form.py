"""The connection type and its form, as plain values (no Airflow, no engine import).

Read by ``get_provider_info`` while Airflow discovers its providers, and by the hook (Airflow
3.1 asks the hook for the form's fields; later versions read them from the provider info).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CONN_TYPE", "FORM_FIELDS", "UI_FIELD_BEHAVIOUR", "WASB_CONN_TYPE", "FormField"]

#: This package's connection type (all three roles; the fields tell them apart).
CONN_TYPE = "azure_eventhub_ingest"
#: The Azure provider's Blob Storage connection type, accepted for the store.
WASB_CONN_TYPE = "wasb"


@dataclass(frozen=True)
class FormField:
    """A text field of the connection form, saved as the extra key ``name``."""

    name: str
    label: str
    placeholder: str
    description: str


#: The extra keys the connection form shows as fields (the other extra keys are JSON in the
#: form's Extra box). One connection type serves the three roles, so each label says its role.
FORM_FIELDS: tuple[FormField, ...] = (
    FormField(
        "consumer_group",
        "Event Hubs: consumer group",
        "$Default",
        "The consumer group whose checkpoints the runs move (default $Default).",
    ),
    FormField(
        "container",
        "Store: Blob container",
        "eventhub-state",
        "The Blob container for leases and checkpoints (store connections only).",
    ),
    FormField(
        "format",
        "Sink: format",
        "parquet",
        "parquet (default), delta, deltalake or any Spark format (sink connections only).",
    ),
    FormField(
        "path",
        "Sink: path",
        "abfss://lake@account.dfs.core.windows.net/raw/telemetry",
        "Where events land, shared by every Spark node (or give a table instead).",
    ),
    FormField("table", "Sink: table", "raw.telemetry", "A Spark table instead of a path."),
)


#: Labels and hidden fields of the connection form (``ui-field-behaviour``).
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["port", "login"],
    "relabeling": {
        "password": "Connection string (secret)",
        "schema": "Event Hubs: Event Hub name",
        "host": "Namespace or account URL (with extra.credential)",
    },
    "placeholders": {
        "extra": '{"credential": "default_azure_credential"}',
        "schema": "telemetry",
        "host": "myns.servicebus.windows.net",
        "password": "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=...",
    },
}
