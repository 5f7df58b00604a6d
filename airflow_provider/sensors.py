"""``EventHubLagSensor``: wait for work (or for a hub to catch up) without holding a worker slot."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from dagster_eventhub_ingest.airflow_provider._config import conf
from dagster_eventhub_ingest.airflow_provider._connections import (
    DEFAULT_EVENTHUB_CONN_ID,
    DEFAULT_STORE_CONN_ID,
    partition_list,
)
from dagster_eventhub_ingest.airflow_provider._lag import (
    condition_met,
    lag_per_partition,
    validate_thresholds,
)
from dagster_eventhub_ingest.airflow_provider.triggers import EventHubLagTrigger
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    EventHubUnavailableError,
    RangeError,
)

__all__ = ["EventHubLagSensor"]


class EventHubLagSensor(BaseSensorOperator):
    """Waits until lag per partition crosses a threshold; deferrable by default.

    Give exactly one of:

    - ``min_lag_events``: succeed once SOME target partition has at least this many
      unprocessed events (there is work: start an ingestion only then);
    - ``max_lag_events``: succeed once EVERY target partition has at most this many
      (the hub has caught up, e.g. before a downstream job).

    Lag is what ``ehingest status`` and the Dagster lag check report: events after the
    partition's checkpoint in the consumer group's store. It looks once in its worker slot;
    deferrable, it waits only if the condition does not hold yet, as
    :class:`EventHubLagTrigger` on the triggerer with the async Azure SDK clients; with
    ``deferrable=False`` it pokes with the sync clients. ``deferrable`` defaults to Airflow's
    ``[operators] default_deferrable``. The result (XCom) is the lag per
    partition. With ``soft_fail=True`` a timeout skips the downstream tasks instead of failing.

    Example::

        EventHubLagSensor(task_id="has_work", min_lag_events=1, poke_interval=30,
                          timeout=240, soft_fail=True)
    """

    template_fields: Sequence[str] = ("partition_ids",)
    ui_color = "#d5e8f7"

    def __init__(
        self,
        *,
        eventhub_conn_id: str = DEFAULT_EVENTHUB_CONN_ID,
        store_conn_id: str = DEFAULT_STORE_CONN_ID,
        store_container: str | None = None,
        partition_ids: Sequence[str | int] | None = None,
        min_lag_events: int | None = None,
        max_lag_events: int | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        try:
            validate_thresholds(min_lag_events, max_lag_events)
        except ConfigurationError as exc:
            raise ValueError(f"EventHubLagSensor {self.task_id!r}: {exc}") from None
        self.eventhub_conn_id = eventhub_conn_id
        self.store_conn_id = store_conn_id
        self.store_container = store_container
        self.partition_ids = partition_ids
        self.min_lag_events = min_lag_events
        self.max_lag_events = max_lag_events
        self.deferrable = deferrable

    def _hook(self) -> Any:
        from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook

        return EventHubIngestHook(
            self.eventhub_conn_id, self.store_conn_id, store_container=self.store_container
        )

    def poke(self, context: Any) -> PokeReturnValue:
        """One look with the sync clients (``deferrable=False``)."""
        hook = self._hook()
        try:
            lag = lag_per_partition(
                hook.get_eventhub_settings(),
                hook.get_store_settings(),
                partition_list(self.partition_ids),
            )
        except (ConfigurationError, RangeError) as exc:
            # Not an AirflowException: soft_fail must not turn a broken setup into a skip.
            raise type(exc)(f"EventHubLagSensor {self.task_id!r}: {exc}") from None
        self.log.info("lag per partition: %s", lag)
        return PokeReturnValue(
            is_done=condition_met(lag, self.min_lag_events, self.max_lag_events), xcom_value=lag
        )

    def execute(self, context: Any) -> Any:
        """Look once here; defer to the triggerer only if the condition does not hold yet.

        A tick whose hub already has work (or has caught up) then ends in this slot, without
        the triggerer's round trip (the trigger's first poll, then the task resumed in a new
        worker process); the Azure provider's deferrable sensors (``WasbBlobSensor``) look
        first the same way. A configuration error fails here; any other failed look leaves
        the wait to the trigger, which looks again (up to ``max_failures`` in a row). With
        ``deferrable=False`` every look is a poke in this slot.
        """
        if not self.deferrable:
            return super().execute(context)
        try:
            first = self.poke(context)
        except (ConfigurationError, RangeError):
            raise
        except EventHubIngestError as exc:  # what the trigger counts as a failed poll
            self.log.warning("lag look failed, the trigger looks again: %s", exc)
        else:
            if first.is_done:
                return first.xcom_value
        self.defer(
            trigger=EventHubLagTrigger(
                eventhub_conn_id=self.eventhub_conn_id,
                store_conn_id=self.store_conn_id,
                store_container=self.store_container,
                partition_ids=partition_list(self.partition_ids),
                min_lag_events=self.min_lag_events,
                max_lag_events=self.max_lag_events,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger fired: return the lag, or fail with the trigger's message."""
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "the lag trigger ended without an event")
            # The project's own errors, not AirflowException: soft_fail turns those into a
            # skip, and a broken connection must fail visibly, not skip every 5 minutes.
            error = (
                ConfigurationError
                if (event or {}).get("kind") == "configuration"
                else (EventHubUnavailableError)
            )
            raise error(f"EventHubLagSensor {self.task_id!r}: {message}")
        self.log.info("lag per partition: %s", event["lag"])
        return event["lag"]
