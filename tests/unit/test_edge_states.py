"""Edge states that used to lose or duplicate events silently, on the pure run logic.

In-memory store with Blob CAS semantics, the fake hub and sink of ``tests/support/run_fakes.py``.
The same cases against Azurite, the emulator and Spark are in
``tests/integration/test_edge_states_integration.py``.
"""

from __future__ import annotations

import pytest

from dagster_eventhub_ingest.ops.run.plan import checkpoint_problem
from dagster_eventhub_ingest.ops.run.processor import Processor
from dagster_eventhub_ingest.resources.errors import CheckpointAheadError, ConfigurationError
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Intent
from tests.support.raising import Crash, crash
from tests.support.run_fakes import HUB, FakeHub, config, greedy_claim, info, make


def test_checkpoint_problem_names_each_impossible_state() -> None:
    i = info(begin=0, last=29)
    assert checkpoint_problem(i, Checkpoint("0", 29, "2900")) is None
    assert checkpoint_problem(i, Checkpoint("0", -1, "-1")) is None  # reset: nothing read yet
    assert "ahead of the hub's last enqueued event 29" in str(
        checkpoint_problem(i, Checkpoint("0", 49))
    )
    assert "-5 is negative" in str(checkpoint_problem(i, Checkpoint("0", -5)))
    assert "offset 99999 is ahead" in str(
        checkpoint_problem(
            i.__class__("0", 0, 29, last_enqueued_offset="2900"), Checkpoint("0", 3, "99999")
        )
    )
    recreated = checkpoint_problem(i, Checkpoint("0", 10, hub_created_ms=1), hub_created_ms=2)
    assert "earlier hub of the same name" in str(recreated)
    assert "intent [40, 49]" in str(checkpoint_problem(i, None, Intent(40, 49, "old")))


def test_recreated_hub_is_refused_before_any_claim_with_both_numbers_and_the_reset() -> None:
    hub = FakeHub(2)
    hub.send_all(50)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend)
    assert proc.run().complete  # checkpoints at 49
    hub.recreate()
    hub.send_all(30)  # sequence numbers 0..29 of the new hub
    before = {p: (o.etag, o.epoch) for p, o in store.list_ownership().items()}
    with pytest.raises(CheckpointAheadError) as err:
        proc.run()
    msg = str(err.value)
    assert "partition 0: the checkpoint 49 was written for an earlier hub" in msg
    assert "last enqueued is now 29" in msg and "partition 1:" in msg
    assert "--partition 0 --partition 1 --on-checkpoint-ahead reset_to_earliest" in msg
    assert not err.value.retryable
    # Refused before anything was claimed or read.
    assert {p: (o.etag, o.epoch) for p, o in store.list_ownership().items()} == before
    assert len(sink.calls) == 1


def test_checkpoint_ahead_without_hub_identity_is_refused_too() -> None:
    """A checkpoint written by the Azure SDK (no creation time recorded), or edited by hand."""
    hub = FakeHub(1)
    hub.send_all(30)
    backend = InMemoryBackend()
    store = PartitionStore(backend, HUB)
    backend.put(HUB.prefix("checkpoint") + "0", {"sequencenumber": "49", "offset": ""}, etag=None)
    proc, _, sink = make(hub, backend)
    with pytest.raises(CheckpointAheadError, match=r"checkpoint 49 is ahead of the hub's last"):
        proc.run()
    assert sink.calls == [] and store.list_ownership() == {}


def test_reset_to_earliest_reads_every_retained_event_once_and_records_the_reset() -> None:
    hub = FakeHub(2)
    hub.send_all(50)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend)
    proc.run()
    hub.recreate()
    hub.send_all(30)
    hub.expire("1", 5)  # partition 1 retains 5..29 only
    sink.sink.clear()
    proc2 = Processor(
        config(on_checkpoint_ahead="reset_to_earliest"),
        store,
        hub,
        sink,
        owner_id="resetter",
        claim=greedy_claim(store, "resetter"),
    )
    report = proc2.run()
    assert report.complete
    r0, r1 = report.partitions["0"], report.partitions["1"]
    assert (r0.first_sequence_number, r0.last_sequence_number, r0.events) == (0, 29, 30)
    assert (r1.first_sequence_number, r1.events) == (5, 25)
    assert r0.checkpoint_reset is not None and "reset from 49 to -1" in r0.checkpoint_reset
    assert "reset from 49 to 4" in str(r1.checkpoint_reset)
    assert sink.rows() == [row for row in sink.expected() if row[0] == "0" or row[1] >= 5]
    cps = store.list_sdk_checkpoints()
    assert cps["0"].sequence_number == 29 and "reset from 49" in str(cps["0"].reset)
    assert cps["0"].hub_created_ms == hub.created_ms
    # The next run sees nothing wrong and nothing new.
    again = make(hub, backend, owner="later", ingestor=sink)[0]
    assert again.run().events == 0


