"""The provider's registration with Airflow (the ``apache_airflow_provider`` entry point).

``airflow providers list`` shows the package, its connection type gets its form (the fields of
:data:`dagster_eventhub_ingest.airflow_provider._form.FORM_FIELDS`) and its hook, and
``airflow connections add --conn-type azure_eventhub_ingest`` keeps the type. Importing this module
imports nothing from Airflow or the engine: Airflow reads it while it discovers its providers.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from dagster_eventhub_ingest.airflow_provider._form import (
    CONN_TYPE,
    FORM_FIELDS,
    UI_FIELD_BEHAVIOUR,
)

__all__ = ["get_provider_info"]

_PACKAGE = "dagster-eventhub-ingest"
_INTEGRATION = "Azure Event Hubs ingestion"
_MODULE = "dagster_eventhub_ingest.airflow_provider"


def _conn_fields() -> dict[str, Any]:
    return {
        f.name: {
            "label": f.label,
            "description": f.description,
            "schema": {"type": ["string", "null"], "examples": [f.placeholder]},
        }
        for f in FORM_FIELDS
    }


def _version() -> str:
    try:
        return version(_PACKAGE)
    except PackageNotFoundError:  # a checkout that was never installed
        return "0+unknown"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's ProvidersManager reads (``airflow/provider_info.schema.json``)."""
    return {
        "package-name": _PACKAGE,
        "name": "Azure Event Hubs ingestion (dagster-eventhub-ingest)",
        "description": "Lands Azure Event Hubs events into Spark tables in scheduled batches, "
        "exactly once: a hook, an ingest operator, a deferrable lag sensor and its trigger.",
        "versions": [_version()],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://pypi.org/project/dagster-eventhub-ingest/",
                "tags": ["azure"],
            }
        ],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": [f"{_MODULE}.hooks"]}],
        "operators": [
            {"integration-name": _INTEGRATION, "python-modules": [f"{_MODULE}.operators"]}
        ],
        "sensors": [{"integration-name": _INTEGRATION, "python-modules": [f"{_MODULE}.sensors"]}],
        "triggers": [{"integration-name": _INTEGRATION, "python-modules": [f"{_MODULE}.triggers"]}],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": f"{_MODULE}.hooks.EventHubIngestHook",
                "hook-name": _INTEGRATION,
                "conn-fields": _conn_fields(),
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
        "config": {
            "eventhub_ingest": {
                "description": "Settings of the dagster-eventhub-ingest provider.",
                "options": {
                    "azure_log_level": {
                        "description": "Level of the Azure SDK's loggers in tasks and on the "
                        "triggerer (HTTP requests of Blob Storage, AMQP links of Event Hubs, "
                        "tokens of azure-identity), which log every request at INFO. Set INFO "
                        "or DEBUG to see them while investigating.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "INFO",
                        "default": "WARNING",
                    }
                },
            }
        },
    }
