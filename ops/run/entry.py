"""The entry point of a run: :func:`run_ingestion` builds the run's parts and runs the processor.

Before anything is claimed it checks what needs no claim (the hub and consumer group exist, the
sink is reachable by the executors and its format known to the session), takes the owner id (one
live process per owner id), and joins the owners; the :class:`Processor
<dagster_eventhub_ingest.ops.run.processor.Processor>` then claims, reads, writes and
checkpoints. The run works on a thread of its own, so a stop request winds it down cleanly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.ops.run.cancel import Cancellation
from dagster_eventhub_ingest.ops.run.fault import pause_point
from dagster_eventhub_ingest.ops.run.log import TeeLog
from dagster_eventhub_ingest.ops.run.processor import Processor
from dagster_eventhub_ingest.ops.run.progress import PhaseClock, ProgressFn, ReadCounter
from dagster_eventhub_ingest.ops.run.report import RunReport
from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Ownership

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dagster_eventhub_ingest.ops.balancing.base import RunLog
    from dagster_eventhub_ingest.ops.balancing.liveness import Heartbeat, OwnerInstance
    from dagster_eventhub_ingest.ops.run.hub import HubClient
    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor

logger = logging.getLogger(__name__)

__all__ = ["DefaultClaim", "run_ingestion"]


class DefaultClaim:
    """The claim cycle of ``dagster_eventhub_ingest.ops.balancing`` with this run's strategy and
    expiry, as the :class:`~dagster_eventhub_ingest.ops.run.processor.Processor` calls it.

    ``joined_at``: when (``time.monotonic``) the run wrote its heartbeat, None before it has;
    the first claim then waits only what is left of ``join_grace_seconds``, so the hub
    snapshot taken meanwhile is not added to the grace. ``run_log``: where takeovers and
    dropped claims also go (the run's event log). ``cancel``: ends the grace's wait early, and
    then nothing is claimed.
    """

    def __init__(
        self,
        config: IngestSettings,
        store: PartitionStore,
        owner_id: str,
        is_owner_dead: Callable[[str], bool] | None,
        joined_at: Callable[[], float | None] = lambda: None,
        expected_peers: Callable[[], Collection[str]] | None = None,
        run_log: RunLog | None = None,
        cancel: Cancellation | None = None,
    ) -> None:
        from dagster_eventhub_ingest.ops.balancing import get_strategy

        self.config = config
        self.store = store
        self.owner_id = owner_id
        self.is_owner_dead = is_owner_dead
        self.joined_at = joined_at
        self.expected_peers = expected_peers
        self.run_log = run_log
        self.cancel = cancel
        # Raises ConfigurationError naming the valid strategies.
        self.strategy = get_strategy(config.strategy, **dict(config.strategy_options))
        self.expiry = timedelta(seconds=config.lease_expiry_seconds)
        self._first = True

    def __call__(self, targets: Sequence[str]) -> Mapping[str, Ownership]:
        from dagster_eventhub_ingest.ops.balancing import claim_cycle

        joined = self.joined_at()
        if self._first and joined is not None:
            left = self.config.join_grace_seconds - (time.monotonic() - joined)
            if left > 0:
                if self.cancel is None:
                    time.sleep(left)
                else:
                    self.cancel.wait(left)
        self._first = False
        if self.cancel is not None:
            self.cancel.check("before claiming")
        return claim_cycle(
            self.store,
            self.owner_id,
            self.strategy,
            targets=list(targets),
            expiry=self.expiry,
            is_owner_dead=self.is_owner_dead,
            join_grace=self.config.join_grace_seconds,
            expected_peers=self.expected_peers,
            run_log=self.run_log,
        )


@dataclass
class _Membership:
    """This run among the owners: when it joined (its first heartbeat, ``time.monotonic``) and
    its latest heartbeat."""

    joined_at: float | None = None
    heartbeat: Heartbeat | None = None


def run_ingestion(
    config: IngestSettings,
    spark: SparkSession | None,
    *,
    owner_id: str,
    partition_ids: Sequence[str] | None = None,
    replay: ReplaySettings | None = None,
    is_owner_dead: Callable[[str], bool] | None = None,
    log: Any = None,
    spark_factory: Callable[[], SparkSession] | None = None,
    on_progress: ProgressFn | None = None,
    progress_interval: float = 10.0,
    attempt: int | None = None,
    phases: PhaseClock | None = None,
    expected_peers: Callable[[], Collection[str]] | None = None,
    cancel: Cancellation | None = None,
) -> RunReport:
    """Bring ``partition_ids`` (default: all) up to their snapshot bound, exactly once.

    Args:
        config: hub, store, sink and run settings.
        spark: the session to read and write with; None starts a local one only if there is
            something to read.
        owner_id: this run's owner id (the Dagster run id; a host/pid for the CLI).
        partition_ids: target partitions (default: every partition of the hub).
        replay: re-write a range into the sink without moving checkpoints.
        is_owner_dead: tells whether another owner id is known dead (e.g. its Dagster run
            failed), so its partitions are taken over without waiting for lease expiry.
        log: Dagster's ``context.log`` (progress lines also go to this module's logger).
        spark_factory: starts a session when ``spark`` is None and there is something to read
            (default: ``dagster_eventhub_ingest.resources.spark.session.local_spark_session``).
        on_progress / progress_interval: live progress
        (:mod:`dagster_eventhub_ingest.ops.run.progress`); during a read
            it is also written to ``log`` every ``progress_interval`` seconds.
        attempt: the orchestrator's attempt number when retries keep the owner id and start
            only after the previous attempt ended (Dagster step retries): a lower attempt with
            the same owner id is then taken over at once.
        phases: the clock the run's phases are timed on (the CLI passes one holding its
            start-up); the report's ``phases`` has them.
        expected_peers: owner ids an orchestrator knows are starting over the same
            partitions (Dagster: runs launched, not yet heartbeating); they count as peers
            when this run claims, so it leaves them their share
            (dagster_eventhub_ingest.ops.balancing.cycle).
        cancel: a request to stop (:class:`dagster_eventhub_ingest.ops.run.cancel.Cancellation`;
            the CLI's signal handlers and Airflow's ``on_kill`` make one). The run works on a
            thread of its own and waits for it here, so an exception the host raises in this
            thread (Dagster's Terminate: ``DagsterExecutionInterruptedError``; a
            ``KeyboardInterrupt``) stops it the same way and is raised again once it wound
            down. Stopped, the run reads nothing further (its Spark jobs are interrupted),
            releases its leases with their pending intents, and raises ``RunCancelledError``.
            The session it was given (or the caller's factory started) is the caller's to stop
            (``dagster_eventhub_ingest.resources.spark.owned.OwnedSession``).

    Returns:
        The run report; ``complete`` is True iff every target reached its bound.

    Raises:
        DataLossError: a checkpoint is older than retention (``on_data_loss: fail``).
        RangeError: an unknown partition id or an impossible replay range.
        ConfigurationError: bad settings, a hub or consumer group that does not exist.
        DuplicateOwnerError: another live process runs with this owner id (nothing read).
        CheckpointAheadError: a checkpoint the hub cannot have produced (re-created hub).
        EventHubUnavailableError / StoreUnavailableError: a service is unreachable.
        SinkError: the sink cannot be written.
        RunCancelledError: the run was asked to stop (``cancel``), and stopped cleanly.
    """
    stop = cancel if cancel is not None else Cancellation()
    return stop.run(
        lambda: _run(
            config,
            spark,
            owner_id=owner_id,
            partition_ids=partition_ids,
            replay=replay,
            is_owner_dead=is_owner_dead,
            log=log,
            spark_factory=spark_factory,
            on_progress=on_progress,
            progress_interval=progress_interval,
            attempt=attempt,
            phases=phases,
            expected_peers=expected_peers,
            cancel=stop,
        )
    )


def _run(
    config: IngestSettings,
    spark: SparkSession | None,
    *,
    owner_id: str,
    partition_ids: Sequence[str] | None,
    replay: ReplaySettings | None,
    is_owner_dead: Callable[[str], bool] | None,
    log: Any,
    spark_factory: Callable[[], SparkSession] | None,
    on_progress: ProgressFn | None,
    progress_interval: float,
    attempt: int | None,
    phases: PhaseClock | None,
    expected_peers: Callable[[], Collection[str]] | None,
    cancel: Cancellation,
) -> RunReport:
    """:func:`run_ingestion`'s work, on the run's own thread."""
    if spark is not None:
        # A classic session is active per thread; Spark finds Python data sources (the Delta
        # writer) through the calling thread's active session.
        from dagster_eventhub_ingest.resources.spark.session import make_active

        make_active(spark)
    clock = phases if phases is not None else PhaseClock()
    with clock.phase("management"):
        hub, store, ingestor, me = _run_parts(config, spark, spark_factory, attempt, owner_id)
    cancel.on_cancel(ingestor.interrupt)
    try:

        def preflight() -> None:
            from dagster_eventhub_ingest.ops.sinks.checks import check_sink_layout
            from dagster_eventhub_ingest.ops.sinks.source import check_sink_source

            check_sink_layout(config.sink)  # a changed partition_by would land replays twice
            # Another source's sink, or one shared without saying so: refused before any claim.
            check_sink_source(config.sink, store.hub, lambda: ingestor.spark)

        common: dict[str, Any] = {
            "owner_id": owner_id,
            "log": log,
            "on_progress": on_progress,
            "progress_interval": progress_interval,
            "preflight": preflight,
            "clock": clock,
            "cancel": cancel,
        }
        if replay is not None:
            processor = Processor(config, store, hub, ingestor, claim=lambda targets: {}, **common)
            report = processor.replay(replay, partition_ids)
            report.phases = clock.as_dict()
            return report
        from dagster_eventhub_ingest.ops.balancing import delete_heartbeat
        from dagster_eventhub_ingest.ops.balancing.liveness import take_owner_id, write_heartbeat

        member = _Membership()
        # Takeovers, dropped claims and owner-id takeovers reach the run's event log too.
        run_log = TeeLog(log).extra_only()
        claim = DefaultClaim(
            config,
            store,
            owner_id,
            is_owner_dead,
            joined_at=lambda: member.joined_at,
            expected_peers=expected_peers,
            run_log=run_log,
            cancel=cancel,
        )

        def heartbeat() -> None:
            # Every renewal tick: a live process is never silent for the expiry, so another one
            # started with its owner id sees it write and is refused (take_owner_id).
            member.heartbeat = write_heartbeat(store, owner_id, member.heartbeat)

        processor = Processor(
            config, store, hub, ingestor, claim=claim, heartbeat=heartbeat, **common
        )
        pause_point("before_join")
        me.start()
        try:
            # One live process per owner id, before anything is claimed or read; this heartbeat
            # also announces the owner, so the join grace runs while the hub is snapshotted.
            with clock.phase("management"):
                member.heartbeat = take_owner_id(
                    store,
                    owner_id,
                    me,
                    expiry=timedelta(seconds=config.lease_expiry_seconds),
                    run_log=run_log,
                )
        except BaseException:
            me.stop()
            raise
        member.joined_at = time.monotonic()
        try:
            report = processor.run(partition_ids)
        finally:
            me.stop()
            # Graceful leave: peers stop counting this owner at once (leases were released).
            try:
                with clock.phase("checkpoint"):
                    delete_heartbeat(store, owner_id)
            except Exception:  # a leftover heartbeat only ages out
                logger.warning(
                    "could not delete heartbeat owner=%s (it ages out)",
                    owner_id,
                    exc_info=logger.isEnabledFor(logging.INFO),
                )
        report.phases = clock.as_dict()
        # Where the run's time went, in the orchestrator's run log too (Dagster's event log).
        TeeLog(log).info(f"run phases owner={owner_id}: {clock.line()}")
        return report
    finally:
        # Before the caller stops the session: the warm-up's jobs end first.
        ingestor.wind_down()


def _import_store_client() -> None:
    try:
        import dagster_eventhub_ingest.resources.store.azure_blob  # noqa: F401
    except Exception:  # imported again (and failing visibly) where it is used
        logger.debug(
            "pre-import of dagster_eventhub_ingest.resources.store.azure_blob failed", exc_info=True
        )


def _run_parts(
    config: IngestSettings,
    spark: SparkSession | None,
    spark_factory: Callable[[], SparkSession] | None,
    attempt: int | None,
    owner_id: str,
) -> tuple[HubClient, PartitionStore, SparkIngestor, OwnerInstance]:
    """The hub client, store, ingestor and owner instance of a run, after the checks that need
    no claim.

    Before anything is claimed: a local sink path that a cluster's executors cannot share, a
    hub or consumer group that does not exist (a ConfigurationError within seconds, before this
    owner writes anything to the store), a sink format the session does not have.
    """
    from dagster_eventhub_ingest.ops.balancing.liveness import OwnerInstance
    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor
    from dagster_eventhub_ingest.ops.sinks.checks import check_sink_format
    from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient

    if spark is not None:
        from dagster_eventhub_ingest.ops.sinks.checks import check_sink_for_session

        check_sink_for_session(config.sink, spark)
    # The storage SDK's import (~0.3 s of CPU) overlaps the hub's first management call,
    # which mostly waits on the network; nothing is written to the store before it answered.
    importer = threading.Thread(target=_import_store_client, name="import-store", daemon=True)
    importer.start()
    hub = EventHubClient(config.eventhub)
    try:
        hub.partition_ids()
        hub.check_consumer_group()
    finally:
        importer.join()
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend

    me = OwnerInstance.current(attempt)
    store = PartitionStore(
        AzureBlobBackend.from_settings(config.store),
        config.eventhub.hub_ref(),
        instance=me.token(),
        lease_expiry=timedelta(seconds=config.lease_expiry_seconds),
    )
    ingestor = SparkIngestor(
        spark,
        config.eventhub,
        config.sink,
        receive_timeout_seconds=config.receive_timeout_seconds,
        prefetch=config.prefetch,
        max_readers_per_partition=config.max_readers_per_partition,
        spark_factory=spark_factory,
        read_counter=(
            ReadCounter(
                config.store, store.backend, store.hub, owner_id, config.read_progress_seconds
            )
            if config.read_progress_seconds > 0
            else None
        ),
    )
    # A data source Spark does not have would fail at the first write, after the claims: ask
    # the session now (it starts here only for a format that needs the question).
    check_sink_format(config.sink, lambda: ingestor.spark)
    return hub, store, ingestor, me