def test_reset_of_an_empty_recreated_hub_and_a_stale_intent() -> None:
    hub = FakeHub(1)
    hub.send_all(20)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, max_events_per_partition=10)
    proc.run()  # checkpoint 9
    own = store.claim("0", "crashed", store.get_ownership("0"))
    assert own is not None
    store.record_intent(own, 10, 19)
    store.release(store.get_ownership("0"))  # type: ignore[arg-type]
    hub.recreate()  # empty: last enqueued -1
    proc2 = Processor(
        config(on_checkpoint_ahead="reset_to_earliest"),
        store,
        hub,
        sink,
        owner_id="resetter",
        claim=greedy_claim(store, "resetter"),
    )
    report = proc2.run()
    assert report.complete and report.events == 0
    after = store.get_ownership("0")
    assert after is not None and after.intent is None  # the old hub's intent is dropped
    assert store.list_checkpoints()["0"].sequence_number == -1
    hub.send_all(3)
    proc3 = make(hub, backend, owner="next", ingestor=sink)[0]
    assert proc3.run().partitions["0"].ranges_written == [(0, 2)]


def test_batch_key_names_the_hub_generation_only_after_a_recreation() -> None:
    from dagster_eventhub_ingest.ops.sinks.batch import batch_key

    assert batch_key("0", 0, 9) == batch_key("0", 0, 9, None) == "0-0-9"  # unchanged
    assert batch_key("0", 0, 9, 1_700_000_060_000) == "0-0-9-g1700000060000"
    assert batch_key("0", 0, 9, 1) != batch_key("0", 0, 9, 2) != batch_key("0", 0, 9)


def test_a_reset_after_recreation_keys_the_new_hubs_batches_apart_from_the_old_ones() -> None:
    """The old hub's batches 0-0-9 and 0-10-19 stay; the new hub's 0..9 and later events land
    under the generation's keys; a hub never re-created keeps plain keys throughout."""
    hub = FakeHub(1)
    hub.send_all(20)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, max_events_per_partition=10)
    assert proc.run().complete and proc.run().complete
    assert sorted(sink.sink) == [("0", 0, 9), ("0", 10, 19)]  # never re-created: plain keys
    old = sink.rows()
    hub.recreate()
    gen = hub.created_ms
    hub.send_all(10)
    resetter = Processor(
        config(on_checkpoint_ahead="reset_to_earliest", max_events_per_partition=10),
        store,
        hub,
        sink,
        owner_id="resetter",
        claim=greedy_claim(store, "resetter"),
    )
    assert resetter.run().complete
    assert sorted(sink.sink, key=str) == sorted(
        [("0", 0, 9), ("0", 10, 19), ("0", 0, 9, gen)], key=str
    )
    assert sink.sink[("0", 0, 9)] == [(s, f"0-{s}".encode()) for s in range(10)]  # old rows
    assert store.list_checkpoints()["0"].generation == gen
    assert store.list_sdk_checkpoints()["0"].generation == gen
    # Later runs (no reset) carry the generation forward.
    hub.send_all(5)
    later = make(hub, backend, owner="later", ingestor=sink)[0]
    assert later.run().partitions["0"].ranges_written == [(10, 14)]
    assert ("0", 10, 14, gen) in sink.sink and sink.sink[("0", 10, 19)] == [
        (s, f"0-{s}".encode()) for s in range(10, 20)
    ]
    # Every old event and every new one, each once (the bodies repeat: "0-<seq>").
    assert len(sink.rows()) == len(old) + 15


def test_a_pending_intent_is_replayed_under_the_generation_it_was_recorded_with() -> None:
    hub = FakeHub(1)
    hub.send_all(10)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend)
    assert proc.run().complete  # checkpoint 9, plain key 0-0-9
    hub.recreate()
    hub.send_all(20)
    gen = hub.created_ms
    for intent_gen in (gen, None):
        own = store.get_ownership("0")
        assert own is not None
        if intent_gen is not None:  # the reset, as a run with reset_to_earliest does it
            own = store.claim("0", "resetter", own)
            assert own is not None
            own = store.reset_checkpoint(
                own, -1, "-1", "re-created", hub_created_ms=gen, generation=gen
            )
            store.release(own)
            own = store.get_ownership("0")
            assert own is not None
        start = 0 if intent_gen is not None else 10
        crashed = store.claim("0", "crashed", own)
        assert crashed is not None
        # A crash after the intent (recorded with intent_gen, e.g. by an older version: None).
        store.release(store.record_intent(crashed, start, start + 9, generation=intent_gen))
        taker = make(
            hub, backend, owner=f"taker-{start}", max_events_per_partition=10, ingestor=sink
        )[0]
        report = taker.run()
        assert report.partitions["0"].replayed_intents == [(start, start + 9, "crashed")]
    # The replay used the intent's generation, not the partition's: 0-10-19 has none.
    assert sorted(sink.sink, key=str) == sorted(
        [("0", 0, 9), ("0", 0, 9, gen), ("0", 10, 19)], key=str
    )
    assert store.list_checkpoints()["0"].generation == gen


