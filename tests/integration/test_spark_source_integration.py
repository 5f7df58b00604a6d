"""The eventhubs Spark source against the project's emulator, through the real SDK and Spark."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from dagster_eventhub_ingest.resources.errors import (
    DataLossError,
    EventHubUnavailableError,
    RangeError,
)
from dagster_eventhub_ingest.resources.eventhubs_source import (
    EVENT_COLUMNS,
    DataGap,
    PartitionRange,
    ReadOptions,
    eventhubs_schema,
    plan_read,
    read_eventhubs,
    read_range,
)
from tests.support.fixtures.emulator import expired_hub

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration]

MakeHub = Callable[..., Any]


def seqs(df: DataFrame) -> list[tuple[str, int]]:
    """(partition, sequenceNumber) of every row, sorted; duplicates stay visible."""
    return sorted(
        (r.partition, r.sequenceNumber) for r in df.select("partition", "sequenceNumber").collect()
    )


def spark_read(spark: SparkSession, hub: Any, **options: str) -> DataFrame:
    reader = (
        spark.read.format("eventhubs")
        .option("connection_string", hub.connection_string)
        .option("eventhub_name", hub.name)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def raw_events(hub: Any, partition: str, count: int) -> list[dict[str, Any]]:
    """The events as the SDK sees them (reference for offsets and times)."""
    settings = hub.settings()
    batches = list(read_range(settings, PartitionRange(partition, 0, count - 1)))
    return [row for b in batches for row in b.to_pylist()]


def test_explicit_ranges_read_exactly_those_events(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [f"p0-{i}".encode() for i in range(30)], properties={"source": "test", "n": 1})
    hub.send("1", [f"p1-{i}".encode() for i in range(10)], partition_key=None)
    df = spark_read(spark, hub, ranges='{"0": [10, 19], "1": [0, 4]}')
    assert df.schema == eventhubs_schema()
    assert tuple(df.columns) == EVENT_COLUMNS
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.sequenceNumber))
    assert [(r.partition, r.sequenceNumber) for r in rows] == [("0", n) for n in range(10, 20)] + [
        ("1", n) for n in range(5)
    ]
    first = rows[0]
    assert first.body == b"p0-10"
    assert first.properties == {"source": "test", "n": "1"}
    assert first.offset is not None and first.enqueuedTime is not None
    # Offsets grow with sequence numbers within a partition.
    offsets = [int(r.offset) for r in rows if r.partition == "0"]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10


def test_positions_of_every_form(spark: SparkSession, make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1)
    for batch in range(3):  # three sends, apart in time, for distinct enqueued times
        hub.send("0", [f"b{batch}-{i}".encode() for i in range(10)])
        time.sleep(0.05)
    ref = raw_events(hub, "0", 30)
    assert [r["sequenceNumber"] for r in ref] == list(range(30))
    t10, t20 = ref[10]["enqueuedTime"], ref[20]["enqueuedTime"]
    assert ref[9]["enqueuedTime"] < t10 < t20

    def read(start: str, end: str) -> list[int]:
        df = spark_read(spark, hub, starting_position=start, ending_position=end)
        return [s for _, s in seqs(df)]

    assert read("earliest", "latest") == list(range(30))
    assert read("seq:5", "14") == list(range(5, 15))
    assert read(f"offset:{ref[7]['offset']}", f"offset:{ref[12]['offset']}") == list(range(7, 13))
    # Enqueued time: start inclusive, end exclusive (consecutive windows never overlap).
    iso = lambda t: t.isoformat().replace("+00:00", "Z")  # noqa: E731
    assert read(f"enqueued:{iso(t10)}", f"enqueued:{iso(t20)}") == list(range(10, 20))
    assert read("latest", "latest") == []  # nothing new
    assert read("seq:30", "latest") == []  # starts where the partition ends: nothing new
    # Offsets that fall between events resolve to the neighbouring events.
    between = str(int(ref[7]["offset"]) + 1)
    last = ref[29]["offset"]
    assert read(f"offset:{between}", f"offset:{last}") == list(range(8, 30))
    # Past the end, or an end before the start: an error saying what to write, never a read
    # cut back to what exists (a job that stores the end it asked for would skip events).
    for start, end, said in [
        ("seq:25", "seq:1000", "ending_position=seq:1000 is past the end of partition 0"),
        ("seq:31", "latest", "starting_position=seq:31 is past the end of partition 0"),
        ("seq:3", f"offset:{10**12}", f"ending_position=offset:{10**12} is past the end"),
        ("seq:20", "seq:10", "ending_position=seq:10 is before starting_position=seq:20"),
    ]:
        with pytest.raises(Exception, match="RangeError") as err:
            read(start, end)
        assert said in str(err.value), str(err.value)[-600:]
    # The hint spells the option as the user did (Spark hands it over lower-cased).
    assert "end at most at seq:29 (inclusive), or use endingPosition=latest" in str(
        _range_error(spark, hub, starting_position="seq:25", endingPosition="seq:1000")
    )


def _range_error(spark: SparkSession, hub: Any, **options: str) -> BaseException:
    try:
        spark_read(spark, hub, **options).count()
    except Exception as exc:  # Spark wraps the source's RangeError, keeping its message
        return exc
    raise AssertionError(f"no error for {options}")


def test_connector_and_kafka_ranges_follow_their_own_rules(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    """An end past the last event, a start past the end, an end before the start: errors in
    the form's own words (the connector asserts "beginning sequence number ... is larger than
    the ending", Kafka "Beginning offset ... is after the ending offset"), never a silent empty
    or cut-back read; Kafka's 'latest' is no batch start; with offset and seqNo, seqNo wins."""
    hub = make_eventhub(partitions=2)
    hub.send("0", [b"a"] * 10)
    hub.send("1", [b"b"] * 10)

    def pos(**fields: Any) -> str:
        return json.dumps({"offset": None, "seqNo": -1, "enqueuedTime": None, **fields})

    cases: list[tuple[dict[str, str], str]] = [
        (
            {"eventhubs.startingPosition": pos(seqNo=0), "eventhubs.endingPosition": pos(seqNo=50)},
            "eventhubs.endingPosition: partition 0 ends at sequence_number 50 (exclusive), past "
            "its end",
        ),
        (
            {"eventhubs.startingPosition": pos(seqNo=12)},
            "the beginning sequence number 12 is larger than the ending sequence number 10",
        ),
        (
            {"eventhubs.startingPosition": pos(seqNo=6), "eventhubs.endingPosition": pos(seqNo=4)},
            "the beginning sequence number 6 is larger than the ending sequence number 4",
        ),
        (
            {"startingOffsets": "earliest", "endingOffsets": json.dumps({"0": 11, "1": -1})},
            "endingOffsets: partition 0 ends at sequence_number 11 (exclusive), past its end",
        ),
        (
            {
                "startingOffsets": json.dumps({"0": 7, "1": -2}),
                "endingOffsets": json.dumps({"0": 5, "1": -1}),
            },
            "beginning offset 7 is after the ending offset 5",
        ),
        ({"startingOffsets": "latest"}, "not a valid start for a batch read (as in Kafka)"),
    ]
    base = {"connection_string": hub.connection_string, "eventhub_name": hub.name}
    for options, said in cases:
        with pytest.raises(Exception, match="RangeError") as err:
            spark.read.format("eventhubs").options(**base, **options).load().count()
        assert said in str(err.value), (options, str(err.value)[-800:])
    # Not errors: an end at the last event + 1 (exclusive), a start at the end (nothing new).
    fine = spark.read.format("eventhubs").options(
        **base,
        startingOffsets=json.dumps({"0": 10, "1": 8}),
        endingOffsets=json.dumps({"0": 10, "1": 10}),
    )
    assert seqs(fine.load()) == [("1", 8), ("1", 9)]
    both = spark.read.format("eventhubs").options(
        **base,
        **{
            "eventhubs.startingPosition": pos(seqNo=8, offset="0"),  # seqNo wins: translate
            "eventhubs.endingPosition": pos(offset="@latest"),
        },
    )
    assert seqs(both.load()) == [("0", 8), ("0", 9), ("1", 8), ("1", 9)]


