"""A hub re-created under its name and reset to the earliest event restarts its sequence
numbers, so its batches would repeat the old hub's keys (``<partition>-<start>-<end>``) and the
dynamic overwrite would replace the old hub's batch in the sink (10 of 20 old events lost). The
reset records a hub generation that every later batch key of the partition names."""

import re

import pytest

from tests.support.cli import run_in_process, write_config
from tests.support.landed import assert_exactly_once, landed_events, send_tagged, sent_events

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_reset_after_the_hub_was_recreated_keeps_the_old_hubs_batches(
    spark, eventhub_emulator, azurite_connection_string, container_name, tmp_path
):
    hub = eventhub_emulator.create_hub(partitions=1)
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    config = write_config(tmp_path, hub, container_name, max_events_per_partition=10)
    old: dict[str, list[bytes]] = {}
    send_tagged(hub, old, 20, "old")
    assert run_in_process(spark, config, env, "a").complete  # batch 0-0-9
    assert run_in_process(spark, config, env, "b").complete  # batch 0-10-19
    eventhub_emulator.delete_hub(hub.name)
    hub = eventhub_emulator.create_hub(hub.name, partitions=1)
    new: dict[str, list[bytes]] = {}
    send_tagged(hub, new, 10, "new")
    # Range 0..9 again, under the new hub's generation: the old hub's 0-0-9 batch stays.
    assert run_in_process(spark, config, env, "c", on_checkpoint_ahead="reset_to_earliest").complete
    assert_exactly_once(landed_events(tmp_path / "out"), sent_events(old) + sent_events(new))
    batches = sorted(p.name for p in (tmp_path / "out").glob("eh_batch=*"))
    assert len(batches) == 3 and batches[0] == "eh_batch=0-0-9", batches
    assert re.fullmatch(r"eh_batch=0-0-9-g\d{13}", batches[1]) and batches[2] == "eh_batch=0-10-19"