def test_run_timeout_and_checkpoint_policy_are_validated() -> None:
    with pytest.raises(ConfigurationError, match=r"run_timeout_seconds: -1 must be >= 0"):
        config(run_timeout_seconds=-1)
    with pytest.raises(ConfigurationError, match=r"on_checkpoint_ahead: 'skip' is not valid"):
        config(on_checkpoint_ahead="skip")


def test_status_flags_a_partition_ahead_of_the_hub() -> None:
    from dagster_eventhub_ingest.ops.status import partition_status

    hub = FakeHub(2)
    hub.send_all(10)
    backend = InMemoryBackend()
    proc, store, _ = make(hub, backend)
    proc.run()
    hub.recreate()
    hub.send("0", 4)
    rows = {r.partition_id: r for r in partition_status(store, hub, lease_expiry_seconds=5)}
    assert "earlier hub of the same name" in str(rows["0"].problem)
    assert rows["0"].lag_events == 4  # every retained event is still to be read
    assert rows["1"].problem is not None and rows["1"].lag_events == 0
    assert rows["0"].to_json()["problem"] == rows["0"].problem


def test_pending_intent_is_replayed_only_into_the_layout_it_was_written_with() -> None:
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    hub = FakeHub(1)
    hub.send_all(10)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="dead")

    sink.after_write = crash  # written, not checkpointed
    with pytest.raises(Crash):
        proc.run()
    own = store.get_ownership("0")
    assert own is not None and own.intent is not None
    assert own.intent.layout == "format=parquet partition_by=[]"
    sink.after_write = None
    moved = SinkSettings(path="/tmp/x", partition_by=("partition",))
    proc2 = Processor(
        config(sink=moved, lease_expiry_seconds=0.001),
        store,
        hub,
        sink,
        owner_id="next",
        claim=greedy_claim(store, "next", expiry=0.001),
    )
    before = store.get_ownership("0")
    with pytest.raises(ConfigurationError) as err:
        proc2.run()
    msg = str(err.value)
    assert "pending intent [0, 9] left by owner 'dead'" in msg
    assert "format=parquet partition_by=[]" in msg and "partition_by=[partition]" in msg
    assert store.get_ownership("0") == before  # refused before any claim
    proc3 = Processor(
        config(lease_expiry_seconds=0.001),
        store,
        hub,
        sink,
        owner_id="same",
        claim=greedy_claim(store, "same", expiry=0.001),
    )
    assert proc3.run().complete and sink.rows() == sink.expected()


def _parquet_dir(root, *levels: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    leaf = root.joinpath(*levels)
    leaf.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), leaf / "part-0.parquet")


def test_spark_format_sinks_check_their_layout_on_disk(tmp_path) -> None:
    from dagster_eventhub_ingest.ops.sinks.checks import check_sink_layout
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    out = tmp_path / "out"
    check_sink_layout(SinkSettings(path=str(out)))  # nothing there yet
    _parquet_dir(out, "eh_batch=0-0-9")
    (out / ".spark-staging-x").mkdir()  # hidden folders are not the layout
    check_sink_layout(SinkSettings(path=str(out)))
    with pytest.raises(ConfigurationError) as err:
        check_sink_layout(SinkSettings(path=str(out), partition_by=("partition",)))
    msg = str(err.value)
    assert "partitioned by ['eh_batch'] on disk" in msg
    assert "needs ['partition', 'eh_batch']" in msg and "Set partition_by back to []" in msg
    nested = tmp_path / "nested"
    _parquet_dir(nested, "partition=0", "eh_batch=0-0-9")
    check_sink_layout(SinkSettings(path=str(nested), partition_by=("partition",)))
    with pytest.raises(ConfigurationError, match=r"by \['partition', 'eh_batch'\] on disk"):
        check_sink_layout(SinkSettings(path=str(nested)))
    flat = tmp_path / "flat"
    _parquet_dir(flat)
    with pytest.raises(ConfigurationError, match=r"partitioned by \[\] on disk"):
        check_sink_layout(SinkSettings(path=str(flat)))


