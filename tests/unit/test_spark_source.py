"""Pure logic of the eventhubs source: options, positions, ranges, splitting (no services)."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_eventhub_ingest.resources.errors import ConfigurationError, RangeError
from dagster_eventhub_ingest.resources.eventhubs_source import (
    EventPosition,
    PartitionRange,
    ReadOptions,
    ReadPlan,
    parse_ranges,
    split_range,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings

SECRET = "c2VjcmV0LWtleS12YWx1ZQ=="
CONN = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey={SECRET}"


NOON = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)


def opts(**extra: str) -> dict[str, str]:
    return {"connection_string": CONN, "eventhub_name": "telemetry", **extra}


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("earliest", "earliest", None),
        ("-1", "earliest", None),
        ("LATEST", "latest", None),
        ("42", "sequence_number", 42),
        ("seq:7", "sequence_number", 7),
        ("offset:1024", "offset", "1024"),
        ("enqueued:2024-05-01T12:00:00Z", "enqueued_time", NOON),
        (
            "enqueued:2024-05-01T14:00:00+02:00",
            "enqueued_time",
            datetime(2024, 5, 1, 12, tzinfo=timezone.utc),
        ),
        ("enqueued:2024-05-01T12:00:00", "enqueued_time", NOON),
        # The connector's docs' spelling: 4 fraction digits and Z (Python 3.10's
        # fromisoformat reads neither); digits past microseconds are cut.
        (
            "enqueued:2024-05-01T12:00:00.1234Z",
            "enqueued_time",
            datetime(2024, 5, 1, 12, 0, 0, 123400, tzinfo=timezone.utc),
        ),
        (
            "enqueued:2024-05-01T12:00:00.12345678z",
            "enqueued_time",
            datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc),
        ),
    ],
)
def test_positions_parse_every_form(text: str, kind: str, value: object) -> None:
    pos = EventPosition.parse(text, "starting_position")
    assert (pos.kind, pos.value) == (kind, value)
    # The string form round-trips (it is what travels in the Spark options).
    assert EventPosition.parse(str(pos), "x") == pos


@pytest.mark.parametrize("text", ["yesterday", "seq:-3", "seq:abc", "offset:", "enqueued:nope"])
def test_bad_position_names_option_value_and_valid_forms(text: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        EventPosition.parse(text, "ending_position")
    msg = str(err.value)
    assert "ending_position" in msg and repr(text) in msg and "'earliest'" in msg


def test_parse_ranges_inclusive_sorted() -> None:
    ranges = parse_ranges('{"10": [5, 5], "2": [0, 99]}')
    assert ranges == (PartitionRange("2", 0, 99), PartitionRange("10", 5, 5))
    assert ranges[0].count == 100 and ranges[1].count == 1
    assert parse_ranges("{}") == ()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[1, 2]", "JSON object"),
        ("{0: [1, 2]}", "is not JSON"),
        ('{"0": [1]}', "partition '0' has [1]"),
        ('{"0": ["a", 2]}', "two integers"),
        ('{"0": [true, 2]}', "two integers"),
    ],
)
def test_bad_ranges_json(text: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match="ranges") as err:
        parse_ranges(text)
    assert fragment in str(err.value)


def test_end_before_start_is_a_range_error_naming_partition() -> None:
    with pytest.raises(RangeError) as err:
        parse_ranges('{"3": [10, 9]}')
    assert "partition '3'" in str(err.value) and "end 9 is before start 10" in str(err.value)
    with pytest.raises(RangeError, match="negative"):
        PartitionRange("0", -1, 5)


@pytest.mark.parametrize(
    ("start", "end", "readers", "min_events", "expected"),
    [
        (0, 99, 1, 10, [(0, 99)]),
        (0, 99, 2, 10, [(0, 49), (50, 99)]),
        (0, 99, 3, 10, [(0, 33), (34, 67), (68, 99)]),
        (0, 99, 5, 40, [(0, 49), (50, 99)]),  # sub-ranges never below min_events
        (0, 9, 5, 40, [(0, 9)]),
        (7, 7, 5, 1, [(7, 7)]),
        (100, 104, 5, 1, [(100, 100), (101, 101), (102, 102), (103, 103), (104, 104)]),
    ],
)
def test_split_range(
    start: int, end: int, readers: int, min_events: int, expected: list[tuple[int, int]]
) -> None:
    subs = split_range(PartitionRange("0", start, end), readers, min_events)
    assert [(s.start, s.end) for s in subs] == expected
    # Contiguous, disjoint, covering: every sequence number exactly once.
    covered = [n for s in subs for n in range(s.start, s.end + 1)]
    assert covered == list(range(start, end + 1))


def test_options_validate_and_round_trip() -> None:
    parsed = ReadOptions.from_options(
        opts(
            ranges='{"0": [0, 9]}',
            receive_timeout="5",
            prefetch="50",
            max_readers_per_partition="3",
            on_data_loss="SKIP",
        )
    )
    assert parsed.ranges == (PartitionRange("0", 0, 9),)
    assert (parsed.receive_timeout, parsed.prefetch, parsed.max_readers_per_partition) == (5, 50, 3)
    assert parsed.on_data_loss == "skip"
    assert ReadOptions.from_options(parsed.to_options()) == parsed
    positions = ReadOptions.from_options(
        opts(starting_position="seq:5", ending_position="latest", partition_ids="1, 0")
    )
    assert positions.partition_ids == ("1", "0")
    assert ReadOptions.from_options(positions.to_options()) == positions


def test_option_aliases_and_prefix() -> None:
    parsed = ReadOptions.from_options(
        {
            "eventhubs.connectionString": CONN,
            "EventHubName": "telemetry",
            "consumerGroup": "cg1",
            "startingPosition": "earliest",
            "maxReadersPerPartition": "2",
        }
    )
    assert parsed.settings.consumer_group == "cg1"
    assert parsed.max_readers_per_partition == 2


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (
            {"max_readers_per_partition": "6"},
            "max_readers_per_partition: 6 must be an integer 1..5",
        ),
        ({"max_readers_per_partition": "0"}, "max_readers_per_partition: 0"),
        (
            {"max_readers_per_partition": "two"},
            "max_readers_per_partition: 'two' is not an integer",
        ),
        ({"receive_timeout": "0"}, "receive_timeout: 0.0 must be a number of seconds > 0"),
        ({"prefetch": "0"}, "prefetch: 0 must be an integer 1..10000"),
        ({"on_data_loss": "ignore"}, "on_data_loss: 'ignore' is not valid; valid: 'fail', 'skip'"),
        ({"startingPositon": "earliest"}, "unknown option 'startingPositon'"),
        ({"partition_ids": " , "}, "partition_ids: ' , ' names no partition"),
        (
            {"ranges": '{"0": [0, 1]}', "starting_position": "earliest"},
            "either ranges or starting_position/ending_position",
        ),
        ({"ranges": '{"0": [0, 1]}', "partition_ids": "0"}, "partition_ids: not allowed"),
        ({"known_bounds": '{"0": 5}'}, "known_bounds: '{\"0\": 5}' is not a JSON object"),
    ],
)
def test_bad_options_name_option_and_value(extra: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        ReadOptions.from_options(opts(**extra))
    assert fragment in str(err.value)


def test_missing_hub_and_credentials() -> None:
    with pytest.raises(ConfigurationError, match="eventhub_name: required"):
        ReadOptions.from_options({"connection_string": CONN})
    with pytest.raises(ConfigurationError, match="eventhub_name: required"):
        ReadOptions.from_options({"consumer_group": "$Default"})
    # A connection string copied from the hub's policy names the hub (EntityPath): enough.
    named = ReadOptions.from_options({"connection_string": CONN + ";EntityPath=telemetry"})
    assert named.settings.eventhub_name == "telemetry"
    with pytest.raises(ConfigurationError, match="connection_string: required"):
        ReadOptions.from_options({"eventhub_name": "h"})
    # Namespace alone implies an Entra ID credential.
    parsed = ReadOptions.from_options(
        {"eventhub_name": "h", "fully_qualified_namespace": "ns.servicebus.windows.net"}
    )
    assert parsed.settings.credential_type == "default_azure_credential"


def test_no_secret_in_errors_or_reprs() -> None:
    bad = CONN.replace("Endpoint=sb://ns.servicebus.windows.net/", "Endpoint=127.0.0.1")
    with pytest.raises(ConfigurationError) as err:
        ReadOptions.from_options({"connection_string": bad, "eventhub_name": "h"})
    assert SECRET not in str(err.value)
    parsed = ReadOptions.from_options(opts(ranges='{"0": [0, 9]}'))
    plan = ReadPlan(options=parsed, ranges=parsed.ranges or ())
    part = plan.input_partitions()[0]
    assert SECRET not in repr(parsed) and SECRET not in repr(plan) and SECRET not in repr(part)


def test_input_partitions_are_small_and_picklable() -> None:
    parsed = ReadOptions.from_options(
        opts(ranges='{"0": [0, 99999], "1": [0, 9]}', max_readers_per_partition="4")
    )
    plan = ReadPlan(options=parsed, ranges=parsed.ranges or ())
    parts = plan.input_partitions()
    assert [(p.range.partition_id, p.range.start, p.range.end) for p in parts] == [
        ("0", 0, 24999),
        ("0", 25000, 49999),
        ("0", 50000, 74999),
        ("0", 75000, 99999),
        ("1", 0, 9),
    ]
    clone = pickle.loads(pickle.dumps(parts[1]))
    assert clone.range == parts[1].range
    assert isinstance(clone.settings, EventHubSettings)
    assert len(pickle.dumps(parts[1])) < 2000  # settings + range only, never a client
    assert plan.ranges_dict() == {"0": (0, 99999), "1": (0, 9)}
    assert ReadOptions.from_options(plan.spark_options()).ranges == plan.ranges


def test_ranges_are_checked_against_known_bounds_without_asking_the_service() -> None:
    """The ingestion run passes its own look at the partitions (known_bounds): planning then
    makes no call (the hub here does not exist: any call would fail) and still refuses what
    the bounds rule out."""
    from dagster_eventhub_ingest.resources.errors import DataLossError
    from dagster_eventhub_ingest.resources.eventhubs_source import plan_read

    nowhere = EventHubSettings(
        eventhub_name="telemetry",
        connection_string="Endpoint=sb://127.0.0.1:9/;SharedAccessKeyName=r;SharedAccessKey=k",
    )
    known = (("0", 10, 99), ("1", 0, 49))
    ranges = (PartitionRange("0", 10, 59), PartitionRange("1", 0, 49))
    options = ReadOptions(settings=nowhere, ranges=ranges, known_bounds=known)
    assert ReadOptions.from_options(options.to_options()) == options
    assert plan_read(options).ranges == ranges
    with pytest.raises(RangeError, match="ends after the last enqueued sequence number 49"):
        plan_read(
            ReadOptions(settings=nowhere, ranges=(PartitionRange("1", 0, 50),), known_bounds=known)
        )
    expired = (PartitionRange("0", 5, 59),)
    with pytest.raises(DataLossError, match=r"\[5, 9\] of partition 0 \[5, 59\] are no longer"):
        plan_read(ReadOptions(settings=nowhere, ranges=expired, known_bounds=known))
    skipped = plan_read(
        ReadOptions(settings=nowhere, ranges=expired, known_bounds=known, on_data_loss="skip")
    )
    assert skipped.ranges == (PartitionRange("0", 10, 59),)
    assert skipped.intent_ranges() == {"0": (5, 59)}


_TEXTS = st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=8))
_COLUMN_KEYS = {
    b"x-opt-offset": st.one_of(_TEXTS, st.integers()),
    b"x-opt-enqueued-time": st.one_of(
        st.none(), st.integers(0, 2**42), st.datetimes(timezones=st.just(timezone.utc))
    ),
    b"x-opt-partition-key": _TEXTS,
    b"x-opt-publisher": _TEXTS,
    b"x-opt-sequence-number": st.integers(0, 2**40),
}


@st.composite
def raw_messages(draw: st.DrawFn) -> Any:
    """Messages as the SDK decodes them (pyamqp's): mostly the usual event, and the rest."""
    from azure.eventhub._pyamqp.message import Message, Properties

    annotations = None
    if draw(st.integers(0, 5)):
        keys = draw(st.sets(st.sampled_from(sorted(_COLUMN_KEYS))))
        annotations = {key: draw(_COLUMN_KEYS[key]) for key in sorted(keys)}
        if draw(st.integers(0, 4)) == 0:
            annotations[draw(st.sampled_from([b"x-opt-custom", b"other"]))] = draw(st.text())
    data = draw(
        st.one_of(
            st.lists(st.binary(max_size=20), min_size=1, max_size=1),
            st.lists(st.binary(max_size=20), max_size=3),
            st.none(),
        )
    )
    app = draw(st.one_of(st.none(), st.just({}), st.dictionaries(st.binary(max_size=4), st.text())))
    props = draw(
        st.one_of(
            st.none(),
            st.just(Properties()),
            st.builds(Properties, message_id=st.text(max_size=4), group_sequence=st.integers(0, 9)),
        )
    )
    return Message(
        message_annotations=annotations,
        application_properties=app,
        properties=props,
        data=data,
        value=None if data else draw(st.one_of(st.none(), st.text(max_size=10))),
    )


_TEXT = st.one_of(st.none(), st.text(max_size=6))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=20),
    st.lists(_TEXT, max_size=20),
    st.lists(st.one_of(st.none(), st.binary(max_size=6)), max_size=20),
    st.lists(st.lists(st.tuples(st.text(max_size=3), _TEXT), max_size=3), max_size=20),
)
def test_arrays_built_from_buffers_equal_pyarrows_own(
    ints: list[int | None],
    texts: list[str | None],
    blobs: list[bytes | None],
    maps: list[list[tuple[str, str | None]]],
) -> None:
    """The reader's columns, laid out from their buffers, are what ``pa.array`` builds from the
    same lists: nulls, empty values, non-ASCII text, empty and repeated map entries."""
    import pyarrow as pa

    from dagster_eventhub_ingest.resources.eventhubs_source.arrow import (
        int64_array,
        map_array,
        varbinary_array,
    )
    from dagster_eventhub_ingest.resources.eventhubs_source.schema import source_arrow_schema

    schema = source_arrow_schema()
    when, props = schema.field("enqueuedTime").type, schema.field("properties").type
    built = {
        "int64": (int64_array(ints, pa.int64()), pa.array(ints, pa.int64())),
        "timestamp": (int64_array(ints, when), pa.array(ints, pa.int64()).cast(when)),
        "string": (varbinary_array(texts, pa.string()), pa.array(texts, pa.string())),
        "binary": (varbinary_array(blobs, pa.binary()), pa.array(blobs, pa.binary())),
        "map": (map_array(maps, props), pa.array(maps, props)),
    }
    for name, (ours, pyarrows) in built.items():
        ours.validate(full=True)
        assert ours.type == pyarrows.type, name
        assert ours.equals(pyarrows), (name, ours, pyarrows)


