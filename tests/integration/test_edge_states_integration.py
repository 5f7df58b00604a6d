"""Edge states that used to lose or duplicate events, as a user meets them.

Real parts: the project's Event Hubs emulator driven by the real SDK (it can delete and
re-create a hub), Azurite for the store, local Spark writing Parquet, and ``ehingest`` run as
a subprocess where the exit code and the printed message are part of the contract. Every
scenario ends with the exactly-once comparison of ``tests/support/landed.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from tests.support.cli import ehingest, run_in_process, write_config
from tests.support.landed import assert_exactly_once, landed_events, send_tagged, sent_events
from tests.support.raising import Crash

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark
def test_recreated_hub_is_refused_flagged_and_reset_on_request_with_nothing_lost(
    spark, eventhub_emulator, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.cli.run import format_report

    hub = eventhub_emulator.create_hub(partitions=2)
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    config = write_config(tmp_path, hub, container_name)
    old: dict[str, list[bytes]] = {}
    send_tagged(hub, old, 50, "old")
    assert run_in_process(spark, config, env, "first").complete

    # The hub is deleted and re-created under the same name: numbers restart at 0.
    eventhub_emulator.delete_hub(hub.name)
    hub = eventhub_emulator.create_hub(hub.name, partitions=2)
    new: dict[str, list[bytes]] = {}
    send_tagged(hub, new, 30, "new")

    refused = ehingest("run", "--config", str(config), "--owner", "second", env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr  # not retryable
    err = refused.stderr
    assert "CheckpointAheadError" in err and "Traceback" not in err
    assert "partition 0: the checkpoint 49 was written for an earlier hub" in err
    assert "last enqueued is now 29" in err
    assert "--partition 0 --partition 1 --on-checkpoint-ahead reset_to_earliest" in err
    assert landed_events(tmp_path / "out") == sent_events(old)  # nothing read, nothing lost

    status = ehingest("status", "--config", str(config), "--json", env=env)
    assert status.returncode == 0, status.stderr[-2000:]
    rows = {r["partition_id"]: r for r in json.loads(status.stdout)}
    assert "earlier hub" in rows["0"]["problem"] and rows["0"]["lag_events"] == 30
    table = ehingest("status", "--config", str(config), env=env)
    assert "AHEAD OF HUB" in table.stdout and "--on-checkpoint-ahead reset_to_earliest" in (
        table.stdout
    )

    # What `ehingest run ... --on-checkpoint-ahead reset_to_earliest` runs and prints.
    report = run_in_process(spark, config, env, "third", on_checkpoint_ahead="reset_to_earliest")
    printed = format_report(report)
    assert report.complete and "(checkpoint reset)" in printed
    assert "partition 0: checkpoint reset from 49 to -1" in printed
    # Old hub's events once, and every event of the new hub once.
    assert_exactly_once(landed_events(tmp_path / "out"), sent_events(old) + sent_events(new))
    status = ehingest("status", "--config", str(config), "--json", env=env)
    rows = {r["partition_id"]: r for r in json.loads(status.stdout)}
    assert rows["0"]["problem"] is None and rows["0"]["checkpoint"] == 29
    assert "reset from 49 to -1" in rows["0"]["checkpoint_reset"]


def test_hand_edited_checkpoint_ahead_is_refused_before_any_claim(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 5)
    settings = StoreSettings(container=container_name, connection_string=azurite_connection_string)
    backend = AzureBlobBackend.from_settings(settings)
    store = PartitionStore(backend, hub.settings().hub_ref())
    backend.ensure_container(create=True)
    for value in ("-5", "40"):
        backend.put(
            store.hub.prefix("checkpoint") + "0",
            {"sequencenumber": value, "offset": ""},
            etag=getattr(backend.get(store.hub.prefix("checkpoint") + "0"), "etag", None),
        )
        env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
        done = ehingest(
            "run", "--config", str(write_config(tmp_path, hub, container_name)), env=env
        )
        assert done.returncode == 2, done.stderr  # not retryable
        assert ("-5 is negative" if value == "-5" else "checkpoint 40 is ahead") in done.stderr
        assert store.list_ownership() == {}  # refused before any claim
    backend.close()


def test_missing_hub_and_unknown_consumer_group_are_configuration_errors_before_any_claim(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    import time

    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.resources.errors import ConfigurationError
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    hub = make_eventhub(partitions=2)
    store = StoreSettings(container=container_name, connection_string=azurite_connection_string)
    cases = {
        "eventhub.consumer_group: 'nosuchgroup' does not exist": hub.settings("nosuchgroup"),
        "eventhub.eventhub_name: Event Hubs": EventHubSettings(
            eventhub_name="nosuchhub", connection_string=hub.connection_string
        ),
    }
    for expected, settings in cases.items():
        cfg = IngestSettings(
            eventhub=settings, store=store, sink=SinkSettings(path=str(tmp_path / "out"))
        )
        started = time.monotonic()
        with pytest.raises(ConfigurationError, match=expected) as err:
            run_ingestion(cfg, None, owner_id="x")
        assert time.monotonic() - started < 20
        assert not err.value.retryable and "SharedAccessKey" not in str(err.value)
        backend = AzureBlobBackend.from_settings(store)
        assert backend.list("") == []  # no heartbeat, claim or intent was written
    # Through the CLI: exit 2 (configuration), one line, no traceback.
    env = {"EH_CONN": hub.connection_string, "ST_CONN": azurite_connection_string}
    cfg_path = write_config(tmp_path, hub, container_name)
    raw = yaml.safe_load(cfg_path.read_text())
    raw["eventhub"]["consumer_group"] = "nosuchgroup"
    cfg_path.write_text(yaml.safe_dump(raw))
    done = ehingest("run", "--config", str(cfg_path), env=env)
    assert done.returncode == 2, done.stderr
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_a_wrong_sas_key_is_a_configuration_error_before_any_claim(
    make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    """The emulator checks SAS signatures as Event Hubs does: a wrong key is refused (401)."""
    import re

    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.resources.errors import ConfigurationError
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    hub = make_eventhub(partitions=2)
    wrong_key = "d3Jvbmcta2V5LW5vdC10aGlzLW9uZQ=="
    conn = re.sub(r"SharedAccessKey=[^;]*", f"SharedAccessKey={wrong_key}", hub.connection_string)
    assert conn != hub.connection_string
    store = StoreSettings(container=container_name, connection_string=azurite_connection_string)
    cfg = IngestSettings(
        eventhub=EventHubSettings(eventhub_name=hub.name, connection_string=conn),
        store=store,
        sink=SinkSettings(path=str(tmp_path / "out")),
    )
    with pytest.raises(ConfigurationError) as err:
        run_ingestion(cfg, None, owner_id="x")
    message = str(err.value)
    assert not err.value.retryable
    assert f"Event Hubs {hub.settings().namespace}/{hub.name} refused the credential" in message
    assert "HTTP 401" in message and "InvalidSignature" in message  # what is wrong
    assert "SharedAccessKey must be its current key" in message  # what to do
    assert wrong_key not in message and "SAS_KEY_VALUE" not in message
    assert (
        AzureBlobBackend.from_settings(store).list("") == []
    )  # no heartbeat, claim or intent was written
    # Through the CLI: exit 2 (retrying cannot help), one line, no traceback, no secret.
    env = {"EH_CONN": conn, "ST_CONN": azurite_connection_string}
    done = ehingest("run", "--config", str(write_config(tmp_path, hub, container_name)), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused the credential" in done.stderr and "Retrying cannot help" in done.stderr
    assert "Traceback" not in done.stderr and wrong_key not in done.stdout + done.stderr
    assert AzureBlobBackend.from_settings(store).list("") == []


def _ingest_settings(hub, container: str, conn: str, out: Path, **kw):
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    base = dict(
        eventhub=hub.settings(),
        store=StoreSettings(container=container, connection_string=conn),
        sink=SinkSettings(format="parquet", path=str(out)),
        lease_expiry_seconds=15.0,
        receive_timeout_seconds=10.0,
        join_grace_seconds=0.0,
        report_lag_seconds=False,
    )
    base.update(kw)
    return IngestSettings(**base)  # type: ignore[arg-type]


def _crash_after_write(spark, cfg, owner: str) -> None:
    """One run that writes its batch and dies before the checkpoint (intent left pending)."""
    from dagster_eventhub_ingest.ops.run.entry import DefaultClaim
    from dagster_eventhub_ingest.ops.run.ingestor import Ingestor, SparkIngestor
    from dagster_eventhub_ingest.ops.run.processor import Processor
    from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    store = PartitionStore(AzureBlobBackend.from_settings(cfg.store), cfg.eventhub.hub_ref())
    real = SparkIngestor(spark, cfg.eventhub, cfg.sink, receive_timeout_seconds=10)

    class CrashAfterWrite(Ingestor):
        output_location = None

        def ingest(self, ranges, **kw):
            real.ingest(ranges, **kw)
            raise Crash()

    proc = Processor(
        cfg,
        store,
        EventHubClient(cfg.eventhub),
        CrashAfterWrite(),  # type: ignore[arg-type]
        owner_id=owner,
        claim=DefaultClaim(cfg, store, owner, None),
    )
    with pytest.raises(Crash):
        proc.run()


@pytest.mark.spark
def test_partition_by_changed_while_a_written_batch_is_pending_is_refused_and_lands_once(
    spark, make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    import dataclasses

    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.resources.errors import ConfigurationError
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    hub = make_eventhub(partitions=2)
    sent: dict[str, list[bytes]] = {}
    send_tagged(hub, sent, 25, "e")
    out = tmp_path / "out"
    cfg = _ingest_settings(hub, container_name, azurite_connection_string, out)
    _crash_after_write(spark, cfg, "dead")
    store = PartitionStore(AzureBlobBackend.from_settings(cfg.store), cfg.eventhub.hub_ref())
    pending = store.list_ownership()
    assert all(o.intent is not None for o in pending.values()) and len(pending) == 2

    moved = cfg.replace(sink=dataclasses.replace(cfg.sink, partition_by=("partition",)))
    with pytest.raises(ConfigurationError) as err:
        run_ingestion(moved, spark, owner_id="changed")
    msg = str(err.value)
    assert "partitioned by ['eh_batch'] on disk" in msg and "nothing was claimed" in msg
    assert store.list_ownership() == pending  # nothing claimed, intents untouched

    report = run_ingestion(cfg, spark, owner_id="same")
    assert report.complete
    assert_exactly_once(landed_events(out), sent_events(sent))


@pytest.mark.spark
def test_skip_writes_the_retained_part_of_an_intent_whose_head_expired(
    spark, make_eventhub, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    import time

    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.plan import sink_layout
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    retention = 10.0
    hub = make_eventhub(partitions=1, retention_seconds=retention)
    old: dict[str, list[bytes]] = {}
    send_tagged(hub, old, 10, "old")
    # After the send: the last old event was enqueued before this (the producer's connection
    # takes a while to open, and a run now reaches its read within a second).
    sent_old = time.monotonic()
    out = tmp_path / "out"
    cfg = _ingest_settings(hub, container_name, azurite_connection_string, out, on_data_loss="skip")
    store = PartitionStore(AzureBlobBackend.from_settings(cfg.store), cfg.eventhub.hub_ref())
    time.sleep(retention * 0.6)
    new: dict[str, list[bytes]] = {}
    send_tagged(hub, new, 10, "new")
    # A run recorded the intent [0, 19] and died before reading it.
    own = store.claim("0", "dead", None)
    assert own is not None
    layout = sink_layout(cfg.sink.format, cfg.sink.partition_by)
    store.release(store.record_intent(own, 0, 19, layout=layout))
    time.sleep(max(0.0, sent_old + retention + 0.5 - time.monotonic()))  # the old 10 expired
    report = run_ingestion(cfg, spark, owner_id="next")
    r = report.partitions["0"]
    assert report.complete and r.skipped_ranges == [(0, 9)], r
    assert (r.events, r.first_sequence_number, r.last_sequence_number) == (10, 10, 19)
    assert r.ranges_written == [(0, 19)]  # the intent's own batch key
    assert_exactly_once(landed_events(out), sent_events(new, first_sequence=10))
