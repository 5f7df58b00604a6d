"""The ingestion run end to end: emulator (real SDK), Azurite store, local Spark, real sink."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ops.run import IngestConfig, ReplaySpec, run_ingestion
from ops.write import read_sink
from resources.errors import DataLossError, EventHubUnavailableError, RangeError, SinkError
from resources.settings import EventHubSettings, SinkSettings, StoreSettings
from resources.store import PartitionStore

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def sink_rows(spark, sink: SinkSettings) -> list[tuple[str, int, str]]:
    """(partition, sequence number, sha256 of body) of every row in the sink, sorted."""
    rows = read_sink(spark, sink).select("partition", "sequenceNumber", "body").collect()
    return sorted((r[0], r[1], hashlib.sha256(r[2]).hexdigest()) for r in rows)


def sent_rows(sent: dict[str, list[bytes]]) -> list[tuple[str, int, str]]:
    return sorted(
        (pid, seq, hashlib.sha256(body).hexdigest())
        for pid, bodies in sent.items()
        for seq, body in enumerate(bodies)
    )


class Hub:
    """A fresh emulated hub plus what was sent to it."""

    def __init__(self, hub) -> None:
        self.hub = hub
        self.sent: dict[str, list[bytes]] = {p: [] for p in hub.partition_ids}

    def send(self, n: int, partitions=None) -> None:
        for pid in partitions or self.hub.partition_ids:
            start = len(self.sent[pid])
            bodies = [f"p{pid}-e{start + i}-".encode() * 3 for i in range(n)]
            self.hub.send(pid, bodies)
            self.sent[pid].extend(bodies)


@pytest.fixture
def hub(make_eventhub) -> Hub:
    return Hub(make_eventhub(partitions=3))


@pytest.fixture
def make_config(hub: Hub, blob_store_settings: StoreSettings, tmp_path: Path) -> Callable[..., IngestConfig]:
    def make(**kw) -> IngestConfig:
        base = dict(
            eventhub=hub.hub.settings(),
            store=blob_store_settings,
            sink=SinkSettings(format="parquet", path=str(tmp_path / "out")),
            lease_expiry_seconds=10.0,
            receive_timeout_seconds=10.0,
        )
        base.update(kw)
        return IngestConfig(**base)  # type: ignore[arg-type]

    return make


def store_of(cfg: IngestConfig) -> PartitionStore:
    return PartitionStore(cfg.store.backend(), cfg.eventhub.hub_ref())


def test_one_run_lands_every_partition_once(spark, hub: Hub, make_config) -> None:
    hub.send(40)
    cfg = make_config()
    report = run_ingestion(cfg, spark, owner_id="run-1")
    assert report.complete and report.events == 120
    assert sink_rows(spark, cfg.sink) == sent_rows(hub.sent)
    r = report.partitions["1"]
    assert (r.first_sequence_number, r.last_sequence_number, r.checkpoint_sequence_number) == (0, 39, 39)
    assert r.bytes == sum(len(b) for b in hub.sent["1"])
    assert r.first_enqueued_time is not None and r.last_enqueued_time >= r.first_enqueued_time
    assert (r.lag_events, r.lag_seconds, r.read_by) == (0, 0.0, ["run-1"])
    cps = store_of(cfg).list_sdk_checkpoints()  # what an EventProcessorClient would resume from
    assert {p: c.sequence_number for p, c in cps.items()} == {"0": 39, "1": 39, "2": 39}
    assert all(c.offset for c in cps.values())
