"""A sink that knows its source: two hubs or two consumer groups pointed at one sink path.

Batch keys are ``<partition>-<start>-<end>``: without the source in them, a second hub's batches
replaced the first hub's (20 of 40 events lost) and a second consumer group landed the same
events again (20 duplicates), both with exit 0. Real parts: the emulator through the real SDK,
Azurite, local Spark writing Parquet.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.integration.test_edge_states_integration import send
from tests.support.landed import assert_exactly_once, landed_events, sent_events

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _config(
    tmp_path: Path, name: str, hub: Any, container: str, sink_path: Path, **extra: Any
) -> Path:
    sink_block = {"format": "parquet", "path": str(sink_path), **extra.pop("sink", {})}
    if "table" in sink_block:
        sink_block.pop("path")
    config = {
        "eventhub": {
            "connection_string": "${EH_CONN}",
            "eventhub_name": hub.name,
            **extra.pop("eventhub", {}),
        },
        "store": {"connection_string": "${ST_CONN}", "container": container},
        "sink": sink_block,
        "lease_expiry_seconds": 15,
        "join_grace_seconds": 0,
        "report_lag_seconds": False,
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(spark, config: Path, env: dict[str, str], owner: str):
    from dagster_eventhub_ingest.cli.config import load_config
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion

    return run_ingestion(
        load_config(config, env={**os.environ, **env}).ingest, spark, owner_id=owner
    )


def _store(conn: str, container: str, hub: Any, consumer_group: str = "$Default"):
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    settings = StoreSettings(container=container, connection_string=conn)
    return PartitionStore(
        AzureBlobBackend.from_settings(settings), hub.settings(consumer_group).hub_ref()
    )


def test_a_second_hub_is_refused_before_any_claim_and_the_first_hubs_events_stay(
    spark, make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.resources.errors import ConfigurationError

    hub_a, hub_b = make_eventhub(partitions=2), make_eventhub(partitions=2)
    sink = tmp_path / "out"
    sent_a: dict[str, list[bytes]] = {}
    sent_b: dict[str, list[bytes]] = {}
    send(hub_a, sent_a, 10, "a")
    send(hub_b, sent_b, 10, "b")
    cfg_a = _config(tmp_path, "a", hub_a, f"{container_name}-a", sink)
    cfg_b = _config(tmp_path, "b", hub_b, f"{container_name}-b", sink)
    env_a = {"EH_CONN": hub_a.connection_string, "ST_CONN": azurite_connection_string}
    env_b = {"EH_CONN": hub_b.connection_string, "ST_CONN": azurite_connection_string}
    assert _run(spark, cfg_a, env_a, "a").complete
    with pytest.raises(ConfigurationError) as refused:
        _run(spark, cfg_b, env_b, "b")
    message = str(refused.value)
    assert hub_a.name in message and hub_b.name in message, message
    assert "sources: many" in message and "SharedAccessKey" not in message
    assert not refused.value.retryable
    # Nothing claimed, no intent written for hub B; hub A's 20 events all there, once.
    assert _store(azurite_connection_string, f"{container_name}-b", hub_b).list_ownership() == {}
    assert_exactly_once(landed_events(sink), sent_events(sent_a))


def test_a_second_consumer_group_is_refused_before_any_claim(
    spark, make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.resources.errors import ConfigurationError

    hub = make_eventhub(partitions=2, consumer_groups=("second",))
    sink = tmp_path / "out"
    sent: dict[str, list[bytes]] = {}
    send(hub, sent, 10, "x")
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    first = _config(
        tmp_path, "first", hub, f"{container_name}-1", sink, max_events_per_partition=10
    )
    second = _config(
        tmp_path,
        "second",
        hub,
        f"{container_name}-2",
        sink,
        eventhub={"consumer_group": "second"},
        max_events_per_partition=4,
    )
    assert _run(spark, first, env, "first").complete
    with pytest.raises(ConfigurationError, match="consumer group") as refused:
        _run(spark, second, env, "second")
    assert "$default" in str(refused.value).lower() and "second" in str(refused.value)
    assert (
        _store(azurite_connection_string, f"{container_name}-2", hub, "second").list_ownership()
        == {}
    )
    assert_exactly_once(landed_events(sink), sent_events(sent))


def _sink_block(fmt: str, tmp_path: Path) -> dict[str, Any]:
    """The ``sink:`` block of a config for ``fmt`` (``table``: a new parquet catalog table)."""
    if fmt == "table":
        return {"format": "parquet", "table": f"t_{uuid.uuid4().hex[:12]}"}
    return {"format": fmt, "path": str(tmp_path / "out")}


def _landed_by_source(spark, sink) -> dict[str, Any]:
    """(partition, sequence number, sha256(body)) counts per ``eh_source``, read by Spark."""
    import collections
    import hashlib

    from dagster_eventhub_ingest.ops.sinks.read import read_sink

    rows = read_sink(spark, sink).select("eh_source", "partition", "sequenceNumber", "body")
    found: dict[str, collections.Counter] = {}
    for source, pid, seq, body in rows.collect():
        found.setdefault(source, collections.Counter())[
            (str(pid), int(seq), hashlib.sha256(bytes(body)).hexdigest())
        ] += 1
    return found


@pytest.mark.parametrize("fmt", ["parquet", "deltalake", "table"])
def test_several_sources_share_a_sink_only_when_told_and_each_lands_once(
    spark,
    make_eventhub,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
    fmt: str,
) -> None:
    """Two hubs and a second consumer group of one of them, all into one sink with
    ``sources: many``: every source's events once, under batch keys and a column naming it."""
    from dagster_eventhub_ingest.ops.sinks.read import read_sink
    from dagster_eventhub_ingest.ops.sinks.source import SinkSource
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    hub_a = make_eventhub(partitions=2)
    hub_b = make_eventhub(partitions=2, consumer_groups=("second",))
    sent_a: dict[str, list[bytes]] = {}
    sent_b: dict[str, list[bytes]] = {}
    send(hub_a, sent_a, 10, "a")
    send(hub_b, sent_b, 10, "b")
    block = _sink_block(fmt, tmp_path)
    sink = SinkSettings(**block, sources="many")
    shared = {**block, "sources": "many"}
    runs = [
        (hub_a, "$Default", f"{container_name}-a", 10),
        (hub_b, "$Default", f"{container_name}-b", 10),
        (hub_b, "second", f"{container_name}-c", 3),  # smaller batches: other batch keys
    ]
    for i, (hub, group, container, most) in enumerate(runs):
        config = _config(
            tmp_path,
            f"c{i}",
            hub,
            container,
            tmp_path / "unused",
            sink=shared,
            eventhub={"consumer_group": group},
            max_events_per_partition=most,
        )
        env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
        for attempt in range(4):  # the second group reads 3 events per partition a run
            report = _run(spark, config, env, f"o{i}-{attempt}")
            if report.complete and report.partitions["0"].lag_events == 0:
                break
    landed = _landed_by_source(spark, sink)
    name = {
        key: SinkSource.of(hub.settings(group).hub_ref()).name
        for hub, group, _, _ in runs
        for key in [(hub.name, group)]
    }
    assert set(landed) == set(name.values())
    assert_exactly_once(landed[name[(hub_a.name, "$Default")]], sent_events(sent_a))
    assert_exactly_once(landed[name[(hub_b.name, "$Default")]], sent_events(sent_b))
    assert_exactly_once(landed[name[(hub_b.name, "second")]], sent_events(sent_b))
    keys = {r[0] for r in read_sink(spark, sink).select("eh_batch").distinct().collect()}
    tags = {SinkSource.of(hub.settings(group).hub_ref()).tag for hub, group, _, _ in runs}
    assert {k.rsplit("-s", 1)[1] for k in keys} == tags  # every key names its source

    # A run that does not say sources: many is refused, naming the setting.
    from dagster_eventhub_ingest.resources.errors import ConfigurationError

    lone = _config(tmp_path, "lone", hub_a, f"{container_name}-d", tmp_path / "out", sink=block)
    env = {"EH_CONN": hub_a.connection_string, "ST_CONN": azurite_connection_string}
    with pytest.raises(ConfigurationError, match="sources: many"):
        _run(spark, lone, env, "lone")


