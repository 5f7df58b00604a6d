"""Benchmark: latency of the partition store's lease operations on Azurite, and storage calls.

Starts its own Azurite (``dagster_eventhub_ingest.emulator.azurite.azurite``), then prints, per
operation, the median and p95 latency over N samples and the storage calls each takes; then the
storage calls one owner needs to claim 32 partitions, compared with the official
``BlobCheckpointStore`` doing the same.

Usage::

    uv run --frozen python bench/store_ops.py [--samples 200] [--partitions 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore  # noqa: E402

from dagster_eventhub_ingest.emulator import azurite as services  # noqa: E402
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend  # noqa: E402
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore  # noqa: E402
from dagster_eventhub_ingest.resources.store.records import HubRef  # noqa: E402
from dagster_eventhub_ingest.resources.store.settings import StoreSettings  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _report import Report, add_json_flag, report  # noqa: E402


def _measure(
    backend: AzureBlobBackend, samples: int, op: Callable[[int], Any]
) -> tuple[float, float, float]:
    """Median ms, p95 ms and storage calls per call of ``op(i)`` over ``samples`` calls."""
    times = []
    calls_before = backend.operations
    for i in range(samples):
        started = time.perf_counter()
        op(i)
        times.append((time.perf_counter() - started) * 1000)
    calls = (backend.operations - calls_before) / samples
    return statistics.median(times), statistics.quantiles(times, n=20)[18], calls


def _store(conn: str, hub: HubRef) -> tuple[PartitionStore, AzureBlobBackend]:
    settings = StoreSettings(container=f"bench-{uuid.uuid4().hex[:12]}", connection_string=conn)
    backend = AzureBlobBackend.from_settings(settings)
    return PartitionStore(backend, hub), backend


def _sdk_store(conn: str, container: str) -> tuple[BlobCheckpointStore, list[int]]:
    calls = [0]

    def count(_response: Any) -> None:
        calls[0] += 1

    store = BlobCheckpointStore.from_connection_string(conn, container, raw_response_hook=count)
    return store, calls


def run(samples: int, partitions: int, rep: Report) -> None:
    hub = HubRef("bench.servicebus.windows.net", "telemetry", "$Default")
    with services.azurite() as conn:
        store, backend = _store(conn, hub)
        lease = store.claim("lease", "owner-a", None)
        assert lease is not None
        held = {"own": lease}  # the latest Ownership of the lease the loops work on

        def claim_new(i: int) -> None:
            store.claim(f"new{i}", "owner-a", None)

        def claim_takeover(i: int) -> None:
            store.claim(f"new{i}", "owner-b", listed[f"new{i}"])

        def renew(i: int) -> None:
            held["own"] = store.renew(held["own"])

        def record_intent(i: int) -> None:
            held["own"] = store.record_intent(held["own"], i * 10, i * 10 + 9)

        def checkpoint(i: int) -> None:
            held["own"] = store.checkpoint(held["own"], i * 10 + 9, str(i * 1000))

        rows = [("claim (new partition)", *_measure(backend, samples, claim_new))]
        listed = store.list_ownership()
        for name, op in [
            ("claim (takeover, CAS)", claim_takeover),
            ("renew", renew),
            ("record_intent", record_intent),
            ("checkpoint", checkpoint),
        ]:
            rows.append((name, *_measure(backend, samples, op)))

        print(f"store_ops: Azurite on 127.0.0.1, {samples} samples per operation")
        print(f"{'operation':<24}{'median ms':>10}{'p95 ms':>10}{'calls/op':>10}")
        for name, median, p95, calls in rows:
            print(f"{name:<24}{median:>10.2f}{p95:>10.2f}{calls:>10.1f}")
            rep.add(name, {"median_ms": round(median, 2), "p95_ms": round(p95, 2), "calls": calls})

        # One owner claims every partition of a fresh hub: list, then one CAS per partition.
        fresh, fresh_backend = _store(conn, hub)
        before = fresh_backend.operations
        started = time.perf_counter()
        fresh.list_ownership()
        for pid in range(partitions):
            fresh.claim(str(pid), "owner-a", None)
        ours_ms = (time.perf_counter() - started) * 1000
        ours = fresh_backend.operations - before

        sdk, sdk_calls = _sdk_store(conn, fresh_backend.container + "x")
        AzureBlobBackend.from_settings(
            StoreSettings(container=fresh_backend.container + "x", connection_string=conn)
        ).close()  # create the container outside the count
        args = (hub.fully_qualified_namespace, hub.eventhub_name, hub.consumer_group)
        started = time.perf_counter()
        sdk.list_ownership(*args)
        claimed = sdk.claim_ownership(
            [
                {
                    "fully_qualified_namespace": args[0],
                    "eventhub_name": args[1],
                    "consumer_group": args[2],
                    "partition_id": str(pid),
                    "owner_id": "owner-a",
                }
                for pid in range(partitions)
            ]
        )
        sdk_ms = (time.perf_counter() - started) * 1000
        assert len(list(claimed)) == partitions
        print(
            f"claim {partitions} partitions, one owner, fresh hub: {ours} storage calls "
            f"({ours_ms:.0f} ms) vs official BlobCheckpointStore {sdk_calls[0]} calls "
            f"({sdk_ms:.0f} ms): {sdk_calls[0] / ours:.2f}x the calls (it tries "
            "set_blob_metadata first, gets 404, then uploads)"
        )
        rep.add(
            f"claim {partitions} partitions, fresh hub, storage calls",
            {
                "ours": ours,
                "official": sdk_calls[0],
                "official / ours": round(sdk_calls[0] / ours, 2),
            },
        )

        # Takeover of the same partitions once expired: both do list + one CAS per partition.
        sdk_calls[0] = 0
        listed_sdk = list(sdk.list_ownership(*args))
        sdk.claim_ownership([{**o, "owner_id": "owner-b"} for o in listed_sdk])
        before = fresh_backend.operations
        for owned_pid, o in fresh.list_ownership().items():
            fresh.claim(owned_pid, "owner-b", o)
        print(
            f"take over {partitions} expired partitions: {fresh_backend.operations - before} "
            f"storage calls vs official {sdk_calls[0]}"
        )
        rep.add(
            f"take over {partitions} expired partitions, storage calls",
            {"ours": fresh_backend.operations - before, "official": sdk_calls[0]},
        )
        sdk.close()
        backend.close()
        fresh_backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=32)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("store_ops.py", args.json) as rep:
        run(args.samples, args.partitions, rep)


if __name__ == "__main__":
    main()
