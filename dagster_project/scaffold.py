"""``dg scaffold defs dagster_eventhub_ingest.EventHubIngestComponent <name>``: a commented
``defs.yaml`` that ``dg check defs`` accepts once the environment variables it names are set.

It names the two secrets by environment variable (``EVENTHUB_CONNECTION_STRING``,
``AZURE_STORAGE_CONNECTION_STRING``) and the rest by example values to replace; every optional
key is shown, commented out, with what it does.
"""

from __future__ import annotations

import re
from typing import Any

import dagster as dg

__all__ = ["EventHubIngestScaffolder", "defs_yaml"]

_TEMPLATE = """\
# Lands one Azure Event Hub in a Spark sink, exactly once, in scheduled batches: a partitioned
# asset (one Dagster partition per Event Hub partition) with its lag check, job, schedule and
# resources. `dg check defs` checks it (set the two environment variables below first); the keys
# are those of the `ehingest` config file (docs/dagster.md).
type: {type_name}

attributes:
  asset_key: {asset_key}
  eventhub:
    eventhub_name: telemetry          # your Event Hub
    consumer_group: $Default
    # The namespace connection string (a listen policy is enough), read from this variable at
    # run time: Dagster shows its name, never its value. With Entra ID instead:
    #   credential: {{credential_type: default_azure_credential,
    #                fully_qualified_namespace: myns.servicebus.windows.net}}
    credential:
      connection_string_env: EVENTHUB_CONNECTION_STRING
  store:
    # The Blob container for leases and checkpoints (created when missing), interoperable with
    # the Azure SDK's checkpoint store. Entra ID: {{credential_type: default_azure_credential,
    # account_url: https://myaccount.blob.core.windows.net}}
    container: eventhub-state
    credential:
      connection_string_env: AZURE_STORAGE_CONNECTION_STRING
  sink:
    # Where events land: a path every Spark node shares (abfss://..., a mount), or `table:`.
    # format: parquet (default), delta (Spark with Delta), deltalake (delta-rs, the
    # `deltalake` extra) or any Spark format.
    format: parquet
    path: data/{asset_key}
  # The hub's partition ids; omit for dynamic partitions a sensor keeps in sync with the hub.
  # partitions: [0, 1, 2, 3]
  # Runs every N minutes, K of them at once, sharing the partitions.
  schedule:
    every_minutes: 5
    runs: 1
  # Fails the asset check when a partition is more than this many events behind.
  lag_check:
    max_lag_events: 100000
  # Run options (the `ehingest` config file's keys), e.g.:
  # max_events_per_partition: 1000000
  # strategy: balanced
  # Spark: unset, a local session; or a cluster or Spark Connect:
  # spark: {{master: "spark://host:7077"}}     # or {{remote: "sc://host:15002"}}
"""


def defs_yaml(type_name: str, asset_key: str) -> str:
    """The scaffolded ``defs.yaml`` for a component named ``asset_key``."""
    return _TEMPLATE.format(type_name=type_name, asset_key=asset_key)


def _asset_key(name: str) -> str:
    key = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    return key if key and not key[0].isdigit() else f"events_{key}"


class EventHubIngestScaffolder(dg.Scaffolder):
    """Writes :func:`defs_yaml` (or, with ``--format python``, Dagster's own ``component.py``)."""

    def scaffold(self, request: dg.ScaffoldRequest[Any]) -> None:
        if request.scaffold_format != "yaml":
            from dagster.components.component_scaffolding import scaffold_component

            scaffold_component(request)
            return
        name = request.target_path.parent.name if request.append else request.target_path.name
        text = defs_yaml(request.type_name, _asset_key(name))
        if request.append:
            with request.target_path.open("a", encoding="utf-8") as f:
                f.write("---\n" + text)
        else:
            (request.target_path / "defs.yaml").write_text(text, encoding="utf-8")
