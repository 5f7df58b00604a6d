"""Print what an ingestion landed: rows per partition, where, Dagster's record, the checkpoints.

Used by ``scripts/demo.sh``; works for any Parquet sink path of the ingestion asset::

    python -m dagster_eventhub_ingest.dagster_project.demo_report --asset eventhub_events --sink
    /data/out \\
        --hub demo --container eventhub-state

Connection strings come from ``EVENTHUB_CONNECTION_STRING`` and
``AZURE_STORAGE_CONNECTION_STRING``; the Dagster instance from ``DAGSTER_HOME``.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path

import dagster as dg

from dagster_eventhub_ingest.dagster_project.metadata import key as metadata_key
from dagster_eventhub_ingest.ops.text import format_table
from dagster_eventhub_ingest.resources.azure.hub_client import sort_partition_ids
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = ["main", "sink_rows_per_partition"]


def sink_rows_per_partition(path: Path) -> tuple[dict[str, int], int, int]:
    """Rows per Event Hub partition in a Parquet sink, total rows and distinct events."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(path), format="parquet", partitioning="hive")
    table = dataset.to_table(columns=["partition", "sequenceNumber"])
    parts = table.column("partition").to_pylist()
    seqs = table.column("sequenceNumber").to_pylist()
    return dict(Counter(parts)), table.num_rows, len(set(zip(parts, seqs, strict=True)))


def _table(rows: list[list[str]], header: list[str]) -> str:
    return "\n".join("  " + line for line in format_table(header, rows, rule=True))


def main(argv: list[str] | None = None) -> None:
    """Print the report (see module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asset", default="eventhub_events")
    parser.add_argument("--sink", required=True, type=Path)
    parser.add_argument("--hub", required=True)
    parser.add_argument("--container", required=True)
    args = parser.parse_args(argv)

    hub = EventHubSettings(
        eventhub_name=args.hub, connection_string=os.environ["EVENTHUB_CONNECTION_STRING"]
    )
    store = PartitionStore(
        AzureBlobBackend.from_settings(
            StoreSettings(
                container=args.container,
                connection_string=os.environ["AZURE_STORAGE_CONNECTION_STRING"],
                create_container=False,
            )
        ),
        hub.hub_ref(),
    )
    per, total, distinct = sink_rows_per_partition(args.sink)
    key = dg.AssetKey.from_user_string(args.asset)

    print(f"\nOutput location: {args.sink.resolve()} (Parquet, one folder per batch)")
    print(f"Rows landed: {total} ({distinct} distinct events: each landed once)\n")

    with dg.DagsterInstance.get() as instance:
        rows = []
        for pid in sort_partition_ids(list(per) or []):
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[pid]), limit=1
            ).records
            md = {}
            run = ""
            if records:
                event = records[0].event_log_entry
                run = event.run_id[:8]
                mat = event.asset_materialization
                md = {k: v.value for k, v in (mat.metadata if mat else {}).items()}
            rows.append(
                [
                    pid,
                    str(per.get(pid, 0)),
                    str(md.get(metadata_key("sequence_range"), "-")),
                    str(md.get("dagster/partition_row_count", "-")),
                    run,
                ]
            )
        print("Rows per partition (sink) and Dagster's materialization record:")
        print(_table(rows, ["partition", "rows", "sequence range", "partition row count", "run"]))

    ownership = store.list_ownership()
    checkpoints = store.list_checkpoints(ownership)
    cp_rows = []
    for pid in sort_partition_ids(sorted(set(checkpoints) | set(ownership))):
        cp = checkpoints.get(pid)
        own = ownership.get(pid)
        cp_rows.append(
            [
                pid,
                str(cp.sequence_number) if cp else "-",
                (cp.offset or "-") if cp else "-",
                (own.owner_id[:8] if own and own.owner_id else "(released)"),
                str(own.epoch) if own else "-",
            ]
        )
    print(f"\nCheckpoint table ({hub.hub_ref().describe()}, container {args.container}):")
    print(_table(cp_rows, ["partition", "sequence number", "offset", "owner", "epoch"]))


if __name__ == "__main__":
    main()