def _crashed_intent(hub: FakeHub, backend: InMemoryBackend, start: int, end: int) -> None:
    store = PartitionStore(backend, HUB)
    own = store.claim("0", "dead", store.get_ownership("0"))
    assert own is not None
    store.release(store.record_intent(own, start, end))


def test_skip_writes_the_retained_part_of_a_partly_expired_intent() -> None:
    hub = FakeHub(1)
    hub.send_all(100)
    backend = InMemoryBackend()
    _crashed_intent(hub, backend, 0, 99)  # crashed after the intent, before writing
    hub.expire("0", 40)  # 0..39 expired meanwhile; 40..99 are still readable
    proc, store, sink = make(hub, backend, owner="next", on_data_loss="skip")
    report = proc.run()
    r = report.partitions["0"]
    assert report.complete and r.skipped_ranges == [(0, 39)]
    assert (r.events, r.first_sequence_number, r.last_sequence_number) == (60, 40, 99)
    assert sink.calls == [{"0": (0, 99)}]  # under the intent's own key
    assert sink.rows() == [row for row in sink.expected() if row[1] >= 40]
    assert store.list_checkpoints()["0"].sequence_number == 99


def test_skip_keeps_a_partly_expired_intent_the_crashed_attempt_already_wrote() -> None:
    hub = FakeHub(1)
    hub.send_all(100)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="dead")

    sink.after_write = crash  # the whole batch 0..99 is in the sink, not checkpointed
    with pytest.raises(Crash):
        proc.run()
    sink.after_write = None
    hub.expire("0", 40)
    proc2 = Processor(
        config(on_data_loss="skip", lease_expiry_seconds=0.001),
        store,
        hub,
        sink,
        owner_id="next",
        claim=greedy_claim(store, "next", expiry=0.001),
    )
    report = proc2.run()
    assert report.complete and report.partitions["0"].skipped_ranges == []
    assert len(sink.calls) == 1  # nothing re-read: the batch was kept whole
    assert sink.rows() == sink.expected()  # 0..39 stay landed, once
    assert store.list_checkpoints()["0"].sequence_number == 99


def test_messages_do_not_repeat_words() -> None:
    from azure.core.exceptions import ServiceRequestError

    from dagster_eventhub_ingest.cli.config import parse_config
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
    from dagster_eventhub_ingest.resources.store.retry import RetryLog

    raw = {
        "eventhub": {"credential": {"connection_string_env": "EH"}, "eventhub_name": "h"},
        "store": {
            "credential": {"connection_string_env": "ST"},
            "container": "ccc",
            "create_container": "maybe",
        },
        "sink": {"path": "/tmp/x"},
    }
    with pytest.raises(ConfigurationError) as err:
        parse_config(raw, env={"EH": EH_CONN_LOCAL, "ST": ST_CONN_LOCAL})
    assert str(err.value).startswith("store.create_container: 'maybe'")
    from azure.storage.blob import ContainerClient

    backend = AzureBlobBackend(ContainerClient.from_connection_string(ST_CONN_LOCAL, "ccc"))
    msg = str(
        backend._translate(ServiceRequestError("refused"), "create container", "ccc", RetryLog())
    )
    assert "container container" not in msg and "create container 'ccc'" in msg
    backend.close()


EH_CONN_LOCAL = "Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=s"
ST_CONN_LOCAL = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
)


def test_leaving_with_the_store_down_takes_one_call_whatever_the_partition_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging
    import time

    from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
    from dagster_eventhub_ingest.resources.errors import StoreUnavailableError

    class DownBackend(InMemoryBackend):
        down = False
        calls = 0

        def put(self, name, metadata, *, etag):
            if self.down:
                self.calls += 1
                time.sleep(0.2)  # what the client's bounded retries cost
                raise StoreUnavailableError("Blob Storage did not answer (test)")
            return super().put(name, metadata, etag=etag)

    backend = DownBackend()
    store = PartitionStore(backend, HUB)
    keeper = LeaseKeeper(store, "me", interval=0.05)
    owns = [store.claim(str(p), "me", None) for p in range(16)]
    caplog.set_level(logging.WARNING, logger="dagster_eventhub_ingest.ops.run.lease")
    with keeper:
        keeper.hold([o for o in owns if o is not None])
        time.sleep(0.1)
        backend.down = True
        started = time.monotonic()
        keeper.release_all(leaving=True)
        took = time.monotonic() - started
    assert took < 1.5, took  # not 16 x the retries
    assert keeper.held == {}
    lines = [r for r in caplog.records if "not released" in r.getMessage()]
    assert len(lines) == 1 and "16 lease(s) not released" in lines[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # no traceback
