"""A sink that knows its source: two hubs or two consumer groups pointed at one sink path.

Batch keys are ``<partition>-<start>-<end>``: without the source in them, a second hub's batches
replaced the first hub's (20 of 40 events lost) and a second consumer group landed the same
events again (20 duplicates), both with exit 0. Real parts: the emulator through the real SDK,
Azurite, local Spark writing Parquet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.support.cli import run_in_process, sink_block, write_config
from tests.support.landed import (
    assert_exactly_once,
    landed_by_source,
    landed_events,
    send_tagged,
    sent_events,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


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
    send_tagged(hub_a, sent_a, 10, "a")
    send_tagged(hub_b, sent_b, 10, "b")
    cfg_a = write_config(tmp_path, hub_a, f"{container_name}-a", name="a")
    cfg_b = write_config(tmp_path, hub_b, f"{container_name}-b", name="b")
    env_a = {"EH_CONN": hub_a.connection_string, "ST_CONN": azurite_connection_string}
    env_b = {"EH_CONN": hub_b.connection_string, "ST_CONN": azurite_connection_string}
    assert run_in_process(spark, cfg_a, env_a, "a").complete
    with pytest.raises(ConfigurationError) as refused:
        run_in_process(spark, cfg_b, env_b, "b")
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
    send_tagged(hub, sent, 10, "x")
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    first = write_config(
        tmp_path, hub, f"{container_name}-1", name="first", max_events_per_partition=10
    )
    second = write_config(
        tmp_path,
        hub,
        f"{container_name}-2",
        name="second",
        eventhub={"consumer_group": "second"},
        max_events_per_partition=4,
    )
    assert run_in_process(spark, first, env, "first").complete
    with pytest.raises(ConfigurationError, match="consumer group") as refused:
        run_in_process(spark, second, env, "second")
    assert "$default" in str(refused.value).lower() and "second" in str(refused.value)
    assert (
        _store(azurite_connection_string, f"{container_name}-2", hub, "second").list_ownership()
        == {}
    )
    assert_exactly_once(landed_events(sink), sent_events(sent))


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
    send_tagged(hub_a, sent_a, 10, "a")
    send_tagged(hub_b, sent_b, 10, "b")
    block = sink_block(fmt, tmp_path)
    sink = SinkSettings(**block, sources="many")
    shared = {**block, "sources": "many"}
    runs = [
        (hub_a, "$Default", f"{container_name}-a", 10),
        (hub_b, "$Default", f"{container_name}-b", 10),
        (hub_b, "second", f"{container_name}-c", 3),  # smaller batches: other batch keys
    ]
    for i, (hub, group, container, most) in enumerate(runs):
        config = write_config(
            tmp_path,
            hub,
            container,
            name=f"c{i}",
            sink=shared,
            eventhub={"consumer_group": group},
            max_events_per_partition=most,
        )
        env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
        for attempt in range(4):  # the second group reads 3 events per partition a run
            report = run_in_process(spark, config, env, f"o{i}-{attempt}")
            if report.complete and report.partitions["0"].lag_events == 0:
                break
    landed = landed_by_source(spark, sink)
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

    lone = write_config(tmp_path, hub_a, f"{container_name}-d", name="lone", sink=block)
    env = {"EH_CONN": hub_a.connection_string, "ST_CONN": azurite_connection_string}
    with pytest.raises(ConfigurationError, match="sources: many"):
        run_in_process(spark, lone, env, "lone")


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
    send_tagged(hub, sent, 12, "old")
    send_tagged(other, {}, 3, "other")
    block = sink_block(fmt, tmp_path)
    sink = SinkSettings(**block)
    # What an earlier version left: batch 0-0-7 written, no record.
    df = read_eventhubs(spark, ReadOptions(hub.settings(), (PartitionRange("0", 0, 7),)))
    write_batch(df, sink, {"0": (0, 7)})
    place = sink_place(sink, lambda: spark)
    assert place.read_record() is None and place.holds_data()

    def config(name: str, which: Any, container: str) -> Path:
        return write_config(tmp_path, which, container, name=name, sink=block)

    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    # Its own source's store lost nothing but never saw this sink: the sink holds 0..7.
    report = run_in_process(spark, config("own", hub, f"{container_name}-a"), env, "own")
    assert report.complete and report.events == 4  # 8..11 only: 0..7 were there
    record = place.read_record()
    assert record is not None and record["ehingest.source.eventhub"] == hub.name.lower()
    env = {"EH_CONN": other.connection_string, "ST_CONN": azurite_connection_string}
    with pytest.raises(ConfigurationError, match="holds the events of"):
        run_in_process(spark, config("other", other, f"{container_name}-b"), env, "other")
    from dagster_eventhub_ingest.ops.sinks.read import read_sink

    rows = read_sink(spark, sink).select("sequenceNumber").collect()
    assert sorted(r[0] for r in rows) == list(range(12))