def test_errors_speak_the_users_dialect(spark: SparkSession, make_eventhub: MakeHub) -> None:
    """An unknown consumer group fails load() as a configuration error naming the option as
    written; a stream given an end says so, not PySpark's UnboundLocalError; a batch read with
    maxEventsPerTrigger is refused; a Kafka user's data-loss hint is failOnDataLoss=false."""
    hub = make_eventhub(partitions=1, retention_seconds=1)
    hub.send("0", [b"old"] * 3)
    base = {"connection_string": hub.connection_string, "eventhub_name": hub.name}
    started = time.monotonic()
    with pytest.raises(Exception) as err:
        spark.read.format("eventhubs").options(**base, **{"eventhubs.consumerGroup": "nope"}).load()
    assert "ConfigurationError" in str(err.value)
    assert "eventhubs.consumerGroup: 'nope' does not exist" in str(err.value)
    assert time.monotonic() - started < 12

    with pytest.raises(Exception) as err:
        spark.read.format("eventhubs").options(**base, maxEventsPerTrigger="5").load().count()
    assert "maxEventsPerTrigger: bounds a stream's micro-batches" in str(err.value)

    time.sleep(1.5)
    hub.send("0", [b"new"] * 2)  # retention moved past sequence numbers 0-2
    with pytest.raises(Exception) as err:
        spark.read.format("eventhubs").options(
            **base, startingOffsets=json.dumps({"0": 0}), endingOffsets="latest"
        ).load().count()
    assert "DataLossError" in str(err.value) and "set failOnDataLoss=false" in str(err.value)
    assert "on_data_loss" not in str(err.value)


