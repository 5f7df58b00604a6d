"""Pure logic of the ingestion run: in-memory store (Blob CAS semantics), fake hub and sink."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest

from dagster_eventhub_ingest.ops.balancing import STRATEGIES, claim_cycle, get_strategy
from dagster_eventhub_ingest.ops.run.fault import FaultPlan
from dagster_eventhub_ingest.ops.run.ingestor import Ingestor, import_read_modules
from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
from dagster_eventhub_ingest.ops.run.plan import (
    cycle_size,
    next_step,
    replay_ranges,
    snapshot_bound,
)
from dagster_eventhub_ingest.ops.run.processor import Processor
from dagster_eventhub_ingest.ops.run.settings import ReplaySettings
from dagster_eventhub_ingest.resources.errors import ConfigurationError, DataLossError, RangeError
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Intent, Ownership
from tests.support.cli import ROOT
from tests.support.raising import Crash, crash
from tests.support.run_fakes import (
    HUB,
    FakeHub,
    FakeIngestor,
    config,
    greedy_claim,
    info,
    make,
)


def real_claim(store: PartitionStore, owner: str, strategy: str, expiry: float):
    """The production claim cycle (dagster_eventhub_ingest.ops.balancing) with a no-op sleep for
    delay_race."""
    options = {"min_grab_time": expiry / 4} if strategy == "delay_race" else {}

    def claim(targets: Sequence[str]) -> dict[str, Ownership]:
        return claim_cycle(
            store,
            owner,
            get_strategy(strategy, **options),
            targets=targets,
            expiry=timedelta(seconds=expiry),
            sleep=lambda s: None,
        )

    return claim


# -- planning ----------------------------------------------------------------------------------
def test_bound_is_min_of_last_enqueued_and_checkpoint_plus_max() -> None:
    assert snapshot_bound(info(), None, 10, "fail").end == 9
    assert snapshot_bound(info(), Checkpoint("0", 49), 10, "fail").end == 59
    assert snapshot_bound(info(), Checkpoint("0", 95), 10, "fail").end == 99
    empty = snapshot_bound(info(last=-1), None, 10, "fail")
    assert empty.target is None  # nothing to read, nothing to checkpoint


def test_checkpoint_older_than_retention_fails_with_advice_or_skips() -> None:
    with pytest.raises(DataLossError) as err:
        snapshot_bound(info(begin=50), Checkpoint("0", 9), 100, "fail", hub="ns/hub[$Default]")
    msg = str(err.value)
    assert "events 10..49 expired" in msg and "on_data_loss: skip" in msg and "partition=0" in msg
    bound = snapshot_bound(info(begin=50), Checkpoint("0", 9), 100, "skip")
    assert (bound.start, bound.end, bound.gap) == (50, 99, (10, 49))


def test_pending_intent_is_replayed_exactly_whatever_the_bound() -> None:
    bound = snapshot_bound(info(), Checkpoint("0", 9), 5, "fail")  # this run: [10, 14]
    step = next_step(bound, Checkpoint("0", 9), Intent(10, 40, "dead"), 0, "fail")
    assert (step.kind, step.start, step.end) == ("replay", 10, 40)
    # An intent already covered by a checkpoint (e.g. written by an SDK processor) is cleared.
    assert next_step(bound, Checkpoint("0", 50), Intent(10, 40, "x"), 0, "fail").kind == "clear"
    # A partially expired intent cannot be replayed exactly.
    with pytest.raises(DataLossError, match="pending intent"):
        next_step(bound, Checkpoint("0", 9), Intent(10, 40, "dead"), 20, "fail")
    skip = next_step(bound, Checkpoint("0", 9), Intent(10, 40, "dead"), 20, "skip")
    # Only the expired head is skipped: the rest is replayed under the intent's own key.
    assert (skip.kind, skip.start, skip.end, skip.skipped) == ("replay", 10, 40, (10, 19))
    gone = next_step(bound, Checkpoint("0", 9), Intent(10, 40, "dead"), 41, "skip")
    assert (gone.kind, gone.end, gone.skipped) == ("skip", 40, (10, 40))


def test_range_starts_after_a_checkpoint_a_peer_moved() -> None:
    bound = snapshot_bound(info(), Checkpoint("0", 9), 50, "fail")  # [10, 59]
    step = next_step(bound, Checkpoint("0", 30), None, 0, "fail")
    assert (step.kind, step.start, step.end) == ("read", 31, 59)
    assert next_step(bound, Checkpoint("0", 59), None, 0, "fail").kind == "done"


def test_cycle_cap_cuts_a_read_but_never_a_pending_intent() -> None:
    bound = snapshot_bound(info(), Checkpoint("0", 9), 1000, "fail")  # [10, 99]
    step = next_step(bound, Checkpoint("0", 9), None, 0, "fail", max_events=25)
    assert (step.kind, step.start, step.end) == ("read", 10, 34)
    last = next_step(bound, Checkpoint("0", 89), None, 0, "fail", max_events=25)
    assert (last.start, last.end) == (90, 99)  # the bound still ends the run
    replay = next_step(bound, Checkpoint("0", 9), Intent(10, 80, "dead"), 0, "fail", 25)
    assert (replay.kind, replay.start, replay.end) == ("replay", 10, 80)  # replayed exactly


def test_a_rest_of_at_most_a_quarter_cycle_is_read_with_the_cycle_before_it() -> None:
    bound = snapshot_bound(info(), Checkpoint("0", 9), 1000, "fail")  # [10, 99]
    # 90 events, cycles of 80: a rest of 10 (<= 80 // 4) is not a Spark job of its own.
    whole = next_step(bound, Checkpoint("0", 9), None, 0, "fail", max_events=80)
    assert (whole.start, whole.end) == (10, 99)
    # Cycles of 70: a rest of 20 (> 70 // 4 = 17) is its own cycle.
    cut = next_step(bound, Checkpoint("0", 9), None, 0, "fail", max_events=70)
    assert (cut.start, cut.end) == (10, 79)
    # Cycles of 3 never take more (3 // 4 = 0), not even a rest of one event.
    four = snapshot_bound(info(), Checkpoint("0", 9), 4, "fail")  # [10, 13]
    small = next_step(four, Checkpoint("0", 9), None, 0, "fail", max_events=3)
    assert (small.start, small.end) == (10, 12)


def test_capped_cycles_checkpoint_in_batches_that_grow_while_the_run_is_alone() -> None:
    """Two cycles at the configured size (a peer that joins can claim its share between
    them), then 4x, then 16x: a lone run over a big backlog is not one Spark job per 20k."""
    hub = FakeHub(2)
    hub.send_all(1000)
    proc, _store, sink = make(hub, max_events_per_cycle=20)
    report = proc.run()
    assert report.complete and report.cycles == 6
    want = [(0, 19), (20, 39), (40, 119), (120, 439), (440, 759), (760, 999)]
    assert [c["0"] for c in sink.calls] == want
    assert report.partitions["0"].ranges_written == want
    assert sink.rows() == sink.expected()


def test_cycle_size_grows_only_while_alone() -> None:
    assert [cycle_size(20, n) for n in range(1, 7)] == [20, 20, 80, 320, 320, 320]
    assert [cycle_size(20, n, pending=4) for n in range(1, 4)] == [20, 20, 80]
    assert cycle_size(20, 0) == 20 and cycle_size(None, 9) is None
    # One pending partition, claimed by a lone run: nothing a peer could share, 64x at once.
    assert [cycle_size(20, n, pending=1) for n in range(1, 4)] == [1280, 1280, 1280]
    assert cycle_size(20, 0, pending=1) == 20 and cycle_size(None, 1, pending=1) is None


def test_a_lone_run_reads_its_only_pending_partition_in_grown_cycles_from_the_first() -> None:
    """A hot partition alone behind (the others caught up, or never behind) cannot be
    shared: its cycles are 64x the setting from the first. Partitions behind beside it keep
    the configured size until the run has been alone two cycles, and grow to 16x."""
    hub = FakeHub(1)
    hub.send_all(3000)
    proc, _store, sink = make(hub, max_events_per_cycle=20, max_events_per_partition=3000)
    report = proc.run()
    assert report.complete and report.cycles == 3
    assert [c["0"] for c in sink.calls] == [(0, 1279), (1280, 2559), (2560, 2999)]
    assert sink.rows() == sink.expected()

    hub = FakeHub(2)
    hub.send("0", 1000)
    hub.send("1", 30)
    proc, _store, sink = make(hub, max_events_per_cycle=20)
    report = proc.run()
    assert report.complete
    # Two cycles with partition 1 behind too (20 each), then partition 0 alone: 1280 at once.
    assert [sorted(c) for c in sink.calls[:3]] == [["0", "1"], ["0", "1"], ["0"]]
    assert [c["0"] for c in sink.calls[:3]] == [(0, 19), (20, 39), (40, 999)]
    assert sink.rows() == sink.expected()


@pytest.mark.parametrize("strategy", ["balanced", "greedy"])
def test_a_run_joining_mid_read_claims_a_share_of_the_same_partitions(strategy: str) -> None:
    """Two runs over the same 4 partitions: the second starts while the first reads its first
    batch; between batches the first releases and claims only its share, so both read."""
    hub = FakeHub(4)
    hub.send_all(60)
    backend = InMemoryBackend()
    sink = FakeIngestor(hub)
    b_polled = threading.Event()
    reports: dict[str, object] = {}
    errors: list[BaseException] = []

    def run(name: str, before=None) -> None:
        store = PartitionStore(backend, HUB)
        base = real_claim(store, name, strategy, 5.0)

        def claim(targets, _c=base):
            got = _c(targets)
            if name == "b":
                b_polled.set()
            return got

        cfg = config(max_events_per_cycle=10, join_grace_seconds=0)
        ing = _Shared(sink, before or (lambda _r: time.sleep(0.02)), lambda _r: None)
        proc = Processor(cfg, store, hub, ing, owner_id=name, claim=claim)
        try:
            reports[name] = proc.run()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    second = threading.Thread(target=run, args=("b",))

    def first_read(_ranges) -> None:
        if not second.is_alive() and not b_polled.is_set():
            second.start()  # b starts while a holds every partition and reads
            assert b_polled.wait(10)
        time.sleep(0.02)

    run("a", first_read)
    second.join(30)
    assert not errors
    a, b = reports["a"], reports["b"]
    assert a.complete and b.complete  # type: ignore[attr-defined]
    assert a.events > 0 and b.events > 0, (a.events, b.events)  # type: ignore[attr-defined]
    assert a.events + b.events == 240  # type: ignore[attr-defined]
    assert sink.rows() == sink.expected()


def test_replay_ranges_positions_and_errors() -> None:
    infos = {"0": info("0", 10, 99), "1": info("1", 0, -1)}
    cps = {"0": Checkpoint("0", 50)}
    ranges, skipped = replay_ranges(
        ["0", "1"],
        infos,
        cps,
        ranges=None,
        starting_position="earliest",
        ending_position="checkpoint",
        on_data_loss="fail",
    )
    assert ranges == {"0": (10, 50)} and skipped == {}
    with pytest.raises(RangeError, match="after the last enqueued event 99"):
        replay_ranges(
            ["0"],
            infos,
            cps,
            ranges={"0": (10, 200)},
            starting_position=None,
            ending_position=None,
            on_data_loss="fail",
        )
    with pytest.raises(DataLossError, match="replay start 0 expired"):
        replay_ranges(
            ["0"],
            infos,
            cps,
            ranges={"0": (0, 20)},
            starting_position=None,
            ending_position=None,
            on_data_loss="fail",
        )
    ranges, skipped = replay_ranges(
        ["0"],
        infos,
        cps,
        ranges={"0": (0, 20)},
        starting_position=None,
        ending_position=None,
        on_data_loss="skip",
    )
    assert ranges == {"0": (10, 20)} and skipped == {"0": (0, 9)}
    with pytest.raises(RangeError, match="'yesterday' is not valid"):
        replay_ranges(
            ["0"],
            infos,
            cps,
            ranges=None,
            starting_position="yesterday",
            ending_position=None,
            on_data_loss="fail",
        )


def test_config_rejects_bad_values_naming_them() -> None:
    with pytest.raises(ConfigurationError, match="max_events_per_partition: 0"):
        config(max_events_per_partition=0)
    with pytest.raises(ConfigurationError, match=r"on_data_loss: 'ignore'.*'fail', 'skip'"):
        config(on_data_loss="ignore")


def test_fault_plan_parses_probability_and_count() -> None:
    plan = FaultPlan("after_claim:2,mid_read:1.0")
    assert [plan.fires("after_claim") for _ in range(3)] == [False, True, False]
    assert plan.fires("mid_read") and not plan.fires("after_write")
    with pytest.raises(ConfigurationError, match="valid steps: after_claim"):
        FaultPlan("before_lunch:1")
    with pytest.raises(ConfigurationError, match="neither a probability"):
        FaultPlan("after_claim:often")


# -- the run loop ------------------------------------------------------------------------------
def test_one_run_lands_every_event_once_and_reports_it() -> None:
    hub = FakeHub(3)
    hub.send_all(25)
    proc, store, sink = make(hub)
    report = proc.run()
    assert report.complete and report.cycles >= 1
    assert sink.rows() == sink.expected()
    cps = store.list_checkpoints()
    assert {p: c.sequence_number for p, c in cps.items()} == {"0": 24, "1": 24, "2": 24}
    assert cps["0"].offset == "2400"  # the offset of the event the checkpoint names
    r = report.partitions["1"]
    assert (r.events, r.first_sequence_number, r.last_sequence_number) == (25, 0, 24)
    assert r.bytes == sum(len(f"1-{i}".encode()) for i in range(25))
    assert r.first_enqueued_time is not None and r.last_enqueued_time is not None
    assert (r.last_enqueued_time - r.first_enqueued_time).total_seconds() == 24
    assert (r.lag_events, r.lag_seconds, r.read_by, r.up_to_date) == (0, 0.0, ["run-a"], True)
    assert report.events == 75
    # Leases are released at the end; no intent left behind.
    assert all(o.is_released and o.intent is None for o in store.list_ownership().values())


def test_max_events_bounds_a_run_and_the_next_run_continues() -> None:
    hub = FakeHub(2)
    hub.send_all(30)
    backend = InMemoryBackend()
    proc, _store, sink = make(hub, backend, max_events_per_partition=10)
    first = proc.run()
    assert first.complete  # complete = reached this run's bound, not the end of the hub
    r = first.partitions["0"]
    assert (r.snapshot_end_sequence_number, r.checkpoint_sequence_number) == (9, 9)
    assert r.lag_events == 20 and r.lag_seconds is not None and r.lag_seconds > 0
    # The same sink.
    proc2, _, _sink2 = make(hub, backend, owner="run-b", max_events_per_partition=10, ingestor=sink)
    second = proc2.run()
    assert second.partitions["0"].first_sequence_number == 10
    assert second.partitions["0"].checkpoint_sequence_number == 19
    assert sink.rows() == sink.expected({"0": 19, "1": 19})


def test_partition_subset_and_unknown_partition() -> None:
    hub = FakeHub(3)
    hub.send_all(5)
    proc, store, _sink = make(hub)
    report = proc.run(["2"])
    assert list(report.partitions) == ["2"] and set(store.list_checkpoints()) == {"2"}
    with pytest.raises(
        RangeError, match=r"partition\(s\) 7 do not exist.*valid partition ids: 0, 1, 2"
    ):
        proc.run(["2", "7"])


def test_pending_intent_left_by_a_crash_is_replayed_exactly() -> None:
    hub = FakeHub(2)
    hub.send_all(20)
    now = [datetime(2024, 1, 1, tzinfo=timezone.utc)]
    backend = InMemoryBackend(clock=lambda: now[0])
    proc, store, sink = make(hub, backend, owner="dead", max_events_per_partition=8)

    sink.after_write = crash  # written, not checkpointed
    with pytest.raises(Crash):
        proc.run()
    intents = {p: o.intent for p, o in store.list_ownership().items()}
    assert intents == {"0": Intent(0, 7, "dead"), "1": Intent(0, 7, "dead")}
    hub.send_all(10)  # more events arrive; the replay must not widen the range
    proc2, _, _ = make(hub, backend, owner="next", max_events_per_partition=100, ingestor=sink)
    sink.after_write = None
    report = proc2.run()
    assert sink.calls[1] == {"0": (0, 7), "1": (0, 7)}  # exactly the recorded ranges
    assert report.complete
    assert sink.rows() == sink.expected()  # once each, nothing lost
    assert report.partitions["0"].checkpoint_sequence_number == 29


def test_takeover_waits_for_expiry_of_a_live_lease_then_replays() -> None:
    hub = FakeHub(1)
    hub.send_all(10)
    now = [datetime(2024, 1, 1, tzinfo=timezone.utc)]
    backend = InMemoryBackend(clock=lambda: now[0])
    store = PartitionStore(backend, HUB)
    own = store.claim("0", "zombie", None)
    assert own is not None
    store.record_intent(own, 0, 4)  # the zombie's lease is fresh: a peer must wait
    proc, _, sink = make(hub, backend, owner="next")
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += timedelta(seconds=2)  # store clock moves; the lease expires after 5 s

    proc.sleep = sleep
    report = proc.run()
    assert len(slept) >= 2 and report.complete
    assert sink.calls[0] == {"0": (0, 4)}  # the zombie's intent first, exactly
    assert sink.rows() == sink.expected()


def test_a_live_peer_that_finishes_is_credited_and_nothing_is_read_twice() -> None:
    hub = FakeHub(2)
    hub.send_all(10)
    backend = InMemoryBackend()
    store = PartitionStore(backend, HUB)
    peer = store.claim("1", "peer", None)
    assert peer is not None
    peer = store.record_intent(peer, 0, 9)
    proc, _, sink = make(hub, backend, owner="me")

    def sleep(_s: float) -> None:  # meanwhile the peer finishes its range
        if store.get_ownership("1").owner_id == "peer":  # type: ignore[union-attr]
            current = store.get_ownership("1")
            assert current is not None
            store.release(store.checkpoint(current, 9, "900"))

    proc.sleep = sleep
    report = proc.run()
    assert report.complete
    assert sink.calls == [{"0": (0, 9)}]
    assert report.partitions["1"].read_by == ["peer"] and report.partitions["1"].events == 0


def test_checkpoint_is_refused_after_the_lease_was_taken() -> None:
    hub = FakeHub(1)
    hub.send_all(10)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend, owner="slow", run_timeout_seconds=0.0)

    def stolen(_ranges):  # while "slow" reads, another owner takes the lease and replays
        current = store.get_ownership("0")
        taken = store.claim("0", "fast", current)
        assert taken is not None and taken.intent == Intent(0, 9, "slow")
        store.release(store.checkpoint(taken, 9, "900"))

    sink.before_write = stolen
    report = proc.run()
    assert store.list_checkpoints()["0"].sequence_number == 9
    assert report.partitions["0"].events == 0  # slow's write was not counted: fenced out
    assert sink.rows() == sink.expected()  # same range key: written once


def test_replay_writes_but_never_moves_the_checkpoint() -> None:
    hub = FakeHub(2)
    hub.send_all(10)
    proc, store, sink = make(hub)
    proc.run()
    before = store.list_checkpoints()
    hub.send_all(5)
    report = proc.replay(ReplaySettings(ranges={"1": (3, 12)}))
    assert report.replay and report.complete and list(report.partitions) == ["1"]
    assert sink.calls[-1] == {"1": (3, 12)} and report.partitions["1"].events == 10
    assert store.list_checkpoints() == before
    everything = proc.replay(ReplaySettings(starting_position="5", ending_position="latest"))
    assert sink.calls[-1] == {"0": (5, 14), "1": (5, 14)} and everything.events == 20
    assert store.list_checkpoints() == before


def test_data_loss_fails_by_default_and_skip_records_the_gap() -> None:
    hub = FakeHub(1)
    hub.send_all(10)
    backend = InMemoryBackend()
    proc, store, sink = make(hub, backend)
    proc.run()
    hub.send_all(30)
    hub.expire("0", 25)  # events 10..24 expire unread
    with pytest.raises(DataLossError, match=r"events 10\.\.24 expired"):
        proc.run()
    assert store.list_checkpoints()["0"].sequence_number == 9  # nothing moved
    proc2, _, _ = make(hub, backend, on_data_loss="skip", ingestor=sink)
    report = proc2.run()
    r = report.partitions["0"]
    assert report.complete and r.skipped_ranges == [(10, 24)]
    assert (r.first_sequence_number, r.checkpoint_sequence_number) == (25, 39)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_concurrent_runs_with_random_crashes_land_everything_exactly_once(strategy: str) -> None:
    """Three owners race over 6 partitions while events arrive; owners die at random steps."""
    hub = FakeHub(6)
    hub.send_all(15)
    now = [datetime(2024, 1, 1, tzinfo=timezone.utc)]
    clock_lock = threading.Lock()

    def clock() -> datetime:
        with clock_lock:
            now[0] += timedelta(milliseconds=50)  # every store call ages leases a bit
            return now[0]

    backend = InMemoryBackend(clock=clock)
    sink = FakeIngestor(hub)
    rng = random.Random(7)
    steps = ["claim", "before_write", "after_write"]
    errors: list[BaseException] = []
    crashes: list[str] = []

    def owner(n: int) -> None:
        for attempt in range(6):
            store = PartitionStore(backend, HUB)
            name = f"o{n}-{attempt}"
            cfg = config(max_events_per_partition=7, lease_expiry_seconds=1.0)
            where = rng.choice(steps) if attempt < 5 else None

            def maybe(step: str, _where=where) -> None:
                hub.send(str(rng.randrange(6)), rng.randrange(4))
                if step == _where and rng.random() < 0.5:
                    raise Crash()

            base_claim = real_claim(store, name, strategy, 1.0)

            def claim(targets, _c=base_claim):
                got = _c(targets)
                maybe("claim")
                return got

            ing = _Shared(sink, lambda _r: maybe("before_write"), lambda _r: maybe("after_write"))
            proc = Processor(cfg, store, hub, ing, owner_id=name, claim=claim, sleep=lambda s: None)
            try:
                proc.run()
            except Crash:
                crashes.append(name)
                continue
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=owner, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(crashes) >= 3
    final = Processor(
        config(max_events_per_partition=10_000),
        PartitionStore(backend, HUB),
        hub,
        sink,
        owner_id="final",
        claim=greedy_claim(PartitionStore(backend, HUB), "final", 1.0),
        sleep=lambda s: None,
    )
    assert final.run().complete
    assert sink.rows() == sink.expected()
    assert len(sink.rows()) == sum(len(e) for e in hub.events.values()) > 0


class _Shared(Ingestor):
    """One sink shared by several owners, with per-owner crash hooks."""

    def __init__(self, sink: FakeIngestor, before, after) -> None:
        self.sink, self.before, self.after = sink, before, after

    @property
    def output_location(self) -> str | None:
        return self.sink.output_location

    def ingest(self, ranges, **kw):
        self.before(ranges)
        out = self.sink.ingest(ranges, **kw)
        self.after(ranges)
        return out


def test_spark_planner_errors_are_unwrapped_into_package_errors() -> None:
    from dagster_eventhub_ingest.ops.run.ingestor import _unwrap

    wrapped = RuntimeError(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback...\n"
        "dagster_eventhub_ingest.resources.errors.DataLossError: sequence numbers [0, 4] of "
        "partition 0 expired\n  at ..."
    )
    err = _unwrap(wrapped)
    assert isinstance(err, DataLossError) and str(err) == (
        "sequence numbers [0, 4] of partition 0 expired"
    )
    other = ValueError("boom")
    assert _unwrap(other) is other


def test_lease_keeper_sends_lost_lease_warnings_to_the_run_log() -> None:
    """Lost leases reach ``warn`` (Dagster's context.log in a run), not only the module log."""
    from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
    from dagster_eventhub_ingest.resources.errors import OwnershipLostError
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    store = PartitionStore(InMemoryBackend(), HUB)
    own = store.claim("0", "run-a", None)
    assert own is not None
    lines: list[str] = []
    keeper = LeaseKeeper(store, "run-a", interval=60, warn=lines.append)
    keeper.hold([own])
    assert store.claim("0", "run-b", store.get_ownership("0")) is not None  # taken over
    with pytest.raises(OwnershipLostError):
        keeper.apply("0", store.renew)
    assert len(lines) == 1
    assert "lease lost" in lines[0] and "partition=0" in lines[0] and "owner=run-a" in lines[0]


def test_a_failing_owner_heartbeat_is_said_in_the_run_log() -> None:
    """Peers judge liveness by the heartbeat: its failures reach ``warn`` too, naming the hub,
    the partitions held and the owner, never the store's secret."""
    import time as _time

    from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
    from dagster_eventhub_ingest.resources.errors import StoreUnavailableError
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    store = PartitionStore(InMemoryBackend(), HUB)
    own = store.claim("0", "run-a", None)
    assert own is not None
    lines: list[str] = []

    def heartbeat() -> None:
        raise StoreUnavailableError("Blob Storage did not answer (AccountKey=c2VjcmV0)")

    keeper = LeaseKeeper(store, "run-a", interval=0.02, on_tick=heartbeat, warn=lines.append)
    keeper.hold([own])  # before the renewer's first tick, which names what is held
    keeper.start()
    try:
        deadline = _time.monotonic() + 10
        while not lines and _time.monotonic() < deadline:
            _time.sleep(0.01)
    finally:
        keeper.stop()
    assert lines, "no heartbeat warning reached the run log"
    assert lines[0].startswith(
        f"owner heartbeat failed hub={HUB.describe()} partitions=['0'] owner=run-a: "
        "StoreUnavailableError: "
    )
    assert "c2VjcmV0" not in lines[0]


def test_progress_at_snapshot_during_the_read_and_after_each_checkpoint() -> None:
    """The progress hook sees the plan, ticks while the (slow) read runs, then the landing."""
    import time as _time

    from dagster_eventhub_ingest.ops.run.progress import RunProgress

    hub = FakeHub(partitions=2)
    hub.send_all(30)
    backend = InMemoryBackend()
    store = PartitionStore(backend, HUB)

    class SlowIngestor(FakeIngestor):
        def ingest(self, ranges, **kw):  # type: ignore[no-untyped-def]
            _time.sleep(0.35)
            return super().ingest(ranges, **kw)

    seen: list[tuple[str, int, int, str]] = []

    def on_progress(p: RunProgress) -> None:
        seen.append((p.phase, p.landed_events, p.target_events, p.line()))

    cfg = config()
    logged: list[str] = []

    class Log:
        def info(self, msg: str) -> None:
            logged.append(msg)

        def warning(self, msg: str) -> None:
            logged.append(msg)

    proc = Processor(
        cfg,
        store,
        hub,
        SlowIngestor(hub),
        owner_id="run-a",
        claim=greedy_claim(store, "run-a", cfg.lease_expiry_seconds),
        log=Log(),
        on_progress=on_progress,
        progress_interval=0.1,
    )
    report = proc.run()
    assert report.complete
    phases = [s[0] for s in seen]
    assert phases[0] == "snapshot" and seen[0][1:3] == (0, 60)
    assert phases.count("reading") >= 3  # the first, then ticks every 0.1 s of a 0.35 s read
    assert "checkpointed" in phases and phases[-1] == "finished"
    assert seen[-1][1:3] == (60, 60)
    ticks = [m for m in logged if m.startswith("progress ")]
    # Each partition of the run's share, read and landed, every tick.
    assert ticks and (
        "partition 0 read 0/30, landed 0/30; partition 1 read 0/30, landed 0/30" in ticks[0]
    )
    assert "0/60 events landed of this run's share (partitions 0, 1)" in ticks[0]


def test_a_run_with_nothing_to_read_claims_nothing_and_never_looks_at_the_sink() -> None:
    hub = FakeHub(3)
    hub.send_all(5)
    backend = InMemoryBackend()
    first, _, sink = make(hub, backend)
    assert first.run().complete
    looks: list[str] = []
    claims: list[Sequence[str]] = []
    second, store, idle = make(hub, backend, owner="run-b")
    second.preflight = lambda: looks.append("sink")
    claim = second.claim
    second.claim = lambda targets: claims.append(targets) or claim(targets)
    before = store.list_ownership()
    report = second.run()
    assert report.complete and report.cycles == 0 and report.events == 0
    assert (looks, claims, idle.rows()) == ([], [], [])
    assert store.list_ownership() == before  # no lease taken, none released
    assert {p: r.lag_events for p, r in report.partitions.items()} == {"0": 0, "1": 0, "2": 0}
    assert set(second.clock.seconds) == {"snapshot", "report"}
    # With one new event the same run looks at the sink before its first claim, then reads.
    hub.send("1", 1)
    third, _, _ = make(hub, backend, owner="run-c", ingestor=sink)
    third.preflight = lambda: looks.append("sink")
    report = third.run()
    assert looks == ["sink"] and report.partitions["1"].events == 1
    assert {"snapshot", "claims", "planning", "read_write", "checkpoint", "report"} <= set(
        third.clock.seconds
    )


def test_phase_clock_counts_a_nested_phase_once() -> None:
    import time

    from dagster_eventhub_ingest.ops.run.progress import PhaseClock, phase

    clock = PhaseClock()
    t0 = time.perf_counter()
    with clock.phase("read_write"):
        time.sleep(0.05)
        with phase("spark_start"):  # the clock of the phase around it
            time.sleep(0.1)
    outer = time.perf_counter() - t0
    with phase("verify"):  # no clock open: not timed, no error
        pass
    d = clock.as_dict()
    assert list(d) == ["spark_start", "read_write"]  # PHASES order
    assert d["spark_start"]["seconds"] >= 0.1
    assert d["read_write"]["seconds"] >= 0.05
    # Exclusive: the two add up to the outer block's time, not more.
    assert d["read_write"]["seconds"] + d["spark_start"]["seconds"] <= outer + 0.002


def test_a_session_started_between_claims_and_intents_is_timed_as_spark_start() -> None:
    """The ingestor's ``prepare`` (where a lazily started session starts) runs under the run's
    clock: the report's phases show the session start, not a gap none of them covers."""
    from dagster_eventhub_ingest.ops.run.progress import phase

    class Starting(FakeIngestor):
        started = 0

        def prepare(self) -> None:
            if not self.started:  # like SparkIngestor.spark: only the first time
                with phase("spark_start"):
                    time.sleep(0.2)
            self.started += 1

    hub = FakeHub(2)
    hub.send_all(30)
    backend = InMemoryBackend()
    store = PartitionStore(backend, HUB)
    ingestor = Starting(hub)
    cfg = config(max_events_per_cycle=10)
    proc = Processor(cfg, store, hub, ingestor, owner_id="a", claim=greedy_claim(store, "a", 5.0))
    assert proc.run().complete
    assert ingestor.started == 3  # once per cycle, the session started at the first
    phases = proc.clock.as_dict()
    assert 0.2 <= phases["spark_start"]["seconds"] < 0.5
    assert list(phases).index("spark_start") < list(phases).index("read_write")


def test_the_run_gives_the_ingestor_its_own_look_at_the_partitions_it_reads() -> None:
    """The source checks each cycle's ranges against the run's look at the hub, not a new one
    (a connection from Spark's planner process); a range that expired since is still found."""
    hub = FakeHub(2)
    hub.send_all(30)
    proc, _store, sink = make(hub, max_events_per_cycle=10)
    assert proc.run().complete
    assert len(sink.infos_given) == len(sink.calls) == 3
    for ranges, infos in zip(sink.calls, sink.infos_given, strict=True):
        assert set(infos) == set(ranges)  # exactly the partitions read, each with its bounds
        assert all(i.last_enqueued_sequence_number == 29 for i in infos.values())
        assert all(i.begin_sequence_number == 0 for i in infos.values())


def test_a_run_with_something_to_read_starts_its_session_before_it_claims() -> None:
    """The session starts (on a thread) as soon as the snapshot shows work, so the JVM's start
    overlaps the join grace and the claims; a run with nothing to read never starts it."""
    seen: list[str] = []

    class Early(FakeIngestor):
        def start_early(self) -> None:
            seen.append("start")

    hub = FakeHub(2)
    hub.send_all(10)
    store = PartitionStore(InMemoryBackend(), HUB)
    claim = greedy_claim(store, "a", 5.0)

    def recorded_claim(targets: Sequence[str]):
        seen.append("claim")
        return claim(targets)

    proc = Processor(config(), store, hub, Early(hub), owner_id="a", claim=recorded_claim)
    assert proc.run().complete
    assert seen[0] == "start" and seen.count("start") == 1 and "claim" in seen
    seen.clear()
    idle = Processor(config(), store, hub, Early(hub), owner_id="b", claim=recorded_claim)
    assert idle.run().complete and seen == []


def _spark_ingestor(factory):
    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor

    settings = EventHubSettings(
        eventhub_name="hub",
        connection_string="Endpoint=sb://ns.example/;SharedAccessKeyName=k;SharedAccessKey=s",
    )
    return SparkIngestor(None, settings, SinkSettings(path="/tmp/x"), spark_factory=factory)


def test_an_early_session_start_is_waited_for_at_first_use_and_timed_as_spark_start() -> None:
    from dagster_eventhub_ingest.ops.run.progress import PhaseClock

    class _Jvm:
        def __init__(self) -> None:
            self.active: list[tuple[object, str]] = []

        @property
        def SparkSession(self) -> _Jvm:
            return self

        def setActiveSession(self, jsession: object) -> None:
            self.active.append((jsession, threading.current_thread().name))

    class _Session:  # a classic session's JVM handles, as make_active uses them
        _jvm = _Jvm()
        _jsparkSession = object()

    session = _Session()
    threads: list[str] = []

    def factory():
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return session

    ingestor = _spark_ingestor(factory)
    import_read_modules()  # what start_early imports first, in this thread: not timed here
    t0 = time.perf_counter()
    ingestor.start_early()
    ingestor.start_early()  # once
    assert time.perf_counter() - t0 < 0.2  # not waited for here
    clock = PhaseClock()
    with clock.active():
        assert ingestor.spark is session
        assert ingestor.spark is session
    assert threads == ["ehingest-spark-start"]
    assert 0.1 <= clock.seconds["spark_start"] < 0.6
    # Made active in the thread that uses it (a classic session is active where it was made).
    assert (session._jsparkSession, threading.current_thread().name) in session._jvm.active


def test_the_session_start_thread_finds_spark_s_modules_imported_by_the_run_s_thread() -> None:
    """A run imports pyspark only once it reads (start_early), and then before the session's
    thread starts: two threads importing pyspark's cyclic modules at once can each get the
    other's half-initialised module. In a fresh interpreter, where nothing imported them yet."""
    code = textwrap.dedent(
        """
        import sys
        from dagster_eventhub_ingest.ops.run.ingestor import READ_MODULES, SparkIngestor
        from dagster_eventhub_ingest.resources.settings import EventHubSettings
        from dagster_eventhub_ingest.resources.sink import SinkSettings

        assert "pyspark" not in sys.modules, "imported before the run knows it reads"
        missing = []

        def factory():
            missing.append([m for m in READ_MODULES if m not in sys.modules])
            raise RuntimeError("no session in this test")

        settings = EventHubSettings(
            eventhub_name="hub",
            connection_string="Endpoint=sb://ns.example/;SharedAccessKeyName=k;SharedAccessKey=s",
        )
        ingestor = SparkIngestor(None, settings, SinkSettings(path="/tmp/x"), spark_factory=factory)
        ingestor.start_early()
        ingestor._early.join(60)
        print(missing)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[[]]", done.stdout


def test_a_run_s_end_cancels_the_warm_up_and_waits_for_it_before_the_session_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that ends while start_early's warm-up job still runs (a configuration error found
    with the session) cancels that job by its tag and waits for the thread: its caller then
    stops the JVM after the job, not under it (py4j would log the broken call as an error)."""
    import dagster_eventhub_ingest.ops.run.warm_up as warm_up

    class _Context:  # a classic session's job tags, thread by thread as Spark keeps them
        def __init__(self) -> None:
            self.tags: set[str] = set()
            self.cancelled: list[str] = []
            self.cancel = threading.Event()

        def addJobTag(self, tag: str) -> None:
            self.tags.add(tag)

        def removeJobTag(self, tag: str) -> None:
            self.tags.discard(tag)

        def cancelJobsWithTag(self, tag: str) -> None:
            if tag in self.tags:
                self.cancelled.append(tag)
                self.cancel.set()

    class _Session:
        sparkContext = _Context()

    session = _Session()
    warming = threading.Event()

    def warm(spark: object, *, with_planners: bool) -> None:
        warming.set()
        assert spark is session and spark.sparkContext.cancel.wait(30)  # a job until cancelled

    monkeypatch.setattr(warm_up, "warm_session", warm)
    ingestor = _spark_ingestor(lambda: session)
    ingestor.start_early()
    assert warming.wait(30)
    t0 = time.perf_counter()
    ingestor.wind_down()
    assert time.perf_counter() - t0 < 5  # cancelled, not waited out
    assert ingestor._early is not None and not ingestor._early.is_alive()
    assert len(session.sparkContext.cancelled) == 1 and not session.sparkContext.tags
    ingestor.wind_down()  # again: nothing left to end


def test_an_early_session_start_that_fails_raises_where_the_session_is_first_used() -> None:
    def factory():
        raise RuntimeError("Java gateway process exited before sending its port number")

    ingestor = _spark_ingestor(factory)
    ingestor.start_early()
    with pytest.raises(RuntimeError, match="Java gateway"):
        ingestor.prepare()


# -- the fence before a write ------------------------------------------------------------------
def test_a_lease_lost_before_the_write_is_not_written_on() -> None:
    """A replayed intent needs no store write of its own: a lease taken meanwhile (the renewer
    saw it, or nobody did) must still stop the write. The partition is written again only
    under a new claim, once the peer's lease expired."""
    hub = FakeHub(2)
    hub.send_all(10)
    now = [datetime(2024, 1, 1, tzinfo=timezone.utc)]
    backend = InMemoryBackend(clock=lambda: now[0])
    store = PartitionStore(backend, HUB)
    for pid in ("0", "1"):
        own = store.claim(pid, "crashed", None)
        assert own is not None
        store.release(store.record_intent(own, 0, 9))
    proc, _, sink = make(hub, backend, owner="slow")
    taken = []

    def prepare() -> None:  # between the claims and the write: a peer takes partition 1
        own = store.get_ownership("1")
        if not taken and own is not None and own.owner_id == "slow":
            taken.append(store.claim("1", "peer", own))

    def sleep(seconds: float) -> None:
        now[0] += timedelta(seconds=2)  # the peer stalls; its lease expires after 5 s

    sink.prepare = prepare  # type: ignore[attr-defined]
    proc.sleep = sleep
    report = proc.run()
    assert taken and taken[0] is not None
    assert sink.calls == [{"0": (0, 9)}, {"1": (0, 9)}]  # 1 only after a new claim
    assert report.complete and sink.rows() == sink.expected()
    final = store.get_ownership("1")
    assert final is not None and final.epoch > taken[0].epoch


def test_the_fence_renews_only_leases_not_proven_lately() -> None:
    now = [datetime(2024, 1, 1, tzinfo=timezone.utc)]
    backend = InMemoryBackend(clock=lambda: now[0])
    store = PartitionStore(backend, HUB)
    keeper = LeaseKeeper(store, "me", interval=100)
    owns = [store.claim(p, "me", None) for p in ("0", "1", "2")]
    keeper.hold([o for o in owns if o is not None])
    keeper.apply("0", lambda o: store.record_intent(o, 0, 9))  # proven just now
    stolen = store.claim("2", "peer", store.get_ownership("2"))
    assert stolen is not None
    etags = {p: store.get_ownership(p).etag for p in ("0", "1")}  # type: ignore[union-attr]
    assert keeper.confirm(["0", "1", "2"], within=10) == {"0", "1"}
    after = {p: store.get_ownership(p).etag for p in ("0", "1")}  # type: ignore[union-attr]
    assert after["0"] == etags["0"]  # no call: proven by the intent
    assert after["1"] != etags["1"]  # renewed: its claim was not a proof the keeper took
    assert "2" in keeper.lost and "2" not in keeper.held
