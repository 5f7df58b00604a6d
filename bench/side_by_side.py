"""Side by side: K real ``EventProcessorClient`` s vs K of our claim cycles, same hub and store.

Starts Azurite (``dagster_eventhub_ingest.emulator.azurite``) and the project's Event Hubs emulator,
creates one hub of P partitions, then for each contender starts K owners together and measures, on
loopback:

- time until every partition is owned and max - min <= 1 across the K owners (polled every
  20 ms by an uncounted client);
- storage HTTP calls made by the owners until then (a counting per-call policy on each blob
  client: the SDK's ``BlobCheckpointStore`` and our ``AzureBlobBackend`` alike).

Contenders: the SDK (azure-eventhub + azure-eventhub-checkpointstoreblob, ``greedy`` and
``balanced``, ``load_balancing_interval`` as given) and ours (``claim_cycle`` with ``greedy``,
the same interval). Goal: ours, K=4 P=32, balanced in one claim phase, under 2 s.

Run: ``uv run --frozen python bench/side_by_side.py [--owners 4] [--partitions 32]
[--interval 1.0] [--timeout 120]``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.storage.blob import ContainerClient

from dagster_eventhub_ingest.emulator.azurite import azurite
from dagster_eventhub_ingest.emulator.testing import running_emulator
from dagster_eventhub_ingest.ops.balancing import claim_cycle, leave
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import HubRef
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import Report, add_json_flag, report


class CountingPolicy(SansIOHTTPPolicy):
    """Counts every HTTP request a blob client sends (thread-safe)."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def on_request(self, request: Any) -> None:
        with self._lock:
            self.calls += 1


def _balanced(container: ContainerClient, partitions: int, owners: int) -> bool:
    held: Counter[str] = Counter()
    for blob in container.list_blobs(include=["metadata"]):
        if "/ownership/" in blob.name and (blob.metadata or {}).get("ownerid"):
            held[blob.metadata["ownerid"]] += 1
    return (
        sum(held.values()) == partitions
        and len(held) == owners
        and max(held.values()) - min(held.values()) <= 1
    )


def _measure(
    conn: str,
    container_name: str,
    partitions: int,
    owners: int,
    policy: CountingPolicy,
    start: Callable[[], None],
    stop: Callable[[], None],
    timeout: float,
) -> tuple[float | None, int]:
    watcher = ContainerClient.from_connection_string(conn, container_name)
    t0 = time.perf_counter()
    start()
    try:
        while time.perf_counter() - t0 < timeout:
            if _balanced(watcher, partitions, owners):
                return time.perf_counter() - t0, policy.calls
            time.sleep(0.02)
        return None, policy.calls
    finally:
        stop()
        watcher.close()


def run_sdk(
    conn: str, hub: Any, strategy: str, owners: int, interval: float, timeout: float
) -> Any:
    """K EventProcessorClients with the official blob checkpoint store."""
    from azure.eventhub import EventHubConsumerClient
    from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

    container = f"sdk-{uuid.uuid4().hex[:12]}"
    ContainerClient.from_connection_string(conn, container).create_container()
    policy = CountingPolicy()
    clients = []
    for _ in range(owners):
        store = BlobCheckpointStore.from_connection_string(
            conn, container, _additional_pipeline_policies=[policy]
        )
        clients.append(
            EventHubConsumerClient.from_connection_string(
                hub.connection_string,
                consumer_group="$Default",
                eventhub_name=hub.name,
                checkpoint_store=store,
                load_balancing_strategy=strategy,
                load_balancing_interval=interval,
            )
        )
    threads = [
        threading.Thread(
            target=c.receive,
            kwargs={"on_event": lambda ctx, ev: None, "starting_position": "-1"},
            daemon=True,
        )
        for c in clients
    ]

    def start() -> None:
        for t in threads:
            t.start()

    def stop() -> None:
        for c in clients:
            with contextlib.suppress(Exception):
                c.close()
        for t in threads:
            t.join(10)

    return _measure(conn, container, len(hub.partition_ids), owners, policy, start, stop, timeout)


def run_ours(
    conn: str, hub: Any, strategy: str, owners: int, interval: float, timeout: float
) -> Any:
    """K owners running our claim cycle every ``interval`` against Azurite."""
    container = f"ours-{uuid.uuid4().hex[:12]}"
    policy = CountingPolicy()
    settings = StoreSettings(container=container, connection_string=conn)
    ref = HubRef("emulator.local", hub.name, "$Default")
    stores = [
        PartitionStore(
            AzureBlobBackend.from_settings(settings, _additional_pipeline_policies=[policy]), ref
        )
        for _ in range(owners)
    ]
    policy.calls = 0  # container creation is setup, not balancing
    done = threading.Event()
    targets = list(hub.partition_ids)

    def owner(i: int) -> None:
        held = {}
        while not done.is_set():
            held = claim_cycle(
                stores[i],
                f"run-{i}",
                strategy,
                targets=targets,
                expiry=timedelta(seconds=60),
                join_grace=0.3,
            )
            done.wait(interval)
        leave(stores[i], f"run-{i}", held)

    threads = [threading.Thread(target=owner, args=(i,), daemon=True) for i in range(owners)]

    def start() -> None:
        for t in threads:
            t.start()

    def stop() -> None:
        done.set()
        for t in threads:
            t.join(30)

    return _measure(conn, container, len(targets), owners, policy, start, stop, timeout)


def main() -> None:
    """Start the services, run every contender, print one table with the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owners", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("side_by_side.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Report) -> None:
    # The SDK logs every partition it loses while balancing ("link stolen"): expected here.
    logging.getLogger("azure").setLevel(logging.CRITICAL)
    with azurite() as conn, running_emulator() as emu:
        hub = emu.create_hub(partitions=args.partitions)
        rows = []
        for label, fn, strategy in (
            ("sdk greedy", run_sdk, "greedy"),
            ("sdk balanced", run_sdk, "balanced"),
            ("ours greedy", run_ours, "greedy"),
        ):
            seconds, calls = fn(conn, hub, strategy, args.owners, args.interval, args.timeout)
            rows.append((label, seconds, calls))
            print(
                f"{label:<14} balanced_s={'never' if seconds is None else f'{seconds:.2f}'} "
                f"storage_calls={calls}",
                flush=True,
            )
    print(f"\n# K={args.owners} P={args.partitions} load_balancing_interval={args.interval}s")
    print(f"{'contender':<14}{'balanced_s':>12}{'storage_calls':>15}")
    for label, seconds, calls in rows:
        print(f"{label:<14}{'never' if seconds is None else f'{seconds:.2f}':>12}{calls:>15}")
    for label, seconds, calls in rows:
        rep.add(label, {"balanced_s": seconds, "storage_calls": calls})
    ours = rows[-1]
    for label, seconds, calls in rows[:-1]:
        if seconds and ours[1]:
            ratio_t, ratio_c = seconds / ours[1], calls / max(ours[2], 1)
            print(f"ratio {label} / ours: time x{ratio_t:.1f}, storage calls x{ratio_c:.1f}")
            rep.add(f"{label} / ours, time", round(ratio_t, 2))
            rep.add(f"{label} / ours, storage calls", round(ratio_c, 2))
    goal = ours[1] is not None and ours[1] < 2.0
    rep.add("goal: ours balanced < 2 s", goal)
    verdict = "met" if goal else "NOT met"
    print(f"goal (ours K={args.owners} P={args.partitions} balanced < 2 s): {verdict}")


if __name__ == "__main__":
    main()
