"""The golden corpus through the emulator: both reader paths, Spark batch and stream, every sink.

The corpus (tests/support/amqp_corpus.py) goes to one partition as clients send it: the Python SDK's
producer for what the SDK can send (value and sequence bodies, maps with binary keys, typed
application properties, message properties, IoT Hub's annotations), the emulator's enqueue for
what only other clients send (chars, decimal32/64, described values, arrays). Every path reads
each event field by field as the golden row says, and no event stops a read.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range
from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader
from tests.support.amqp_corpus import CORPUS, Golden
from tests.support.cli import CLI, write_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SERVICE_COLUMNS = ("partition", "offset", "sequenceNumber", "enqueuedTime")


def send_corpus(emulator: Any, hub: Any) -> None:
    """Every golden to partition 0, in corpus order (sequence number = index)."""
    producer = hub.producer()
    try:
        for golden in CORPUS:
            if golden.sdk is not None:
                producer.send_batch([golden.sdk()], partition_id="0")
            else:
                assert golden.raw is not None
                emulator.enqueue(hub.name, "0", [golden.raw])
    finally:
        producer.close()


@pytest.fixture(scope="module")
def corpus_hub(eventhub_emulator: Any) -> Any:
    hub = eventhub_emulator.create_hub(partitions=2)
    send_corpus(eventhub_emulator, hub)
    return hub


def _as_pairs(value: Any) -> list[tuple[str, str]]:
    """A map column as (key, value) pairs: Arrow gives pairs, Spark a dict (order lost)."""
    if isinstance(value, dict):
        return sorted(value.items())
    return sorted(value or [])


def assert_golden(rows: list[dict[str, Any]], *, maps_as_dicts: bool = False) -> None:
    """Each row is its golden event's, field by field; service columns as the service sets them."""
    rows = sorted(rows, key=lambda r: r["sequenceNumber"])
    assert [r["sequenceNumber"] for r in rows] == list(range(len(CORPUS)))
    for golden, row in zip(CORPUS, rows, strict=True):
        want = golden.row()
        for key, value in want.items():
            got = row[key]
            if key in ("properties", "systemProperties"):
                if maps_as_dicts:
                    assert _as_pairs(got) == sorted(dict(value).items()), (golden.name, key)
                else:
                    assert got == value, (golden.name, key)
            else:
                assert got == value, (golden.name, key)
        assert row["partition"] == "0" and row["enqueuedTime"] is not None, golden.name
        assert row["offset"] is not None and row["offset"].isdigit(), golden.name


def _read(monkeypatch: pytest.MonkeyPatch, mode: str, hub: Any) -> list[dict[str, Any]]:
    monkeypatch.setenv(loader.NATIVE_ENV, mode)
    loader.reset_for_tests()
    try:
        rng = PartitionRange("0", 0, len(CORPUS) - 1)
        return [r for b in read_range(hub.settings(), rng) for r in b.to_pylist()]
    finally:
        loader.reset_for_tests()


