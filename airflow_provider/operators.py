"""``EventHubIngestOperator``: one ingestion run (the same ops API as Dagster and the CLI)."""

from __future__ import annotations

import hashlib
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from dagster_eventhub_ingest.airflow_provider._connections import (
    DEFAULT_EVENTHUB_CONN_ID,
    DEFAULT_SINK_CONN_ID,
    DEFAULT_STORE_CONN_ID,
    check_run_options,
    partition_list,
)
from dagster_eventhub_ingest.ops.run.report import RunReport
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    RangeError,
    RunCancelledError,
    redact,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.mappedoperator import OperatorPartial

    from dagster_eventhub_ingest.ops.run.cancel import Cancellation

__all__ = ["EventHubIngestOperator", "owner_id_for", "report_to_json"]

_UNSAFE = re.compile(r"[^a-z0-9_.-]+")


def _owner_prefix(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    # Owner ids name heartbeat blobs: keep them short and blob-name safe, readable in logs, and
    # unique per task instance (the hash covers the raw ids the sanitizing may have merged).
    key = f"{dag_id}\x00{run_id}\x00{task_id}\x00{map_index}".encode()
    digest = hashlib.sha1(key, usedforsecurity=False).hexdigest()[:12]
    label = _UNSAFE.sub("_", f"{dag_id}.{task_id}".lower())[:60]
    index = "" if map_index < 0 else f"-{map_index}"
    return f"airflow-{label}{index}-{digest}-try"


def owner_id_for(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
    """The lease owner id of one task try: the task instance (run id) plus the try number."""
    return f"{_owner_prefix(dag_id, run_id, task_id, map_index)}{try_number}"


def earlier_try_is_dead(
    dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int
) -> Callable[[str], bool]:
    """``is_owner_dead`` for a try: this task instance's earlier tries are over.

    Airflow starts try N only once try N-1 has ended (failed, or its worker was lost), so try N
    takes over the leases and pending intents of the earlier tries at once, without waiting for
    them to expire.
    """
    prefix = _owner_prefix(dag_id, run_id, task_id, map_index)

    def is_dead(owner_id: str) -> bool:
        if not owner_id.startswith(prefix):
            return False
        rest = owner_id[len(prefix) :]
        return rest.isdigit() and int(rest) < try_number

    return is_dead


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def report_to_json(report: RunReport) -> dict[str, Any]:
    """The run report as a JSON-ready dict (the operator's XCom ``return_value``)."""
    return {
        "owner_id": report.owner_id,
        "hub": report.hub,
        "consumer_group": report.consumer_group,
        "complete": report.complete,
        "incomplete_partitions": report.incomplete_partitions,
        "events": report.events,
        "bytes": report.bytes,
        "cycles": report.cycles,
        "output_location": report.output_location,
        "started_at": _iso(report.started_at),
        "finished_at": _iso(report.finished_at),
        "phases": report.phases,
        "partitions": {
            pid: {
                "events": r.events,
                "bytes": r.bytes,
                "first_sequence_number": r.first_sequence_number,
                "last_sequence_number": r.last_sequence_number,
                "first_enqueued_time": _iso(r.first_enqueued_time),
                "last_enqueued_time": _iso(r.last_enqueued_time),
                "checkpoint_sequence_number": r.checkpoint_sequence_number,
                "snapshot_end_sequence_number": r.snapshot_end_sequence_number,
                "last_enqueued_sequence_number": r.last_enqueued_sequence_number,
                "lag_events": r.lag_events,
                "lag_seconds": r.lag_seconds,
                "read_by": list(r.read_by),
                "ranges_written": [list(x) for x in r.ranges_written],
                "skipped_ranges": [list(x) for x in r.skipped_ranges],
                "up_to_date": r.up_to_date,
            }
            for pid, r in report.partitions.items()
        },
    }


class EventHubIngestOperator(BaseOperator):
    """Bring the hub's partitions up to date in the sink, exactly once, in one task try.

    Runs ``dagster_eventhub_ingest.ops.run.entry.run_ingestion`` (the run a Dagster asset
    materialization makes) with the configuration
    :class:`~dagster_eventhub_ingest.airflow_provider.hooks.EventHubIngestHook` builds from the
    connections. The lease owner id is the task instance plus its try number, so a retry takes over
    the leases and pending intents of its own failed try at once and replays exactly the recorded
    ranges. The run report is the task's XCom ``return_value`` (JSON).

    K copies that share the partitions between them (each one a balanced share)::

        EventHubIngestOperator.partial(task_id="ingest").expand(copy_index=list(range(K)))

    Failures: a configuration error (bad connection, unknown option or partition) fails the
    task without retries; an unreachable service raises an error Airflow retries; a run that
    ends with partitions behind (``run_timeout_seconds``, a lost lease) pushes its report and
    fails, so a retry continues.

    Killed (SIGTERM to the task, which Airflow turns into :meth:`on_kill`; an
    ``execution_timeout``): the run stops reading, releases its leases with their intents kept
    (the next try takes over at once) and fails the try. Whatever the outcome, the local Spark
    session the task started is stopped with its JVM and Python workers before ``execute``
    returns: the task's process then exits at once, which is what makes Airflow record the
    state the task reported (a process still alive past ``task_success_overtime`` is killed,
    and a killed process is retried even after ``AirflowFailException``).

    Args:
        eventhub_conn_id / store_conn_id / sink_conn_id: the connections (docs/airflow.md);
            the store may be an existing ``wasb`` connection of the Azure provider.
        store_container: the store's Blob container (required with a ``wasb`` connection).
        partition_ids: target partitions (templated); default every partition.
        options: run options, the keys of the CLI's config file (``strategy``,
            ``max_events_per_partition``, ``lease_expiry_seconds``, ``join_grace_seconds``...);
            templated. Checked when the DAG file is parsed (here and in ``partial``), with the
            CLI's message; a value holding a template is checked once rendered, in execute.
        copy_index: which of K mapped copies this is (set by ``expand``; shown in logs only).
    """

    template_fields: Sequence[str] = ("partition_ids", "options")
    ui_color = "#b8d8f0"

    def __init__(
        self,
        *,
        eventhub_conn_id: str = DEFAULT_EVENTHUB_CONN_ID,
        store_conn_id: str = DEFAULT_STORE_CONN_ID,
        sink_conn_id: str = DEFAULT_SINK_CONN_ID,
        store_container: str | None = None,
        partition_ids: Sequence[str | int] | None = None,
        options: Mapping[str, Any] | None = None,
        copy_index: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.eventhub_conn_id = eventhub_conn_id
        self.store_conn_id = store_conn_id
        self.sink_conn_id = sink_conn_id
        self.store_container = store_container
        self.partition_ids = partition_ids
        self.options = dict(options or {})
        check_run_options(self.options)
        self.copy_index = copy_index

    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """``BaseOperator.partial``, with ``options`` checked now, when the DAG file is parsed
        (a mapped task is built only when it runs)."""
        check_run_options(kwargs.get("options"))
        return super().partial(**kwargs)

    def execute(self, context: Any) -> dict[str, Any]:
        """One ingestion run; returns the report (XCom)."""
        started = time.perf_counter(), time.process_time()
        from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook
        from dagster_eventhub_ingest.ops.run.entry import run_ingestion
        from dagster_eventhub_ingest.ops.run.progress import PhaseClock

        ti = context["ti"]
        hook = EventHubIngestHook(
            self.eventhub_conn_id, self.store_conn_id, self.sink_conn_id, self.store_container
        )
        try:
            config = hook.get_ingest_settings(self.options)
            spark_factory = hook.get_spark_factory()
        except ConfigurationError as exc:
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from None
        from dagster_eventhub_ingest.ops.run.cancel import Cancellation
        from dagster_eventhub_ingest.resources.spark.owned import OwnedSession

        key = (ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number)
        owner = owner_id_for(*key)
        self.log.info(
            "ingest hub=%s consumer_group=%s owner=%s%s",
            config.eventhub.eventhub_name,
            config.eventhub.consumer_group,
            owner,
            "" if self.copy_index is None else f" (copy {self.copy_index})",
        )
        cancel = Cancellation()
        self._cancel: Cancellation | None = cancel
        session = OwnedSession(spark_factory)
        clock = PhaseClock()
        # The imports and the connections read before the run: the task's share of start-up.
        clock.add("startup", time.perf_counter() - started[0], time.process_time() - started[1])
        cancel.on_force(lambda: session.close(keep_archive=False, wait=2.0))
        try:
            report = run_ingestion(
                config,
                None,
                owner_id=owner,
                partition_ids=partition_list(self.partition_ids),
                is_owner_dead=earlier_try_is_dead(*key),
                log=self.log,
                spark_factory=session.get,
                phases=clock,
                cancel=cancel,
            )
        except RunCancelledError as exc:
            raise AirflowException(f"stopped: {exc}") from None
        except (ConfigurationError, RangeError) as exc:
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from None
        except EventHubIngestError as exc:
            if exc.retryable:
                raise AirflowException(f"{type(exc).__name__}: {exc}") from None
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from None
        except AirflowException:
            raise
        except Exception as exc:  # anything unexpected still leaves without a secret
            raise AirflowException(f"{type(exc).__name__}: {redact(str(exc))[:2000]}") from None
        finally:
            # Nothing of the run may outlive execute (see the class docstring); a stopped run
            # does not wait for its JVM to write a class-data archive.
            with clock.phase("spark_stop"):
                session.close(keep_archive=not cancel.cancelled)
            self._cancel = None
        report.phases = clock.as_dict()
        self.log.info("task phases owner=%s: %s", owner, clock.line())
        payload = report_to_json(report)
        self.log.info(
            "owner=%s wrote %d events (%d bytes) in %d cycles -> %s; %s",
            owner,
            report.events,
            report.bytes,
            report.cycles,
            report.output_location,
            "complete" if report.complete else f"INCOMPLETE {report.incomplete_partitions}",
        )
        if not report.complete:
            ti.xcom_push(key="return_value", value=payload)
            raise AirflowException(
                f"partitions {report.incomplete_partitions} did not reach this run's bound "
                "(run_timeout_seconds, or a lease lost to a peer); a retry continues from the "
                "checkpoints"
            )
        return payload

    def on_kill(self) -> None:
        """Stop the running ingestion cleanly (Airflow calls it on SIGTERM and on a timeout):
        only asks, from Airflow's signal handler; ``execute`` winds the run down and fails."""
        cancel: Cancellation | None = getattr(self, "_cancel", None)
        if cancel is not None:
            cancel.cancel("Airflow killed the task (on_kill)", signum=signal.SIGTERM)
