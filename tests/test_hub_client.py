"""The one management client's pure parts: partition id order and what properties become."""

from __future__ import annotations

from datetime import UTC, datetime

from resources.hub_client import partition_info_from_properties, sort_partition_ids


def test_partition_ids_sort_numerically_then_by_name() -> None:
    assert sort_partition_ids(["10", "2", "b", "0", "a", "1"]) == ["0", "1", "2", "10", "a", "b"]


def test_properties_of_a_partition_with_events() -> None:
    info = partition_info_from_properties(
        "3",
        {
            "beginning_sequence_number": 5,
            "last_enqueued_sequence_number": 41,
            "last_enqueued_offset": "8192",
            "last_enqueued_time_utc": datetime(2024, 5, 1, 12),  # naive: the service's UTC
            "is_empty": False,
        },
    )
    assert (info.partition_id, info.begin_sequence_number) == ("3", 5)
    assert info.last_enqueued_sequence_number == 41 and info.last_enqueued_offset == "8192"
    assert info.last_enqueued_time == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert not info.is_empty


def test_an_empty_partition_begins_after_its_last_event() -> None:
    """Nothing retained: the first readable event is last + 1, whatever beginning says."""
    info = partition_info_from_properties(
        "0",
        {
            "beginning_sequence_number": 0,
            "last_enqueued_sequence_number": 99,
            "last_enqueued_offset": "",
            "last_enqueued_time_utc": None,
            "is_empty": True,
        },
    )
    assert info.begin_sequence_number == 100 and info.is_empty
    assert info.last_enqueued_offset is None and info.last_enqueued_time is None