@pytest.mark.parametrize("fmt", ["parquet", "deltalake", "table"])
def test_a_sink_written_before_records_is_adopted_then_another_source_refused(
    spark,
    make_eventhub,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
    fmt: str,
) -> None:
    """A sink an earlier version wrote has no record: the first run adopts it (nothing
    refused, nothing lost); from then on it is that source's."""
    from dagster_eventhub_ingest.ops.sinks.place import sink_place
    from dagster_eventhub_ingest.ops.sinks.write import write_batch
    from dagster_eventhub_ingest.resources.errors import ConfigurationError
    from dagster_eventhub_ingest.resources.eventhubs_source import (
        PartitionRange,
        ReadOptions,
        read_eventhubs,
    )
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    hub, other = make_eventhub(partitions=1), make_eventhub(partitions=1)
    sent: dict[str, list[bytes]] = {}
    send(hub, sent, 12, "old")
    send(other, {}, 3, "other")
    block = _sink_block(fmt, tmp_path)
    sink = SinkSettings(**block)
    # What an earlier version left: batch 0-0-7 written, no record.
    df = read_eventhubs(spark, ReadOptions(hub.settings(), (PartitionRange("0", 0, 7),)))
    write_batch(df, sink, {"0": (0, 7)})
    place = sink_place(sink, lambda: spark)
    assert place.read_record() is None and place.holds_data()

    def config(name: str, which: Any, container: str) -> Path:
        return _config(tmp_path, name, which, container, tmp_path / "out", sink=block)

    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    # Its own source's store lost nothing but never saw this sink: the sink holds 0..7.
    report = _run(spark, config("own", hub, f"{container_name}-a"), env, "own")
    assert report.complete and report.events == 4  # 8..11 only: 0..7 were there
    record = place.read_record()
    assert record is not None and record["ehingest.source.eventhub"] == hub.name.lower()
    env = {"EH_CONN": other.connection_string, "ST_CONN": azurite_connection_string}
    with pytest.raises(ConfigurationError, match="holds the events of"):
        _run(spark, config("other", other, f"{container_name}-b"), env, "other")
    from dagster_eventhub_ingest.ops.sinks.read import read_sink

    rows = read_sink(spark, sink).select("sequenceNumber").collect()
    assert sorted(r[0] for r in rows) == list(range(12))