@pytest.mark.parametrize("mode", ["0", "1"], ids=["python", "native"])
def test_read_range_gives_the_golden_rows(
    corpus_hub: Any, monkeypatch: pytest.MonkeyPatch, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Both reader paths; the events whose body is not data are logged with their sequence
    numbers."""
    with caplog.at_level(
        "WARNING", logger="dagster_eventhub_ingest.resources.eventhubs_source.read"
    ):
        rows = _read(monkeypatch, mode, corpus_hub)
    assert_golden(rows)
    unusual = [i for i, g in enumerate(CORPUS) if g.amqp_body is not None]
    assert unusual
    for seq in unusual:
        assert f"sequence number {seq}: its body is an amqp-value or amqp-sequence" in caplog.text


def _with_many(emulator: Any, make_eventhub: Callable[..., Any], count: int) -> Any:
    hub = make_eventhub(partitions=1)
    value_body = next(g for g in CORPUS if g.name == "a map body with binary keys")
    producer = hub.producer()
    try:
        batch = producer.create_batch(partition_id="0")
        for _ in range(count):
            batch.add(value_body.sdk())  # type: ignore[misc]
        producer.send_batch(batch)
    finally:
        producer.close()
    return hub


def test_many_unusual_events_are_logged_then_counted(
    eventhub_emulator: Any, make_eventhub: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    hub = _with_many(eventhub_emulator, make_eventhub, 25)
    with caplog.at_level(
        "WARNING", logger="dagster_eventhub_ingest.resources.eventhubs_source.read"
    ):
        rows = [
            r for b in read_range(hub.settings(), PartitionRange("0", 0, 24)) for r in b.to_pylist()
        ]
    assert len(rows) == 25 and all(r["body"] is None and r["amqpBody"] for r in rows)
    singles = [r for r in caplog.records if "its body is an amqp-value" in r.getMessage()]
    assert len(singles) == 10
    assert (
        "15 more events with their body or their whole message in amqpBody, sequence "
        "numbers 10 to 24" in caplog.text
    )


@pytest.mark.spark
def test_the_spark_source_and_a_stream_read_the_golden_rows(
    spark: SparkSession, corpus_hub: Any, tmp_path: Path
) -> None:
    """spark.read (batch) and spark.readStream with Trigger.AvailableNow and
    failOnDataLoss=false: the value-body events neither stop nor change the read."""
    df = (
        spark.read.format("eventhubs")
        .option("connection_string", corpus_hub.connection_string)
        .option("eventhub_name", corpus_hub.name)
        .option("ranges", f'{{"0": [0, {len(CORPUS) - 1}]}}')
        .load()
    )
    assert_golden([r.asDict() for r in df.collect()], maps_as_dicts=True)
    assert df.filter("properties['true'] = 'true'").count() == 1

    from tests.support.streams import run_available_now

    out = tmp_path / "stream"
    run_available_now(
        spark, corpus_hub, out, tmp_path / "chk", startingOffsets="earliest", failOnDataLoss="false"
    )
    landed = spark.read.parquet(str(out)).filter("partition = '0'")
    assert_golden([r.asDict() for r in landed.collect()], maps_as_dicts=True)


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["deltalake", "table"])
def test_the_write_path_lands_the_golden_rows(
    spark: SparkSession, corpus_hub: Any, tmp_path: Path, kind: str
) -> None:
    """What the ingestion run writes (ops.sinks.write.write_batch of the source's DataFrame) reads
    back field by field as the golden rows, in a Delta table (delta-rs) and a Spark table."""
    import uuid

    from dagster_eventhub_ingest.ops.sinks.read import read_sink
    from dagster_eventhub_ingest.ops.sinks.write import write_batch
    from dagster_eventhub_ingest.resources.eventhubs_source import (
        ReadOptions,
        plan_read,
        read_eventhubs,
    )
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    plan = plan_read(
        ReadOptions(
            settings=corpus_hub.settings(),
            ranges=(PartitionRange("0", 0, len(CORPUS) - 1),),
        )
    )
    if kind == "table":
        sink = SinkSettings(table=f"golden_{uuid.uuid4().hex[:10]}")
    else:
        sink = SinkSettings(format="deltalake", path=str(tmp_path / "delta"))
    result = write_batch(read_eventhubs(spark, plan), sink, plan.intent_ranges())
    assert result.partitions["0"].events == len(CORPUS)
    assert result.partitions["0"].bytes == sum(len(g.body or b"") for g in CORPUS)
    rows = [r.asDict() for r in read_sink(spark, sink).collect()]
    assert_golden(rows, maps_as_dicts=True)


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_ehingest_run_lands_the_golden_rows_in_parquet(
    corpus_hub: Any, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """``ehingest run`` as a user runs it (a subprocess): the whole corpus lands, the run
    completes, the Parquet files hold the golden rows (read with pyarrow: maps as pairs)."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    path = write_config(
        tmp_path,
        corpus_hub,
        container_name,
        name="ehingest",
        lease_expiry_seconds=None,
        join_grace_seconds=None,
        report_lag_seconds=None,
        spark={"master": "local[1]"},
    )
    env = {
        **os.environ,
        "EH_CONN": corpus_hub.connection_string,
        "ST_CONN": azurite_connection_string,
    }
    done = subprocess.run(
        [*CLI, "run", "--config", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = pq.read_table(out)
    rows = table.to_pylist()
    for row in rows:
        row["partition"] = str(row["partition"])
    assert_golden(rows)


def test_golden_names_are_unique() -> None:
    names = [g.name for g in CORPUS]
    assert len(names) == len(set(names))
    assert all(isinstance(g, Golden) for g in CORPUS)


def test_a_position_at_any_event_resolves(corpus_hub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offsets are resolved by receiving the event there, decoded as a read decodes it: an
    event pyamqp cannot decode (a char, a decimal32) does not fail the planning either."""
    import json

    from dagster_eventhub_ingest.resources.eventhubs_source import (
        EventPosition,
        ReadOptions,
        plan_read,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.compat.options import (
        parse_source_options,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.compat.resolve import plan_source_read

    target = next(i for i, g in enumerate(CORPUS) if g.name == "types only other clients send")
    offset = _read(monkeypatch, "0", corpus_hub)[target]["offset"]
    own = plan_read(
        ReadOptions(
            settings=corpus_hub.settings(),
            starting_position=EventPosition.parse(f"offset:{offset}", "starting_position"),
            ending_position=EventPosition.parse(f"offset:{offset}", "ending_position"),
            partition_ids=("0",),
        )
    )
    assert [(r.start, r.end) for r in own.ranges] == [(target, target)]
    connector = plan_source_read(
        parse_source_options(
            {
                "connection_string": corpus_hub.connection_string,
                "eventhub_name": corpus_hub.name,
                "eventhubs.startingPosition": json.dumps({"offset": offset, "seqNo": -1}),
                "eventhubs.endingPosition": json.dumps({"offset": "@latest", "seqNo": -1}),
            }
        )
    )
    assert [(r.partition_id, r.start) for r in connector.ranges] == [("0", target)]
