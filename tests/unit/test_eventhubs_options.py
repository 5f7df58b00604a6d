"""The connector's and Kafka's reader options mapped onto the eventhubs source (no services)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.eventhubs_source.compat.bounds import (
    Bound,
    parse_event_position,
)
from dagster_eventhub_ingest.resources.eventhubs_source.compat.encryption import (
    decrypt_connection_string,
    encrypt_connection_string,
)
from dagster_eventhub_ingest.resources.eventhubs_source.compat.options import (
    parse_iso_duration,
    parse_source_options,
)
from dagster_eventhub_ingest.resources.eventhubs_source.compat.table import CONNECTOR_OPTIONS
from dagster_eventhub_ingest.resources.eventhubs_source.stream import EventHubsStreamReader, admit

SECRET = "c2VjcmV0LWtleS12YWx1ZQ=="
BASE = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey={SECRET}"
WITH_ENTITY = BASE + ";EntityPath=telemetry"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("PT60S", 60), ("PT00H03M20S", 200), ("PT1M", 60), ("P1DT1S", 86401), ("PT0.5S", 0.5)],
)
def test_iso_durations_as_java_reads_them(text: str, seconds: float) -> None:
    assert parse_iso_duration(text, "eventhubs.receiverTimeout") == seconds


def test_bad_duration_names_option_and_format() -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_iso_duration("60 seconds", "eventhubs.operationTimeout")
    assert "eventhubs.operationTimeout: '60 seconds'" in str(err.value) and "PT60S" in str(
        err.value
    )


def test_encrypted_connection_string_round_trips() -> None:
    enc = encrypt_connection_string(WITH_ENTITY)
    assert "SharedAccessKey" not in enc
    assert decrypt_connection_string(enc) == WITH_ENTITY
    # An older connector version's key is found too.
    assert decrypt_connection_string(encrypt_connection_string(BASE, "2.3.15")) == BASE
    assert decrypt_connection_string("not base64 at all") is None


@pytest.mark.parametrize(
    ("position", "bound"),
    [
        (
            {"offset": "-1", "seqNo": -1, "enqueuedTime": None, "isInclusive": True},
            Bound("earliest"),
        ),
        ({"offset": -1, "seqNo": -1, "enqueuedTime": None, "isInclusive": True}, Bound("earliest")),
        ({"offset": "@latest", "seqNo": -1, "enqueuedTime": None}, Bound("latest")),
        ({"offset": None, "seqNo": 100, "enqueuedTime": None}, Bound("sequence_number", 100)),
        ({"offset": "4096", "seqNo": -1, "isInclusive": False}, Bound("offset", "4096", False)),
        (
            {"offset": None, "seqNo": -1, "enqueuedTime": "2024-05-01T12:00:00.123456Z"},
            Bound(
                "enqueued_time", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc), False
            ),
        ),
    ],
)
def test_connector_event_positions(position: dict[str, object], bound: Bound) -> None:
    assert parse_event_position(json.dumps(position), "eventhubs.startingPosition") == bound


@pytest.mark.parametrize(
    ("position", "fragment"),
    [
        ({"offset": None, "seqNo": -1, "enqueuedTime": None}, "no position is set"),
        ({"offset": "abc"}, "offset 'abc' is not valid"),
        ({"seqNo": -5}, "seqNo -5 is negative"),
        ({"seqno": 5}, "unknown EventPosition field(s) seqno"),
        ({"enqueuedTime": "yesterday"}, "enqueuedTime 'yesterday' is not a time"),
    ],
)
def test_bad_event_position_names_option_and_fix(
    position: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_event_position(json.dumps(position), "eventhubs.endingPosition")
    assert str(err.value).startswith("eventhubs.endingPosition") and fragment in str(err.value)


def test_connector_conf_maps_to_our_options() -> None:
    source = parse_source_options(
        {
            "eventhubs.connectionString": encrypt_connection_string(WITH_ENTITY),
            "eventhubs.consumerGroup": "spark",
            "eventhubs.prefetchCount": "500",
            "eventhubs.receiverTimeout": "PT00H03M20S",
            "eventhubs.operationTimeout": "PT1M",
            "maxEventsPerTrigger": "1000",
            "eventhubs.startingPosition": json.dumps({"offset": "-1", "seqNo": -1}),
            "eventhubs.endingPositions": json.dumps(
                {json.dumps({"ehName": "telemetry", "partitionId": 2}): {"seqNo": 150}}
            ),
        }
    )
    settings = source.read.settings
    # The hub comes from EntityPath; the connection string was decrypted.
    assert settings.eventhub_name == "telemetry" and settings.connection_string == WITH_ENTITY
    assert settings.consumer_group == "spark"
    assert (source.read.prefetch, source.read.receive_timeout) == (500, 200.0)
    assert (source.operation_timeout, source.max_events_per_trigger) == (60.0, 1000)
    assert source.starts is not None and source.starts.default == Bound("earliest")
    assert source.ends is not None
    assert source.ends.per_partition == (("2", Bound("sequence_number", 150)),)
    assert SECRET not in repr(source)


def test_kafka_offsets_keep_kafkas_meaning() -> None:
    source = parse_source_options(
        {
            "eventhubs.connectionString": WITH_ENTITY,
            "startingOffsets": '{"telemetry": {"0": -2, "1": -1, "2": 23}}',
            "endingOffsets": '{"telemetry": {"0": 50, "1": -1}}',
            "failOnDataLoss": "false",
            "maxOffsetsPerTrigger": "10",
        }
    )
    assert source.starts is not None and dict(source.starts.per_partition) == {
        "0": Bound("earliest"),
        "1": Bound("latest"),
        "2": Bound("sequence_number", 23),
    }
    assert source.ends is not None and dict(source.ends.per_partition) == {
        "0": Bound("sequence_number", 50),
        "1": Bound("latest"),
    }
    assert source.read.on_data_loss == "skip" and source.max_events_per_trigger == 10
    flat = parse_source_options(
        {"connection_string": WITH_ENTITY, "startingOffsets": "earliest", "endingOffsets": "latest"}
    )
    assert flat.starts is not None and flat.starts.default == Bound("earliest")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"eventhubs.useAadAuth": "true"}, "credential_type='default_azure_credential'"),
        ({"eventhubs.threadPoolSize": "16"}, "remove it"),
        ({"eventhubs.maxRatesPerPartition": "{}"}, "use maxEventsPerTrigger"),
        ({"eventhubs.useExclusiveReceiver": "true"}, "non-exclusive"),
        ({"subscribe": "telemetry"}, "give eventhub_name"),
        ({"startingOffsetsByTimestamp": "{}"}, "enqueuedTime"),
        ({"endingOffsets": '{"telemetry": {"0": -2}}'}, "-2 (earliest) is not a valid end"),
        ({"startingOffsets": '{"other": {"0": 1}}'}, "names Event Hub(s) 'other'"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss: 'maybe' must be 'true' or 'false'"),
        ({"maxEventsPerTrigger": "0"}, "maxEventsPerTrigger: 0 must be >= 1"),
        ({"eventhubs.receiverTimeout": "1 minute"}, "not an ISO-8601 duration"),
        (
            {"startingOffsets": "earliest", "eventhubs.startingPosition": '{"offset": "-1"}'},
            "in one form",
        ),
        ({"startingOffsets": "earliest", "ranges": '{"0": [0, 1]}'}, "in one form"),
        ({"eventhubs.consumerGroup": "a", "consumer_group": "b"}, "give one of them"),
    ],
)
def test_refused_or_bad_options_say_what_to_use(extra: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_source_options({"eventhubs.connectionString": WITH_ENTITY, **extra})
    assert fragment in str(err.value)
    assert SECRET not in str(err.value)


def test_a_garbled_connection_string_is_not_shown() -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_source_options({"eventhubs.connectionString": "c2VjcmV0", "eventhub_name": "x"})
    assert "c2VjcmV0" not in str(err.value) and "EventHubsUtils.encrypt" in str(err.value)


def test_every_connector_option_is_in_the_docs_table() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "spark_source.md").read_text().lower()
    missing = [k for k in CONNECTOR_OPTIONS if f"`{k.lower()}`" not in doc]
    assert not missing, f"docs/spark_source.md lacks {missing}"


@pytest.mark.parametrize(
    ("backlog", "limit", "expected"),
    [
        ({"0": 100, "1": 300}, 40, {"0": 10, "1": 30}),
        ({"0": 5, "1": 5}, 100, {"0": 5, "1": 5}),
        ({"0": 1, "1": 1, "2": 1}, 2, {"0": 1, "1": 1, "2": 0}),
        ({"0": 0, "1": 7}, 3, {"0": 0, "1": 3}),
    ],
)
def test_admission_splits_the_limit_by_backlog(
    backlog: dict[str, int], limit: int, expected: dict[str, int]
) -> None:
    admitted = admit(backlog, limit)
    assert admitted == expected
    assert sum(admitted.values()) == min(limit, sum(backlog.values()))


@pytest.mark.parametrize(
    "extra",
    [
        {"endingOffsets": "latest"},
        {"eventhubs.endingPosition": '{"offset": "@latest"}'},
        {"ending_position": "seq:5"},
        {"ranges": '{"0": [0, 1]}'},
    ],
)
def test_a_stream_refuses_end_options(extra: dict[str, str]) -> None:
    """At the first call Spark makes (PySpark's runner would mask an error raised while the
    reader is created with an UnboundLocalError of its own)."""
    source = parse_source_options({"eventhubs.connectionString": WITH_ENTITY, **extra})
    reader = EventHubsStreamReader(source)
    for call in (reader.initialOffset, reader.getDefaultReadLimit):
        with pytest.raises(ConfigurationError) as err:
            call()
        assert next(iter(extra)) in str(err.value) and "availableNow" in str(err.value)


def test_a_batch_read_refuses_stream_only_options() -> None:
    source = parse_source_options(
        {"eventhubs.connectionString": WITH_ENTITY, "maxoffsetspertrigger": "10"}
    )
    err = source.stream_only_error()
    assert err is not None and "maxOffsetsPerTrigger: bounds a stream" in str(err)
    assert parse_source_options({"eventhubs.connectionString": WITH_ENTITY}).stream_only == ()


def test_with_offset_and_seqno_the_connector_takes_the_sequence_number() -> None:
    """EventHubsClient.translate reads seqNo first: a seqNo >= 0 wins over offset."""
    both = {"offset": "4096", "seqNo": 12, "enqueuedTime": None, "isInclusive": True}
    assert parse_event_position(both, "eventhubs.startingPosition") == Bound("sequence_number", 12)
    unused = {"offset": "4096", "seqNo": -1}
    assert parse_event_position(unused, "eventhubs.startingPosition") == Bound(
        "offset", "4096", True
    )


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("startingPositon", "startingPosition"),
        ("failondatalos", "failOnDataLoss"),
        ("eventhubs.consumergrup", "eventhubs.consumerGroup"),
        ("endingOfsets", "endingOffsets"),
        ("max_readers_per_partitions", "max_readers_per_partition"),
    ],
)
def test_an_unknown_option_gets_a_did_you_mean_over_every_accepted_spelling(
    typo: str, suggestion: str
) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_source_options({"eventhubs.connectionString": WITH_ENTITY, typo: "x"})
    message = str(err.value)
    assert f"unknown option {typo!r}; did you mean {suggestion!r}?" in message
    for listed in ("starting_position", "eventhubs.startingPositions", "failOnDataLoss"):
        assert listed in message


@pytest.mark.parametrize(
    ("options", "hint"),
    [
        ({}, "on_data_loss='skip'"),
        ({"ondataloss": "fail"}, "onDataLoss='skip'"),
        ({"failondataloss": "true"}, "failOnDataLoss=false"),
        ({"startingoffsets": "earliest"}, "failOnDataLoss=false"),
        ({"eventhubs.startingposition": '{"offset": "-1"}'}, "failOnDataLoss=false"),
    ],
)
def test_the_data_loss_hint_speaks_the_users_dialect(options: dict[str, str], hint: str) -> None:
    """Spark hands the options over lower-cased: the hint spells them as their docs do."""
    source = parse_source_options({"connection_string": WITH_ENTITY, **options})
    assert source.read.data_loss_hint == hint