def test_values_past_32_bit_offsets_are_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past 2 GiB of values an array's offsets would wrap; the builder says so instead."""
    import pyarrow as pa

    from dagster_eventhub_ingest.resources.eventhubs_source import arrow

    monkeypatch.setattr(arrow, "_MAX_OFFSET", 5)
    assert arrow.varbinary_array([b"abc", b"de"], pa.binary()).to_pylist() == [b"abc", b"de"]
    with pytest.raises(ValueError, match="6 bytes of values: past the 2 GiB of 32-bit offsets"):
        arrow.varbinary_array([b"abc", b"def"], pa.binary())


@settings(max_examples=150, deadline=None)
@given(st.lists(raw_messages(), min_size=1, max_size=30), st.integers(1, 7))
def test_a_readers_summary_is_what_its_batches_hold(messages: list[Any], every: int) -> None:
    """What a reader tells the driver it read (``ArrowBuilder.summary``, sent through the
    accumulator) equals the statistics of the rows it yielded, however the rows were batched."""
    import pyarrow as pa
    from azure.eventhub import EventData

    from dagster_eventhub_ingest.resources.eventhubs_source.events import ArrowBuilder
    from dagster_eventhub_ingest.resources.eventhubs_source.schema import source_arrow_schema

    builder = ArrowBuilder("0", source_arrow_schema())
    batches = []
    for seq, message in enumerate(messages, start=100):
        builder.add(EventData._from_message(message), seq)  # the SDK's receive's events
        if len(builder) >= every:
            batches.append(builder.flush())
    if len(builder):
        batches.append(builder.flush())
    rows = pa.Table.from_batches(batches).to_pylist()
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    times = [
        (r["enqueuedTime"] - epoch) // timedelta(microseconds=1) for r in rows if r["enqueuedTime"]
    ]
    assert builder.summary() == (
        len(rows),
        sum(len(r["body"] or b"") for r in rows),
        rows[0]["sequenceNumber"],
        rows[-1]["sequenceNumber"],
        rows[-1]["offset"],
        min(times, default=None),
        max(times, default=None),
    )


