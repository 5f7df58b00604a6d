"""Exactly once under crashes: concurrent ``ehingest run`` processes killed with SIGKILL at every
step while events keep arriving; afterwards the sink holds every sent event exactly once.

Faults come from the ``EHINGEST_FAULT`` hook (ops/run/fault.py, docs/run.md): each faulted process
dies the first time it reaches its step. The store is Azurite, the hub the project's emulator
(driven by the real SDK, reachable from the subprocesses over TCP), the sink Parquet written by
local Spark in each process.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import random
import signal
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.support.cli import start_ehingest, write_config
from tests.support.landed import assert_exactly_once, landed_events, send_tagged, sent_events

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 8
CONCURRENT = 3
# The chaos phase lasts at least CHAOS_SECONDS and goes on (at most CHAOS_MAX_SECONDS) until
# KILLS runs died at KILLED_STEPS different steps: a cold run's Spark start takes 10 s on a quiet
# machine and over a minute while CI's tiers start beside it, so a fixed window killed 4 (CI).
CHAOS_SECONDS = 70
CHAOS_MAX_SECONDS = 300
KILLS = 5
KILLED_STEPS = 4
FAULTS = [
    "after_claim:1",
    "after_intent:1",
    "mid_read:1",
    "after_write:1",
    "during_checkpoint:2",
    "during_checkpoint:1",
    "after_checkpoint:1",
]


class Sender(threading.Thread):
    """Sends small batches of unique events to random partitions until stopped.

    One producer for all sends (``close()`` ends it): a producer per send paid a connection and
    its handshake each time, ~1 s at CI's load, and the chaos phase then saw ~500 events instead
    of thousands."""

    def __init__(self, hub) -> None:
        super().__init__(daemon=True)
        self.hub = hub
        self.sent: dict[str, list[bytes]] = {p: [] for p in hub.partition_ids}
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._rng = random.Random(5)
        self._n = itertools.count()
        self._producer = hub.producer()

    def send_once(self) -> None:
        from azure.eventhub import EventData

        pid = self._rng.choice(self.hub.partition_ids)
        bodies = [
            f"{pid}:{next(self._n)}:{self._rng.getrandbits(64):x}".encode() * 8
            for _ in range(self._rng.randint(1, 12))
        ]
        batch = self._producer.create_batch(partition_id=pid)
        for body in bodies:
            batch.add(EventData(body))
        self._producer.send_batch(batch)
        self.sent[pid].extend(bodies)

    def run(self) -> None:
        try:
            while not self.stop.wait(0.15):
                self.send_once()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._producer.close()


def _spawn(config: Path, owner: str, fault: str | None, log_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "EHINGEST_FAULT_MID_READ_MAX_S": "0.8"}
    env.pop("EHINGEST_FAULT", None)
    if fault:
        env["EHINGEST_FAULT"] = fault
    return start_ehingest(
        "-v",
        "run",
        "--config",
        str(config),
        "--owner",
        owner,
        env=env,
        log=log_dir / f"{owner}.log",
    )


def _reap(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a killed driver (JVM, workers)


def _covered(outcomes: collections.Counter[str]) -> bool:
    """Whether at least KILLS runs were killed, at KILLED_STEPS different steps."""
    killed = sum(n for k, n in outcomes.items() if k.endswith("killed"))
    steps_killed = {k.split(":")[0] for k in outcomes if k.endswith("killed")}
    return killed >= KILLS and len(steps_killed) >= KILLED_STEPS


@pytest.mark.timeout(1500)  # chaos up to CHAOS_MAX_SECONDS, then up to 4 final runs of 240 s
def test_concurrent_runs_killed_at_every_step_land_each_event_exactly_once(
    make_eventhub,
    monkeypatch: pytest.MonkeyPatch,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    hub = make_eventhub(partitions=PARTITIONS)
    out = tmp_path / "out"
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setenv("EO_EH_CONN", hub.connection_string)
    monkeypatch.setenv("EO_ST_CONN", azurite_connection_string)
    base: dict[str, Any] = {
        "eh_conn_env": "EO_EH_CONN",
        "store_conn_env": "EO_ST_CONN",
        "strategy": "balanced",
        "lease_expiry_seconds": 4,
        "join_grace_seconds": None,
        "receive_timeout_seconds": 10,
    }
    chaos_cfg = write_config(
        tmp_path, hub, container_name, name="chaos", max_events_per_partition=15, **base
    )
    final_cfg = write_config(
        tmp_path, hub, container_name, name="final", max_events_per_partition=100_000, **base
    )

    sender = Sender(hub)
    for _ in range(PARTITIONS * 3):
        sender.send_once()
    sender.start()
    started = time.monotonic()
    procs: list[tuple[subprocess.Popen, str]] = []
    outcomes: collections.Counter[str] = collections.Counter()
    faults = itertools.cycle(FAULTS)
    names = itertools.count()
    try:
        # Chaos: CONCURRENT slots, each restarting a faulted run as soon as the previous ends.
        min_end = time.monotonic() + CHAOS_SECONDS
        max_end = time.monotonic() + CHAOS_MAX_SECONDS

        def spawning() -> bool:
            now = time.monotonic()
            return now < min_end or (now < max_end and not _covered(outcomes))

        slots: list[tuple[subprocess.Popen, str] | None] = [None] * CONCURRENT
        while spawning() or any(slots):
            for i, slot in enumerate(slots):
                if slot is not None:
                    proc, fault = slot
                    if proc.poll() is None:
                        continue
                    _reap(proc)
                    outcomes[
                        f"{fault} -> {'killed' if proc.returncode == -9 else proc.returncode}"
                    ] += 1
                    slots[i] = None
                if spawning():
                    fault = next(faults)
                    proc = _spawn(chaos_cfg, f"chaos-{next(names)}", fault, logs)
                    procs.append((proc, fault))
                    slots[i] = (proc, fault)
            time.sleep(0.3)
        sender.stop.set()
        sender.join(30)
        sender.close()
        assert sender.error is None, sender.error
        chaos_done = time.monotonic()
        # Then let runs finish: at most a few clean runs must bring every partition up to date.
        for attempt in range(4):
            proc = _spawn(final_cfg, f"final-{attempt}", None, logs)
            procs.append((proc, "none"))
            code = proc.wait(240)
            _reap(proc)
            if code == 0:
                break
        else:
            pytest.fail("no clean run completed; see logs in " + str(logs))
    finally:
        sender.stop.set()
        sender.close()
        for proc, _ in procs:
            _reap(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    print(  # shown with -s / on failure
        f"\nchaos outcomes: {dict(outcomes)}; chaos+drain {chaos_done - started:.0f} s, "
        f"final run(s) {time.monotonic() - chaos_done:.0f} s, "
        f"{sum(len(b) for b in sender.sent.values())} events sent"
    )
    assert _covered(outcomes), dict(outcomes)

    expected = sent_events(sender.sent)
    assert_exactly_once(landed_events(out), expected)
    assert sum(expected.values()) > 500


@pytest.mark.spark
def test_the_fault_scenarios_keep_output_equal_to_input(
    spark, eventhub_emulator, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """The same claim across the edge states, one after another on one sink: the hub
    dying mid-read, the store dying at the checkpoint and at a random moment, a checkpoint whose
    response was lost, a duplicate owner id, the hub re-created (checkpoint ahead: refused, then
    reset on request). Each run's outcome may be an error; the output must stay exact."""
    import re

    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.resources.errors import (
        CheckpointAheadError,
        DuplicateOwnerError,
        EventHubUnavailableError,
        StoreUnavailableError,
    )
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings
    from tests.support.faultproxy import FaultProxy

    hub = eventhub_emulator.create_hub(partitions=2)
    out = tmp_path / "out"
    old: dict[str, list[bytes]] = {}
    store_port = int(
        re.search(r"BlobEndpoint=http://127\.0\.0\.1:(\d+)", azurite_connection_string)[1]
    )
    with (
        FaultProxy(("127.0.0.1", eventhub_emulator.port)) as hub_proxy,
        FaultProxy(("127.0.0.1", store_port)) as store_proxy,
    ):
        cfg = IngestSettings(
            eventhub=EventHubSettings(
                eventhub_name=hub.name,
                connection_string=hub.connection_string.replace(
                    f":{eventhub_emulator.port}", f":{hub_proxy.port}"
                ),
            ),
            store=StoreSettings(
                container=container_name,
                connection_string=azurite_connection_string.replace(
                    f":{store_port}/", f":{store_proxy.port}/"
                ),
            ),
            sink=SinkSettings(format="parquet", path=str(out)),
            lease_expiry_seconds=15.0,
            receive_timeout_seconds=5.0,
            join_grace_seconds=0.0,
            report_lag_seconds=False,
        )

        def run(owner: str, **overrides):
            return run_ingestion(cfg.replace(**overrides), spark, owner_id=owner)

        def revive() -> None:
            for proxy in (hub_proxy, store_proxy):
                proxy.dead, proxy.cut_after_bytes = False, None

        # 1. The hub dies mid-read: nothing written, the intents stay.
        send_tagged(hub, old, 1500, "a", repeat=12)
        hub_proxy.cut_after_bytes = 64 * 1024
        with pytest.raises(EventHubUnavailableError):
            run("hub-dies")
        assert hub_proxy.cuts == 1
        revive()
        # 2. The store dies at the checkpoint: the replayed batch is written, not checkpointed.
        store_proxy.die_at(b"x-ms-meta-ehisequencenumber")
        with pytest.raises(StoreUnavailableError):
            run("store-dies")
        assert store_proxy.died
        revive()
        # 3. A checkpoint written whose response was lost: a success, not a lost race.
        send_tagged(hub, old, 200, "b", repeat=12)
        store_proxy.drop_response_after(b"x-ms-meta-ehisequencenumber")
        assert run("lost-response").complete
        assert store_proxy.dropped
        # 4. A second process with a live owner id (here: the same process's running instance).
        from dagster_eventhub_ingest.ops.balancing.liveness import OwnerInstance, take_owner_id
        from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

        live = OwnerInstance.current()
        live.start()
        try:
            holder = PartitionStore(
                AzureBlobBackend.from_settings(cfg.store),
                cfg.eventhub.hub_ref(),
                instance=live.token(),
            )
            take_owner_id(holder, "twin", live, expiry=timedelta(seconds=15))
            send_tagged(hub, old, 100, "c", repeat=12)
            with pytest.raises(DuplicateOwnerError):
                run("twin")
        finally:
            live.stop()
        # 5. The store dies at a random moment of a run (claim, intent, read, checkpoint...).
        send_tagged(hub, old, 300, "d", repeat=12)
        timer = threading.Timer(
            random.Random(9).uniform(0.5, 4.0), setattr, (store_proxy, "dead", True)
        )
        timer.start()
        try:
            run("store-dies-anytime")
        except StoreUnavailableError:
            pass
        finally:
            timer.cancel()
            revive()
        assert run("after-outages").complete
        assert_exactly_once(landed_events(out), sent_events(old))
        # 6. The hub is deleted and re-created under its name: numbers restart at 0. Refused
        #    (nothing read, nothing lost), then reset on request: both hubs' events once.
        eventhub_emulator.delete_hub(hub.name)
        hub = eventhub_emulator.create_hub(hub.name, partitions=2)
        new: dict[str, list[bytes]] = {}
        send_tagged(hub, new, 40, "new", repeat=12)
        with pytest.raises(CheckpointAheadError):
            run("ahead")
        assert_exactly_once(landed_events(out), sent_events(old))
        assert run("reset", on_checkpoint_ahead="reset_to_earliest").complete
    assert_exactly_once(landed_events(out), sent_events(old) + sent_events(new))