def test_positions_on_selected_partitions(spark: SparkSession, make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=3)
    for pid in hub.partition_ids:
        hub.send(pid, [b"x"] * 5)
    df = spark_read(spark, hub, partition_ids="2,0", starting_position="seq:3")
    assert seqs(df) == [("0", 3), ("0", 4), ("2", 3), ("2", 4)]


def test_ranges_are_resolved_once_per_dataframe(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"a"] * 20)
    df = spark_read(spark, hub)  # earliest -> latest, resolved now
    assert df.count() == 20
    hub.send("0", [b"b"] * 10)
    # Every action on the same DataFrame reads the same bounded range.
    assert df.count() == 20
    assert spark_read(spark, hub).count() == 30


def test_sub_ranges_give_the_same_rows_once(spark: SparkSession, make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [f"{i}".encode() for i in range(1200)])
    hub.send("1", [f"{i}".encode() for i in range(300)])
    settings = hub.settings()
    one = plan_read(ReadOptions(settings=settings, max_readers_per_partition=1))
    three = plan_read(
        ReadOptions(settings=settings, max_readers_per_partition=3, min_events_per_reader=100)
    )
    assert len(one.input_partitions()) == 2
    assert [(p.range.start, p.range.end) for p in three.input_partitions()] == [
        (0, 399),
        (400, 799),
        (800, 1199),
        (0, 99),
        (100, 199),
        (200, 299),
    ]
    df1, df3 = read_eventhubs(spark, one), read_eventhubs(spark, three)
    assert df3.rdd.getNumPartitions() == 6
    rows1, rows3 = seqs(df1), seqs(df3)
    assert rows3 == rows1 and len(set(rows3)) == len(rows3) == 1500
    bodies = {
        (r.partition, r.sequenceNumber): r.body
        for r in df3.select("partition", "sequenceNumber", "body").collect()
    }
    assert bodies[("0", 799)] == b"799" and bodies[("0", 800)] == b"800"


def test_unknown_partition_is_a_range_error_naming_valid_ids(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [b"x"])
    options = ReadOptions.from_options(
        {
            "connection_string": hub.connection_string,
            "eventhub_name": hub.name,
            "ranges": '{"7": [0, 0]}',
        }
    )
    with pytest.raises(RangeError) as err:
        plan_read(options)
    assert "unknown partition '7'" in str(err.value) and "valid partition ids: 0, 1" in str(
        err.value
    )
    # Through spark.read the same message reaches the user (wrapped by Spark).
    with pytest.raises(Exception) as spark_err:
        spark_read(spark, hub, ranges='{"7": [0, 0]}')
    assert "unknown partition '7'" in str(spark_err.value)
    assert "SharedAccessKey=" not in str(spark_err.value).replace("SharedAccessKey=***", "")


def test_range_past_last_enqueued_is_refused(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 5)
    options = ReadOptions(settings=hub.settings(), ranges=(PartitionRange("0", 0, 9),))
    with pytest.raises(
        RangeError, match=r"partition 0 \[0, 9\]: ends after the last enqueued sequence number 4"
    ):
        plan_read(options)