def test_partition_totals_need_sub_ranges_that_tile_every_range() -> None:
    from dagster_eventhub_ingest.resources.eventhubs_source.stats import partition_totals

    def sub(n: int, first: int, last: int, t0: int, t1: int) -> tuple[Any, ...]:
        return (n, 10 * n, first, last, str(last * 100), t0, t1)

    found = {
        ("0", 0, 9): sub(10, 0, 9, 5_000_000, 9_000_000),
        ("0", 10, 14): sub(5, 10, 14, 4_000_000, 8_000_000),  # an older time later: min/max
        ("1", 3, 3): (1, 0, 3, 3, None, None, None),
    }
    ranges = {"0": (0, 14), "1": (3, 3)}
    totals = partition_totals(found, ranges)
    assert totals is not None
    n, nbytes, first, last, offset, t0, t1 = totals["0"]
    assert (n, nbytes, first, last, offset) == (15, 150, 0, 14, "1400")
    assert (t0, t1) == (
        datetime(1970, 1, 1, 0, 0, 4, tzinfo=timezone.utc),
        datetime(1970, 1, 1, 0, 0, 9, tzinfo=timezone.utc),
    )
    assert totals["1"] == (1, 0, 3, 3, None, None, None)
    missing = {k: v for k, v in found.items() if k != ("0", 10, 14)}
    assert partition_totals(missing, ranges) is None  # a reader's update did not arrive
    assert partition_totals(found, {**ranges, "2": (0, 0)}) is None  # a partition not read
    assert partition_totals(found, {"0": (0, 14)}) is None  # another read's partition
    assert partition_totals(found, {"0": (0, 15), "1": (3, 3)}) is None  # short of the end
    gap = {**found, ("0", 10, 14): sub(4, 10, 14, 0, 0)}
    assert partition_totals(gap, ranges) is None  # a sub-range without all its events
    overlap = {**found, ("0", 9, 14): sub(6, 9, 14, 0, 0)}
    assert partition_totals(overlap, ranges) is None
    # A read that skipped expired events: its plan starts after the range's start, a sub-range
    # read nothing, another has a hole; the totals are of what was read.
    skipped = {
        ("0", 4, 7): (0, 0, None, None, None, None, None),
        ("0", 8, 11): sub(2, 8, 11, 6_000_000, 7_000_000),
        ("0", 12, 14): sub(3, 12, 14, 5_000_000, 9_000_000),
    }
    assert partition_totals(skipped, {"0": (0, 14)}) is None  # complete reads only
    cut = partition_totals(skipped, {"0": (0, 14)}, complete=False)
    assert cut is not None and cut["0"][:5] == (5, 50, 8, 14, "1400")
    assert partition_totals(skipped, {"0": (0, 15)}, complete=False) is None  # short of the end
    early = {**skipped, ("0", 0, 2): sub(3, 0, 2, 0, 0)}  # a hole between sub-ranges
    assert partition_totals(early, {"0": (0, 14)}, complete=False) is None


@pytest.mark.parametrize("has_concat", [True, False])
def test_batches_concatenate_in_order_on_every_supported_pyarrow(
    has_concat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pa.concat_batches`` exists from pyarrow 19; the range starts at 18 (the wheel tier's
    oldest projects run it), where the table route gives the same batch."""
    import pyarrow as pa

    from dagster_eventhub_ingest.resources.eventhubs_source.arrow import concat_batches

    if not has_concat:
        monkeypatch.delattr(pa, "concat_batches", raising=False)
    first = pa.record_batch({"seq": [1, 2], "body": [b"a", b"b"]})
    second = pa.record_batch({"seq": [3], "body": [b"c"]})
    joined = concat_batches([first, second.slice(0, 1), first.slice(0, 0)])
    assert joined.to_pydict() == {"seq": [1, 2, 3], "body": [b"a", b"b", b"c"]}
    empty = concat_batches([first.slice(0, 0), second.slice(0, 0)])
    assert empty.num_rows == 0 and empty.schema == first.schema