def test_bad_option_through_spark_names_option_and_value(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    hub = make_eventhub(partitions=1)
    with pytest.raises(Exception) as err:
        spark_read(spark, hub, max_readers_per_partition="9")
    assert "max_readers_per_partition: 9 must be an integer 1..5" in str(err.value)


def test_retention_loss_fails_naming_partition_and_range(
    spark: SparkSession, make_eventhub: MakeHub, eventhub_emulator: Any
) -> None:
    hub = expired_hub(make_eventhub, eventhub_emulator)
    options = ReadOptions(settings=hub.settings(), ranges=(PartitionRange("0", 0, 19),))
    with pytest.raises(DataLossError) as err:
        plan_read(options)
    assert "sequence numbers [0, 9] of partition 0 [0, 19] are no longer available" in str(
        err.value
    )
    assert "first retained sequence number is 10" in str(err.value)
    with pytest.raises(Exception, match=r"DataLossError"):
        spark_read(spark, hub, ranges='{"0": [0, 19]}')


def test_retention_loss_skipped_is_reported(
    spark: SparkSession, make_eventhub: MakeHub, eventhub_emulator: Any
) -> None:
    hub = expired_hub(make_eventhub, eventhub_emulator)
    options = ReadOptions(
        settings=hub.settings(), ranges=(PartitionRange("0", 0, 19),), on_data_loss="skip"
    )
    plan = plan_read(options)
    assert plan.ranges == (PartitionRange("0", 10, 19),)
    assert plan.intent_ranges() == {"0": (0, 19)} and plan.ranges_dict() == {"0": (10, 19)}
    assert [(g.partition_id, g.start, g.end) for g in plan.gaps] == [("0", 0, 9)]
    assert isinstance(plan.gaps[0], DataGap) and "retention" in plan.gaps[0].reason
    assert seqs(read_eventhubs(spark, plan)) == [("0", n) for n in range(10, 20)]
    df = spark_read(spark, hub, ranges='{"0": [0, 19]}', on_data_loss="skip")
    first = df.orderBy("sequenceNumber").select("body").first()
    assert first is not None and first.body == b"new-0"


def test_executor_detects_loss_after_planning(
    make_eventhub: MakeHub, eventhub_emulator: Any
) -> None:
    # What a task does when events expire between planning and reading: the receive starts
    # at the first retained event, so the hole is seen on the executor.
    hub = expired_hub(make_eventhub, eventhub_emulator)
    settings = hub.settings()
    with pytest.raises(DataLossError) as err:
        list(read_range(settings, PartitionRange("0", 0, 19), receive_timeout=5))
    assert "sequence numbers [0, 9] of partition 0 [0, 19] are missing" in str(err.value)
    rows = [
        r
        for b in read_range(settings, PartitionRange("0", 0, 19), on_data_loss="skip")
        for r in b.to_pylist()
    ]
    assert [r["sequenceNumber"] for r in rows] == list(range(10, 20))
    # A range that expired entirely is a loss too, not an empty success.
    with pytest.raises(DataLossError, match=r"\[0, 9\]"):
        list(read_range(settings, PartitionRange("0", 0, 9), receive_timeout=5))


def test_silence_is_a_timeout_error_naming_partition_and_range(make_eventhub: MakeHub) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 3)
    started = time.monotonic()
    # 3 s, not 1: on a loaded 2-core CI machine the first receive (link attach) took over 1 s, and
    # the error then named sequence number 2, before the reader had received anything.
    with pytest.raises(EventHubUnavailableError) as err:
        list(read_range(hub.settings(), PartitionRange("0", 2, 5), receive_timeout=3.0))
    assert time.monotonic() - started < 20
    msg = str(err.value)
    assert "partition 0 [2, 5]" in msg and "no event received for 3s" in msg
    assert "waiting for sequence number 3" in msg


@pytest.mark.parametrize("receive", ["pull", "sdk"])
def test_every_field_of_an_event_reaches_its_column(
    make_eventhub: MakeHub, receive: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Body, partition key, application properties, AMQP message properties and annotations
    without a column of their own, the same through the fast pull (raw messages from the SDK's
    consumer) and the SDK's public receive (EventData); no Spark: the Arrow batch itself."""
    from azure.eventhub import EventData

    monkeypatch.setenv("EHINGEST_SDK_RECEIVE", "1" if receive == "sdk" else "0")

    hub = make_eventhub(partitions=1)
    producer = hub.producer()
    try:
        batch = producer.create_batch(partition_key="device-7")
        plain = EventData(b"plain")
        rich = EventData(b"rich")
        rich.properties = {"source": "test", "n": 1}
        rich.raw_amqp_message.properties.message_id = "m-1"  # type: ignore[union-attr]
        rich.raw_amqp_message.properties.content_type = "application/json"  # type: ignore[union-attr]
        rich.raw_amqp_message.annotations[b"x-opt-custom"] = "extra"  # type: ignore[index]
        batch.add(plain)
        batch.add(rich)
        producer.send_batch(batch)
    finally:
        producer.close()
    (events,) = [list(b.to_pylist()) for b in read_range(hub.settings(), PartitionRange("0", 0, 1))]
    first, second = events
    assert (first["body"], second["body"]) == (b"plain", b"rich")
    assert first["partitionKey"] == second["partitionKey"] == "device-7"
    assert first["partition"] == "0" and (first["sequenceNumber"], second["sequenceNumber"]) == (
        0,
        1,
    )
    assert first["offset"] is not None and int(second["offset"]) > int(first["offset"])
    assert first["enqueuedTime"] is not None and first["properties"] == []
    assert dict(second["properties"]) == {"source": "test", "n": "1"}
    sysprops = dict(second["systemProperties"])
    assert sysprops["message-id"] == "m-1" and sysprops["content-type"] == "application/json"
    assert sysprops["x-opt-custom"] == "extra"
    assert "x-opt-sequence-number" not in sysprops  # it has its own column
